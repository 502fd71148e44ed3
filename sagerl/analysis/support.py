"""Empirical support: which problems and solution modes a run still reaches, compared with a base run.

Problem level (:func:`support_taxonomy`), at the sample budget n of the eval runs: a problem is *solved*
by a run when at least one of its n samples is correct. Against the base run each problem is
*preserved* (both solve it), *expanded* (only the run), *shrunk* (only the base) or *never solved*
(neither). Terminology: Wu et al. 2025, "The Invisible Leash: Why RLVR May Not Escape Its Origin"
(arXiv 2507.14843).

Paired pass@k (:func:`paired_passk`): for k = 1, 2, 4, ..., n, the difference pass@k(run) − pass@k(base)
of the unbiased estimator (Chen et al. 2021), with a *paired* bootstrap 95% CI: each replicate resamples
problems once and takes the mean per-problem difference, so problem difficulty cancels. The crossover k is
where the base overtakes the run (Yue et al. 2025, "Does Reinforcement Learning Really Incentivize
Reasoning Capacity in LLMs Beyond the Base Model?", arXiv 2504.13837).

Solution level (:func:`solution_diversity`): per problem, the answer-level entropy of its n final answers,
the number of distinct strategies (pattern labels, :mod:`sagerl.analysis.patterns`) among its correct
completions, and distinct-n of its correct completions; each averaged over problems with a bootstrap CI.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.analysis.patterns import Labeller, run_labels
from sagerl.analysis.runs import EvalRun, align_runs
from sagerl.errors import SagerlError
from sagerl.eval.passk import bootstrap_average_ci, bootstrap_ci, ks_up_to, pass_at_k_matrix

CATEGORIES = ("preserved", "expanded", "shrunk", "never_solved")
NO_ANSWER = "<none>"
"""The category of a sample without an extracted final answer, in :func:`answer_entropy`."""


def support_taxonomy(base: EvalRun, run: EvalRun, intersect: bool = False) -> dict[str, Any]:
    """Problem-level support of ``run`` against ``base`` at their common sample budget n.

    Args:
        base: the reference run (e.g. the model before RL).
        run: the run to compare (e.g. after RL).
        intersect: compare the problems both runs have (and the smaller n) instead of failing.

    Returns:
        ``{"n", "dropped_problems": {dataset: count}, "datasets": {name: entry}, "total": entry}`` with
        entry = ``{"num_problems", "counts": {category: int}, "shares": {category: float},
        "problems": {category: [ids]}}`` (``total`` sums the datasets and has no ids) for the categories
        :data:`CATEGORIES`.

    Raises:
        SagerlError: different problem sets or n without ``intersect`` (names the runs and the first
            mismatching ids).
    """
    (base, run), note = align_runs([base, run], intersect=intersect)
    datasets: dict[str, Any] = {}
    total = Counter()
    for ds in base.datasets:
        b = base.correct_counts(ds) > 0
        r = run.correct_counts(ds) > 0
        masks = {"preserved": b & r, "expanded": ~b & r, "shrunk": b & ~r, "never_solved": ~b & ~r}
        ids = base.problem_ids[ds]
        counts = {c: int(m.sum()) for c, m in masks.items()}
        total.update(counts)
        datasets[ds] = {
            "num_problems": len(ids),
            "counts": counts,
            "shares": {c: counts[c] / len(ids) for c in CATEGORIES},
            "problems": {c: [pid for pid, hit in zip(ids, m, strict=True) if hit] for c, m in masks.items()},
        }
    num = sum(total.values())
    return {
        "n": note["n"],
        "dropped_problems": note["dropped_problems"],
        "datasets": datasets,
        "total": {
            "num_problems": num,
            "counts": {c: int(total[c]) for c in CATEGORIES},
            "shares": {c: total[c] / num for c in CATEGORIES},
        },
    }


def crossover_k(ks: Sequence[int], differences: Sequence[float]) -> int | None:
    """The k at which the base overtakes the run: the smallest k such that the run is behind
    (difference < 0) at k and at every larger k reported, while it was level or ahead at the k before.

    Returns None when the run is level or ahead at the largest k, or behind at every k (the base leads
    from the start, so nothing is overtaken).
    """
    start = None
    for i in range(len(ks) - 1, -1, -1):
        if differences[i] < 0:
            start = i
        else:
            break
    if start is None or start == 0:
        return None
    return int(ks[start])


def paired_passk(
    base: EvalRun, run: EvalRun, ks: Sequence[int] | None = None, *, intersect: bool = False
) -> dict[str, Any]:
    """pass@k(run) − pass@k(base) per k with paired bootstrap 95% CIs over problems, and the crossover k.

    Per problem p, d_p(k) = pass@k(run)_p − pass@k(base)_p (the unbiased estimator for both); the
    difference is the mean of d_p over problems and the CI the percentile interval of that mean over
    problem resamples (:func:`sagerl.eval.passk.bootstrap_ci` applied to d, which is exactly the paired
    bootstrap: one draw of problems serves both runs). The average over datasets weights each dataset
    equally, resampling problems within each (:func:`sagerl.eval.passk.bootstrap_average_ci`).

    Args:
        base, run: eval runs on the same problems with the same n.
        ks: budgets (default 1, 2, 4, ..., n); each in [1, n].
        intersect: compare the common problems (and the smaller n) instead of failing.

    Returns:
        ``{"n", "ks", "dropped_problems", "datasets": {name: entry}, "average": entry}`` with entry =
        ``{"base": {"pass@k": v}, "run": {...}, "difference": {...}, "ci": {"pass@k": [lo, hi]},
        "crossover_k": k or None, "num_problems": P}``.

    Raises:
        SagerlError: mismatched runs without ``intersect``, or a k outside [1, n].
    """
    (base, run), note = align_runs([base, run], intersect=intersect)
    n = base.n
    ks = list(ks) if ks else ks_up_to(n)
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise SagerlError(f"k must be between 1 and n={n}, got {bad}")
    diffs, bases, runs = [], [], []
    datasets: dict[str, Any] = {}
    for ds in base.datasets:
        mb = pass_at_k_matrix(n, base.correct_counts(ds), ks)  # (P, K)
        mr = pass_at_k_matrix(n, run.correct_counts(ds), ks)
        d = mr - mb
        diffs.append(d)
        bases.append(mb.mean(axis=0))
        runs.append(mr.mean(axis=0))
        datasets[ds] = _entry(ks, mb.mean(axis=0), mr.mean(axis=0), bootstrap_ci(d), d.shape[0])
    average = _entry(
        ks,
        np.mean(bases, axis=0),
        np.mean(runs, axis=0),
        bootstrap_average_ci(diffs),
        sum(len(d) for d in diffs),
    )
    return {
        "n": n,
        "ks": ks,
        "dropped_problems": note["dropped_problems"],
        "datasets": datasets,
        "average": average,
    }


def _entry(ks: list[int], base: np.ndarray, run: np.ndarray, ci: np.ndarray, num: int) -> dict[str, Any]:
    diff = run - base
    return {
        "base": {f"pass@{k}": float(v) for k, v in zip(ks, base, strict=True)},
        "run": {f"pass@{k}": float(v) for k, v in zip(ks, run, strict=True)},
        "difference": {f"pass@{k}": float(v) for k, v in zip(ks, diff, strict=True)},
        "ci": {f"pass@{k}": [float(lo), float(hi)] for k, (lo, hi) in zip(ks, ci, strict=True)},
        "crossover_k": crossover_k(ks, diff.tolist()),
        "num_problems": num,
    }


def answer_entropy(answers: Iterable[str | None]) -> float:
    """Entropy in nats of the empirical distribution of final answers: −Σ_a p_a ln p_a.

    Answers are compared as strings after stripping whitespace; a missing answer (None or empty: nothing
    extracted) counts as its own category :data:`NO_ANSWER`. Four equally frequent answers give ln 4;
    n identical answers give 0.

    Raises:
        ValueError: no answers.
    """
    counts = Counter(NO_ANSWER if a is None or not str(a).strip() else str(a).strip() for a in answers)
    total = sum(counts.values())
    if total == 0:
        raise ValueError("answer_entropy needs at least one answer")
    return float(-sum((c / total) * math.log(c / total) for c in counts.values()))


def distinct_n(texts: Iterable[str], n: int = 2) -> float:
    """Distinct-n: unique word n-grams / total word n-grams, pooled over ``texts`` (Li et al. 2016).

    Words are the whitespace-separated tokens of the lowercased text; n-grams do not cross texts. 1.0
    when no n-gram repeats; lower when the texts repeat each other. NaN when the texts hold no n-gram.
    (Words become integer ids and n-grams rows of an array, counted exactly by ``np.unique``.)

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"distinct-n needs n >= 1, got {n}")
    vocab: defaultdict[str, int] = defaultdict()
    vocab.default_factory = vocab.__len__  # a new word gets the next id
    grams = []
    for text in texts:
        ids = np.fromiter(map(vocab.__getitem__, text.lower().split()), dtype=np.int64)
        if ids.size >= n:
            grams.append(np.lib.stride_tricks.sliding_window_view(ids, n))
    if not grams:
        return float("nan")
    rows = np.concatenate(grams)
    if n == 1:
        return len(np.unique(rows)) / len(rows)
    if n == 2:  # one int64 code per bigram (ids < 2^31 on any real text)
        return len(np.unique(rows[:, 0] * (1 << 31) + rows[:, 1])) / len(rows)
    return len(np.unique(rows, axis=0)) / len(rows)


