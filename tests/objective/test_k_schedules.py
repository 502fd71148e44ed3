"""The schedules over optimizer steps that move the k of pass@k (PKPO's annealing, Pass@k Training's two stages)."""

from __future__ import annotations

import pytest

from sagerl.objective import SCHEDULES, LinearSchedule, StepSchedule, integer_at, make_schedule


def test_the_kinds():
    assert SCHEDULES == ("constant", "cosine", "linear", "step")
    assert [integer_at(make_schedule("constant", 4, total_steps=10), s) for s in (0, 5, 10)] == [4, 4, 4]
    # PKPO annealed n -> 1 over 100 steps, linearly: k = round(8 − 7·s/100)
    anneal = make_schedule("linear", 8, lower=1, total_steps=100)
    assert isinstance(anneal, LinearSchedule)
    assert [integer_at(anneal, s) for s in (0, 7, 8, 50, 93, 100, 150)] == [8, 8, 7, 5, 1, 1, 1]
    # Pass@k Training's two stages: k = 4 for the first half, then k = 1 (pass@1 training)
    two_stage = make_schedule("step", 4, lower=1, total_steps=100, switch=0.5)
    assert isinstance(two_stage, StepSchedule)
    assert [integer_at(two_stage, s) for s in (0, 49, 50, 99)] == [4, 4, 1, 1]
    # cosine from k_start to k_end, rising too
    cosine = make_schedule("cosine", 1, lower=8, total_steps=100)
    assert [integer_at(cosine, s) for s in (0, 50, 100)] == [1, 5, 8]


@pytest.mark.parametrize("kind", ["linear", "cosine", "step"])
@pytest.mark.parametrize("start, end", [(8, 1), (2, 6), (4, 4)])
def test_k_stays_between_its_end_points_at_every_step(kind, start, end):
    schedule = make_schedule(kind, start, lower=end, total_steps=37, switch=0.3)
    ks = [integer_at(schedule, s) for s in range(0, 40)]
    assert min(start, end) <= min(ks) and max(ks) <= max(start, end)
    assert ks[0] == start and ks[37] == end


def test_bad_settings():
    with pytest.raises(ValueError, match="unknown schedule 'exp'"):
        make_schedule("exp", 4)
    with pytest.raises(ValueError, match=r"switch=0 must be a number in \(0, 1\]"):
        make_schedule("step", 4, lower=1, total_steps=10, switch=0)
    with pytest.raises(ValueError, match=r"total_steps=0 must be an integer in \[1, inf\)"):
        make_schedule("linear", 4, lower=1, total_steps=0)
