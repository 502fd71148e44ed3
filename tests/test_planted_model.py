"""The planted task's built models: the strategy frequencies they were planted with are the ones they sample."""

from __future__ import annotations

import json
import math

import pytest

from sagerl.tasks.planted import END_MARKS, REFERENCE_MIX, STRATEGIES, TEACHER_MIX


def planted_entropy(mix: dict[str, float]) -> float:
    """Entropy (nats) of the first completion token under a mix: each marker's first character."""
    probs = [share * weight for name, share in mix.items() for _, weight in STRATEGIES[name].markers]
    return -sum(p * math.log(p) for p in probs if p > 0)


@pytest.fixture(scope="module")
def reports():
    from sagerl.tasks.planted_model import REPORT_FILE, build_planted_model

    return {
        role: json.loads((build_planted_model(role) / REPORT_FILE).read_text())
        for role in ("reference", "teacher")
    }


def test_reference_samples_the_planted_frequencies(reports):
    ref = reports["reference"]
    measured = ref["measured"]["all"]  # 1000 held-out problems, one sample each, temperature 1
    assert ref["planted"] == REFERENCE_MIX
    for name, share in REFERENCE_MIX.items():
        assert (
            abs(measured.get(name, 0.0) - share) < 4 * math.sqrt(share * (1 - share) / ref["samples"]) + 0.005
        )
    assert measured.get("none", 0.0) < 0.02  # almost every completion is a well-formed trace
    # the rare strategy is inside the reference's support but rarely sampled, and carried out right
    assert 0.005 < measured["tail"] < 0.05
    assert ref["pass@1"]["rare"] > 0.6 * ref["measured"]["rare"]["tail"]
    assert ref["pass@1"]["common"] > 0.8
    # the decision is a many-way choice, and the rare strategy's end mark a second uncertain one
    assert ref["decision_entropy"] == pytest.approx(planted_entropy(REFERENCE_MIX), abs=0.15)
    assert ref["end_entropy"] == pytest.approx(math.log(len(END_MARKS)), abs=0.15)


def test_teacher_uses_the_rare_strategy_ten_times_as_often(reports):
    teacher = reports["teacher"]
    assert teacher["planted"] == TEACHER_MIX
    assert abs(teacher["measured"]["all"]["tail"] - TEACHER_MIX["tail"]) < 0.06
    assert teacher["measured"]["all"]["tail"] > 8 * reports["reference"]["measured"]["all"]["tail"]
    assert teacher["pass@1"]["rare"] > 0.25


def test_a_misspelled_built_in_name_fails_at_once_with_a_suggestion(tmp_path):
    from sagerl.errors import ModelLoadError
    from sagerl.models import load_config, resolve_model

    with pytest.raises(ModelLoadError, match=r"'planted-referenc' .*did you mean 'planted-reference'"):
        load_config("planted-referenc")  # no hub lookup (which retries for half a minute offline)
    with pytest.raises(ModelLoadError, match=r"did you mean 'smollm2-135m-instruct'"):
        resolve_model("smollm2-135m-instruc")
    for other in ("gpt2", "Qwen/Qwen2.5-Math-7B", "planted-referenc/x", str(tmp_path)):
        assert resolve_model(other) == other  # hub ids, paths and unrelated names pass through
