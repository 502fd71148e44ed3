"""Pattern labels: the lexicon's precision and recall on the hand-labelled sets (the values the module
docstring states), the fast path against the plain regexes, the recorded classifier, shares with CIs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from analysis_helpers import record, write_run

from sagerl.analysis import compare_shares, lexicon_labels, load_eval_run, pattern_shares
from sagerl.analysis.patterns import (
    DIRECT,
    TAXONOMY,
    lexicon_labels_slow,
    precision_recall,
    resolve_classifier,
)
from sagerl.errors import ConfigError

HERE = Path(__file__).resolve().parent

# (precision, recall) per pattern as stated in the sagerl.analysis.patterns docstring
STATED = {
    "labelled_solutions.jsonl": {
        "constraint_setup": (0.80, 1.00),
        "case_analysis": (1.00, 0.80),
        "contradiction": (1.00, 1.00),
        "working_backwards": (1.00, 1.00),
        "substitution": (1.00, 1.00),
        "enumeration": (1.00, 1.00),
        "verification": (1.00, 1.00),
        "modular_arithmetic": (0.75, 1.00),
        "symmetry_invariant": (1.00, 1.00),
        "induction": (1.00, 1.00),
        "construction": (1.00, 1.00),
        "bounding": (1.00, 1.00),
        "direct_computation": (1.00, 1.00),
    },
    "labelled_solutions_heldout.jsonl": {
        "constraint_setup": (1.00, 0.00),
        "case_analysis": (1.00, 0.00),
        "contradiction": (1.00, 0.00),
        "working_backwards": (1.00, 1.00),
        "substitution": (1.00, 0.00),
        "enumeration": (1.00, 0.50),
        "verification": (1.00, 0.50),
        "modular_arithmetic": (1.00, 1.00),
        "symmetry_invariant": (1.00, 1.00),
        "induction": (1.00, 1.00),
        "construction": (1.00, 0.00),
        "bounding": (1.00, 1.00),
        "direct_computation": (0.14, 1.00),
    },
}


def labelled(name: str) -> list[dict]:
    return [
        json.loads(line) for line in (HERE / name).read_text(encoding="utf-8").splitlines() if line.strip()
    ]


@pytest.mark.parametrize("name", sorted(STATED))
def test_lexicon_precision_recall_on_the_labelled_set(name):
    rows = labelled(name)
    assert len(rows) >= (30 if name == "labelled_solutions.jsonl" else 15)
    assert all(set(r["labels"]) <= set(TAXONOMY) for r in rows)
    table = precision_recall([lexicon_labels(r["text"]) for r in rows], [r["labels"] for r in rows])
    print(f"\n{name}: pattern, precision, recall (support)")
    for label, v in table.items():
        print(f"  {label:20s} {v['precision']:.2f} {v['recall']:.2f} ({v['support']})")
    for label, (precision, recall) in STATED[name].items():
        assert table[label]["precision"] >= precision - 0.005, label
        assert table[label]["recall"] >= recall - 0.005, label


def test_every_pattern_has_examples_in_the_labelled_set():
    counts = {t: 0 for t in TAXONOMY}
    for r in labelled("labelled_solutions.jsonl"):
        for lab in r["labels"]:
            counts[lab] += 1
    assert min(counts.values()) >= 3, counts


def test_fast_lexicon_equals_searching_every_cue():
    texts = [r["text"] for name in STATED for r in labelled(name)]
    rng = random.Random(0)
    texts += [" ".join(rng.sample(texts, 5)) for _ in range(200)]
    texts += [
        "Modified remainder-free text",
        "WLOG, x ≡ 1 \\pmod 3",
        "The CASES are: Case 1",
        "a_n = a_{n-1} + 2",
    ]
    for text in texts:
        assert lexicon_labels(text) == lexicon_labels_slow(text), text


def test_direct_computation_rule():
    assert lexicon_labels("3 + 4 = 7. The answer is \\boxed{7}.") == (DIRECT,)
    assert lexicon_labels("3 + 4 = 7. Let's verify: 7 - 4 = 3.") == ("verification", DIRECT)
    assert lexicon_labels("Substituting y = 2 gives x = 3.") == ("substitution",)
    # word boundaries: no cue inside another word
    assert lexicon_labels("The model is modern; a remodel.") == (DIRECT,)


def strategy_run(tmp_path, name, strategies):
    """Problems -> list of (correct, strategy) samples."""
    problems = {
        "d": {
            pid: [record("d", pid, j, ok, strategy=s) for j, (ok, s) in enumerate(samples)]
            for pid, samples in strategies.items()
        }
    }
    return load_eval_run(write_run(tmp_path / name, problems))


def test_recorded_classifier_is_exact(tmp_path):
    run = strategy_run(
        tmp_path,
        "r",
        {
            "p": [(True, "contradiction"), (True, "direct"), (False, "contradiction"), (True, "direct")],
            "q": [(True, "direct"), (False, "direct"), (False, "guess"), (False, "guess")],
        },
    )
    assert resolve_classifier(run, "auto") == "recorded"
    shares = pattern_shares(run)
    assert shares["classifier"] == "recorded"
    correct = shares["correct"]
    assert correct["num_completions"] == 4
    assert (
        correct["shares"]["contradiction"]["share"] == 0.25 and correct["shares"]["direct"]["share"] == 0.75
    )
    assert correct["shares"]["contradiction"]["count"] == 1
    assert "guess" not in correct["shares"] or correct["shares"]["guess"]["count"] == 0
    every = shares["all"]
    assert every["num_completions"] == 8
    assert every["shares"]["guess"]["share"] == 0.25 and every["shares"]["contradiction"]["share"] == 0.25
    for entry in correct["shares"].values():
        lo, hi = entry["ci"]
        assert lo <= entry["share"] <= hi


def test_a_null_strategy_is_unlabeled(tmp_path):
    run = strategy_run(tmp_path, "r", {"p": [(True, "head"), (True, None)]})
    shares = pattern_shares(run)
    assert shares["classifier"] == "recorded"
    assert (
        shares["correct"]["shares"]["unlabeled"]["share"] == 0.5 and shares["correct"]["num_completions"] == 2
    )


def test_auto_falls_back_to_lexicon_when_a_record_lacks_a_strategy(tmp_path):
    run_dir = write_run(
        tmp_path / "r",
        {"d": {"p": [record("d", "p", 0, True, strategy="x"), record("d", "p", 1, True)]}},
    )
    run = load_eval_run(run_dir)
    assert resolve_classifier(run, "auto") == "lexicon"
    with pytest.raises(ConfigError, match="strategy"):
        pattern_shares(run, "recorded")
    with pytest.raises(ConfigError, match="unknown classifier"):
        pattern_shares(run, "magic")
    with pytest.raises(ConfigError, match="needs a judge"):
        pattern_shares(run, "judge")


def test_lexicon_shares_and_constant_ci(tmp_path):
    texts = ["Assume the opposite; this is a contradiction.", "Substitute u = x^2.", "2 + 2 = 4."]
    problems = {
        "d": {
            f"p{i}": [record("d", f"p{i}", 0, True, text=t), record("d", f"p{i}", 1, False, text="?")]
            for i, t in enumerate(texts)
        }
    }
    shares = pattern_shares(load_eval_run(write_run(tmp_path / "r", problems)), "lexicon")
    assert shares["classifier"] == "lexicon"
    c = shares["correct"]["shares"]
    assert c["contradiction"]["share"] == pytest.approx(1 / 3) and c["substitution"][
        "share"
    ] == pytest.approx(1 / 3)
    assert shares["all"]["shares"][DIRECT]["share"] == pytest.approx(4 / 6)  # "?" texts are direct too
    # one correct completion per problem: each replicate's share is a mean of 0/1 over problems
    assert 0.0 <= c["contradiction"]["ci"][0] <= 1 / 3 <= c["contradiction"]["ci"][1] <= 1.0


def test_compare_identical_runs_is_zero(tmp_path):
    run = strategy_run(tmp_path, "r", {"p": [(True, "a"), (True, "b")], "q": [(True, "a"), (False, "b")]})
    other = strategy_run(tmp_path, "s", {"p": [(True, "a"), (True, "a")], "q": [(True, "b"), (False, "b")]})
    same = compare_shares([run, run])
    for entry in same["differences"][run.label].values():
        assert entry["difference"] == 0.0 and entry["ci"] == [0.0, 0.0]
    diff = compare_shares([run, other])["differences"]["s"]
    assert diff["a"]["difference"] == pytest.approx(0.0)  # a in 2 of 3 correct completions in both runs
    third = strategy_run(tmp_path, "t", {"p": [(True, "b"), (True, "b")], "q": [(True, "b"), (False, "b")]})
    d = compare_shares([run, third])["differences"]["t"]
    assert d["b"]["difference"] == pytest.approx(1 - 1 / 3) and d["a"]["difference"] == pytest.approx(-2 / 3)


def test_distinct_strategies_use_the_same_labels(tmp_path):
    from sagerl.analysis import solution_diversity

    run = strategy_run(
        tmp_path, "r", {"p": [(True, "a"), (True, "b"), (True, "a"), (False, "c")], "q": [(False, "a")] * 4}
    )
    div = solution_diversity(run)
    assert div["classifier"] == "recorded"
    assert (
        div["all"]["distinct_strategies"]["mean"] == 2.0
        and div["all"]["distinct_strategies"]["num_problems"] == 1
    )