def _mean_ci(values: Sequence[float]) -> dict[str, Any]:
    vals = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if vals.size == 0:
        return {"mean": float("nan"), "ci": [float("nan"), float("nan")], "num_problems": 0}
    lo, hi = bootstrap_ci(vals[:, None])[0]
    return {"mean": float(vals.mean()), "ci": [float(lo), float(hi)], "num_problems": int(vals.size)}


def solution_diversity(
    run: EvalRun, classifier: str = "auto", *, ngram: int = 2, judge: Labeller | None = None
) -> dict[str, Any]:
    """Solution-level diversity of a run, per dataset and over all its problems.

    Per problem: ``answer_entropy`` of the n final answers (nats, :func:`answer_entropy`; all problems);
    ``distinct_strategies``, the number of distinct pattern labels over its correct completions (with a
    multi-label classifier, the size of the union of their labels; problems with a correct completion
    only); ``distinct_n`` of its correct completions (:func:`distinct_n` with ``ngram``; problems with a
    correct completion only). Each is averaged over problems with a 95% bootstrap CI over problems. A run
    whose records lack the texts (or the extracted answers), as an imported evaluation does
    (:mod:`sagerl.interop`), gets NaN for the metrics that read them (``num_problems`` 0), not a made-up value.

    Returns:
        ``{"classifier", "ngram", "datasets": {name: {metric: {"mean", "ci", "num_problems"}}},
        "all": {...}}``.
    """
    # an imported evaluation (sagerl.interop) has outcomes only: what needs the texts or the answers is NaN
    recs_all = [r for probs in run.records.values() for recs in probs.values() for r in recs]
    has_text, has_answers = all("text" in r for r in recs_all), all("extracted" in r for r in recs_all)
    labels = run_labels(run, classifier, judge=judge, correct_only=True) if has_text else None
    from sagerl.analysis.patterns import resolve_classifier

    per: dict[str, dict[str, list[float]]] = {}
    for ds in run.datasets:
        vals: dict[str, list[float]] = {"answer_entropy": [], "distinct_strategies": [], "distinct_n": []}
        for pid in run.problem_ids[ds]:
            recs = run.records[ds][pid]
            entropy = answer_entropy(r.get("extracted") for r in recs) if has_answers else math.nan
            vals["answer_entropy"].append(entropy)
            correct = [i for i, r in enumerate(recs) if r["correct"]]
            if correct and labels is None:
                vals["distinct_strategies"].append(math.nan)
                vals["distinct_n"].append(math.nan)
            elif correct:
                strategies = {lab for i in correct for lab in labels[ds][pid][i] or ()}
                vals["distinct_strategies"].append(float(len(strategies)))
                vals["distinct_n"].append(distinct_n((recs[i].get("text", "") for i in correct), ngram))
        per[ds] = vals
    pooled = {
        m: [v for ds in per for v in per[ds][m]]
        for m in ("answer_entropy", "distinct_strategies", "distinct_n")
    }
    return {
        "classifier": resolve_classifier(run, classifier),
        "ngram": ngram,
        "datasets": {ds: {m: _mean_ci(v) for m, v in vals.items()} for ds, vals in per.items()},
        "all": {m: _mean_ci(v) for m, v in pooled.items()},
    }


