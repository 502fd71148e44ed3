"""The README's account of ``make demo`` states what the demo runs (issue 9, fault 8)."""

from __future__ import annotations

import re
from pathlib import Path

from sagerl import demo

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _demo_section() -> str:
    start = README.index("### What `make demo` shows")
    return README[start : README.index("\n## ", start)]


def test_readme_states_the_demo_settings() -> None:
    section = _demo_section()
    evaluation = re.search(
        r"samples (\d+) completions for each of (\d+) held-out arithmetic problems", section
    )
    assert evaluation, "the README no longer says how the demo evaluates"
    assert (int(evaluation[1]), int(evaluation[2])) == (demo.SAMPLES, demo.PROBLEMS)
    assert f"pass@1…pass@{demo.SAMPLES}" in section
    training = re.search(r"trains `([^`]+)` .*? for (\d+) steps of (\d+) prompts? × (\d+) rollouts", section)
    assert training, "the README no longer says how the demo trains"
    prompts, rollouts = demo.prompts_and_rollouts_per_step(
        demo.train_overrides(demo.STEPS, demo.MAX_NEW_TOKENS, demo.LEARNING_RATE)
    )
    assert (training[1], int(training[2]), int(training[3]), int(training[4])) == (
        demo.PRESET,
        demo.STEPS,
        prompts,
        rollouts,
    )


def test_demo_defaults_are_its_command_line_defaults(monkeypatch) -> None:
    captured = []
    monkeypatch.setattr(demo, "run_demo", lambda settings: captured.append(settings))
    demo.main([])
    assert captured == [demo.DemoSettings()]
    assert (captured[0].steps, captured[0].problems, captured[0].n) == (
        demo.STEPS,
        demo.PROBLEMS,
        demo.SAMPLES,
    )
    assert (captured[0].max_new_tokens, captured[0].learning_rate) == (
        demo.MAX_NEW_TOKENS,
        demo.LEARNING_RATE,
    )
    assert demo.prompts_and_rollouts_per_step(demo.train_overrides(3, 16, 1e-5)) == (1, 8)
