"""Empirical support: taxonomy counts, paired pass@k bootstrap, crossover k, answer entropy, distinct-n."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_helpers import flags, record, write_run

from sagerl.analysis import (
    answer_entropy,
    distinct_n,
    load_eval_run,
    paired_passk,
    solution_diversity,
    support_taxonomy,
)
from sagerl.analysis.support import analyze_support, crossover_k
from sagerl.errors import SagerlError

N = 4


@pytest.fixture
def pair(tmp_path):
    """Base and run on 6 problems of one dataset plus 2 of another, with known categories."""
    base = write_run(
        tmp_path / "base",
        {
            "d1": {
                "keep1": flags(2, N),
                "keep2": flags(1, N),
                "lost": flags(1, N),
                "new1": flags(0, N),
                "new2": flags(0, N),
                "none": flags(0, N),
            },
            "d2": {"x": flags(4, N), "y": flags(0, N)},
        },
    )
    run = write_run(
        tmp_path / "run",
        {
            "d1": {
                "keep1": flags(4, N),
                "keep2": flags(1, N),
                "lost": flags(0, N),
                "new1": flags(3, N),
                "new2": flags(1, N),
                "none": flags(0, N),
            },
            "d2": {"x": flags(4, N), "y": flags(2, N)},
        },
    )
    return load_eval_run(base), load_eval_run(run)


def test_taxonomy_counts_and_ids(pair):
    base, run = pair
    tax = support_taxonomy(base, run)
    d1 = tax["datasets"]["d1"]
    assert d1["counts"] == {"preserved": 2, "expanded": 2, "shrunk": 1, "never_solved": 1}
    assert d1["problems"]["expanded"] == ["new1", "new2"] and d1["problems"]["shrunk"] == ["lost"]
    assert d1["shares"]["preserved"] == pytest.approx(2 / 6)
    assert tax["datasets"]["d2"]["counts"] == {"preserved": 1, "expanded": 1, "shrunk": 0, "never_solved": 0}
    assert tax["total"]["counts"] == {"preserved": 3, "expanded": 3, "shrunk": 1, "never_solved": 1}
    assert tax["n"] == N


def test_identical_runs_have_zero_difference_and_a_zero_ci(pair):
    base, _ = pair
    result = paired_passk(base, base)
    for entry in (*result["datasets"].values(), result["average"]):
        assert all(v == 0.0 for v in entry["difference"].values())
        assert all(ci == [0.0, 0.0] for ci in entry["ci"].values())
        assert entry["crossover_k"] is None


def test_paired_difference_known_values(pair):
    base, run = pair
    result = paired_passk(base, run, ks=[1, 4])
    d1 = result["datasets"]["d1"]
    # pass@1 = c/n per problem: run (4+1+0+3+1+0)/24, base (2+1+1+0+0+0)/24
    assert d1["difference"]["pass@1"] == pytest.approx((9 - 4) / 24)
    # pass@4 = solved share: run 4/6, base 3/6
    assert d1["difference"]["pass@4"] == pytest.approx(1 / 6)
    lo, hi = d1["ci"]["pass@1"]
    assert lo <= d1["difference"]["pass@1"] <= hi
    avg = result["average"]["difference"]["pass@1"]
    assert avg == pytest.approx(((9 - 4) / 24 + 2 / 8) / 2)  # equal weight per dataset


def test_run_better_on_every_problem_has_a_positive_ci(tmp_path):
    base = load_eval_run(write_run(tmp_path / "b", {"d": {f"p{i}": flags(i % 3, N) for i in range(12)}}))
    run = load_eval_run(write_run(tmp_path / "r", {"d": {f"p{i}": flags(i % 3 + 1, N) for i in range(12)}}))
    ci = paired_passk(base, run, ks=[1])["datasets"]["d"]["ci"]["pass@1"]
    # every problem gains exactly one correct sample: d_p = 1/4 for all p, so every resample gives 1/4
    assert ci == [pytest.approx(0.25), pytest.approx(0.25)]


def test_crossover_where_the_base_overtakes(tmp_path):
    # base spreads: 1 correct on each of 2 problems; run concentrates: 4 on one, 0 on the other.
    base = load_eval_run(write_run(tmp_path / "b", {"d": {"p": flags(1, N), "q": flags(1, N)}}))
    run = load_eval_run(write_run(tmp_path / "r", {"d": {"p": flags(4, N), "q": flags(0, N)}}))
    result = paired_passk(base, run)
    diff = result["datasets"]["d"]["difference"]
    assert (
        diff["pass@1"] == pytest.approx(0.25)
        and diff["pass@2"] == 0.0
        and diff["pass@4"] == pytest.approx(-0.5)
    )
    assert result["datasets"]["d"]["crossover_k"] == 4
    assert result["average"]["crossover_k"] == 4


def test_crossover_k_rules():
    ks = [1, 2, 4, 8]
    assert crossover_k(ks, [0.1, 0.05, -0.01, -0.02]) == 4
    assert crossover_k(ks, [0.1, -0.05, 0.01, -0.02]) == 8  # the base must stay ahead to the end
    assert crossover_k(ks, [-0.1, -0.05, -0.01, -0.02]) is None  # ahead from the start: nothing overtaken
    assert crossover_k(ks, [0.1, 0.0, 0.2, 0.0]) is None


def test_mismatched_runs_fail_unless_intersect(tmp_path, pair):
    base, _ = pair
    other = load_eval_run(
        write_run(
            tmp_path / "o", {"d1": {"keep1": flags(1, N), "zzz": flags(1, N)}, "d2": {"x": flags(1, N)}}
        )
    )
    with pytest.raises(SagerlError, match="different problems in 'd1'"):
        support_taxonomy(base, other)
    tax = support_taxonomy(base, other, intersect=True)
    assert tax["datasets"]["d1"]["num_problems"] == 1 and tax["dropped_problems"] == {"d1": 5, "d2": 1}


def test_answer_entropy_known_distributions():
    assert answer_entropy(["1", "2", "3", "4"]) == pytest.approx(math.log(4))
    assert answer_entropy(["5"] * 8) == 0.0
    assert answer_entropy(["1", None, "1", ""]) == pytest.approx(math.log(2))  # missing answers: one category
    assert answer_entropy(["a", "a", "a", "b"]) == pytest.approx(
        -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    )
    with pytest.raises(ValueError):
        answer_entropy([])


def test_distinct_n_known_texts():
    assert distinct_n(["a b a b"]) == pytest.approx(2 / 3)  # (a,b) (b,a) (a,b)
    assert distinct_n(["x y z", "X y w"]) == pytest.approx(3 / 4)  # lowercased: (x,y) twice
    assert distinct_n(["one two three"], n=1) == 1.0
    assert math.isnan(distinct_n(["single"]))


def test_solution_diversity_values(tmp_path):
    recs = [
        record("d", "p", 0, True, text="Let x be the number. x + 1 = 2", extracted="1"),
        record("d", "p", 1, True, text="We split into two cases and check", extracted="1"),
        record("d", "p", 2, False, text="no idea", extracted=None),
        record("d", "p", 3, False, text="maybe", extracted="3"),
    ]
    run = load_eval_run(write_run(tmp_path / "r", {"d": {"p": recs, "q": flags(0, 4)}}))
    div = solution_diversity(run, "lexicon")
    d = div["datasets"]["d"]
    # p: answers 1,1,<none>,3 -> H = -(.5 ln .5 + 2 * .25 ln .25); q: four "0" answers -> 0
    h_p = -(0.5 * math.log(0.5) + 0.5 * math.log(0.25))
    assert d["answer_entropy"]["mean"] == pytest.approx(h_p / 2) and d["answer_entropy"]["num_problems"] == 2
    # correct completions of p: constraint_setup and case_analysis; q has none (not counted)
    assert d["distinct_strategies"]["mean"] == 2.0 and d["distinct_strategies"]["num_problems"] == 1
    grams = 7 + 6  # two texts of 8 and 7 words, no repeated bigram
    assert d["distinct_n"]["mean"] == pytest.approx(grams / grams)


def test_analyze_support_writes_the_figure(tmp_path, pair):
    base, run = pair
    result = analyze_support(base, [run], tmp_path / "out")
    assert (tmp_path / "out" / "support_passk.png").stat().st_size > 0
    assert (
        set(result["diversity"]) == {"base", "run"}
        and result["taxonomy"]["run"]["total"]["counts"]["expanded"] == 3
    )
    assert np.isfinite(result["passk"]["run"]["average"]["difference"]["pass@1"])