def passk_curves(runs: Sequence[EvalRun]) -> dict[str, dict[str, Any]]:
    """results.json-like pass@k entries (with bootstrap CIs) of aligned runs, keyed by run label, for
    :func:`sagerl.eval.plots.plot_compare`."""
    from sagerl.eval.results import summarize

    return {r.label: summarize({ds: r.correct_counts(ds) for ds in r.datasets}, r.n) for r in runs}


def analyze_support(
    base: EvalRun,
    runs: Sequence[EvalRun],
    out: str | Path,
    *,
    intersect: bool = False,
    classifier: str = "auto",
    ngram: int = 2,
    judge: Labeller | None = None,
) -> dict[str, Any]:
    """Everything of the support analysis for ``base`` against each run; writes ``support_passk.png``
    (pass@k curves of all runs, log-k axis, 95% CI bands) into ``out``.

    Returns:
        ``{"base", "runs", "n", "dropped_problems", "taxonomy": {run: ...}, "passk": {run: ...},
        "diversity": {run or base: ...}, "figure"}``.

    Raises:
        SagerlError: as :func:`paired_passk`.
    """
    from sagerl.eval.plots import plot_compare

    aligned, note = align_runs([base, *runs], intersect=intersect)
    b, rest = aligned[0], aligned[1:]
    result: dict[str, Any] = {
        "base": b.label,
        "runs": [r.label for r in rest],
        "paths": {r.label: str(r.path) for r in aligned},
        "n": note["n"],
        "dropped_problems": note["dropped_problems"],
        "taxonomy": {r.label: support_taxonomy(b, r) for r in rest},
        "passk": {r.label: paired_passk(b, r) for r in rest},
        "diversity": {r.label: solution_diversity(r, classifier, ngram=ngram, judge=judge) for r in aligned},
    }
    figure = Path(out) / "support_passk.png"
    plot_compare(passk_curves(aligned), figure)
    result["figure"] = figure.name
    return result
