"""The demo's planted comparison stage: its study is valid and its printout fits 80 columns."""

from __future__ import annotations

from sagerl.demo_planted import BEST, planted_study, rare_support_lines


def test_the_stage_is_a_valid_study_of_grpo_and_the_best_method():
    study = planted_study()
    assert study.cell_names == ["grpo", BEST]
    assert [c.seed for c in study.cells] == [0, 1, 0, 1]
    assert study.paired["baselines"] == ["grpo"] and study.model == "planted-reference"


def test_printout_on_recorded_results():
    def entry(per_seed):
        values = [s["solved/planted_rare"] for s in per_seed.values()]
        return {
            "per_seed": per_seed,
            "summary": {
                "solved/planted_rare": {"mean": sum(values) / len(values)},
                "pass@1/planted_common": {"mean": 0.905},
            },
        }

    data = {
        "reference": {"solved/planted_rare": 42.0, "pass@1/planted_common": 0.838},
        "cells": {
            "grpo": entry({"0": {"solved/planted_rare": 2.0}, "1": {"solved/planted_rare": 0.0}}),
            BEST: entry({"0": {"solved/planted_rare": 30.0}, "1": {"solved/planted_rare": 25.0}}),
        },
    }
    lines = rare_support_lines(data)
    assert lines[0] == "reference model: 42 of 64 rare problems solved (64 samples), common pass@1 83.8%"
    assert lines[2].split() == ["grpo", "2,", "0", "1.0", "90.5%"]
    assert lines[3].split() == [BEST, "30,", "25", "27.5", "90.5%"]
    assert max(len(line) for line in lines) <= 80
