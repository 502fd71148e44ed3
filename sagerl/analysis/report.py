"""``report.md``: the support, pattern and branching analyses of a base run and its comparison runs, side
by side, with the figures; ``analysis.json`` holds every number behind it.

:func:`analyze_report` runs :func:`sagerl.analysis.support.analyze_support` and
:func:`sagerl.analysis.patterns.analyze_patterns` (and :func:`sagerl.analysis.branching.analyze_branching`
for every run when a model is given) into one folder; :func:`render_report` turns their results into
Markdown tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sagerl.analysis.output import update_analysis_json
from sagerl.analysis.patterns import Labeller, analyze_patterns, shown_labels
from sagerl.analysis.runs import EvalRun
from sagerl.analysis.support import CATEGORIES, analyze_support
from sagerl.atomic_files import atomic_write_text

REPORT_FILE = "report.md"


def _pct(value: float | None, ci: Sequence[float] | None = None, signed: bool = False) -> str:
    if value is None:
        return "–"
    fmt = "{:+.1f}" if signed else "{:.1f}"
    text = fmt.format(100 * value)
    if ci is not None and ci[0] is not None and ci[1] is not None:
        text += f" [{fmt.format(100 * ci[0])}, {fmt.format(100 * ci[1])}]"
    return text


def _num(value: float | None, ci: Sequence[float] | None = None, digits: int = 3) -> str:
    if value is None:
        return "–"
    text = f"{value:.{digits}f}"
    if ci is not None and ci[0] is not None and ci[1] is not None:
        text += f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    return text


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def support_markdown(support: Mapping[str, Any]) -> str:
    """Tables of the support analysis: taxonomy, paired pass@k differences, solution diversity."""
    parts = [
        f"## Empirical support (n = {support['n']}, base: `{support['base']}`)",
        "A problem is solved when at least one of its n samples is correct (Wu et al. 2025, arXiv 2507.14843).",
    ]
    dropped = {k: v for k, v in support["dropped_problems"].items() if v}
    if dropped:
        parts.append(f"Problems dropped to compare the common ones (--intersect): {dropped}.")
    rows = []
    for run, tax in support["taxonomy"].items():
        t = tax["total"]
        rows.append(
            [f"`{run}`", str(t["num_problems"])]
            + [f"{t['counts'][c]} ({_pct(t['shares'][c])}%)" for c in CATEGORIES]
        )
    parts.append(_table(["run", "problems", *(c.replace("_", " ") for c in CATEGORIES)], rows))
    first = next(iter(support["passk"].values()), None)
    if first:
        ks = first["ks"]
        parts.append(
            "### pass@k(run) − pass@k(base), points, with paired bootstrap 95% CI over problems\n"
            "(average over datasets; crossover k: where the base overtakes the run, Yue et al. 2025)"
        )
        rows = [
            [f"`{run}`"]
            + [
                _pct(p["average"]["difference"][f"pass@{k}"], p["average"]["ci"][f"pass@{k}"], signed=True)
                for k in ks
            ]
            + [str(p["average"]["crossover_k"] or "–")]
            for run, p in support["passk"].items()
        ]
        parts.append(_table(["run", *(f"pass@{k}" for k in ks), "crossover k"], rows))
    parts.append(f"![pass@k of every run]({support['figure']})")
    parts.append("### Solution diversity (mean over problems, 95% CI)")
    rows = []
    for run, div in support["diversity"].items():
        a = div["all"]
        rows.append(
            [
                f"`{run}`",
                _num(a["answer_entropy"]["mean"], a["answer_entropy"]["ci"]),
                _num(a["distinct_strategies"]["mean"], a["distinct_strategies"]["ci"], 2),
                _num(a["distinct_n"]["mean"], a["distinct_n"]["ci"]),
            ]
        )
    ngram = next(iter(support["diversity"].values()))["ngram"]
    parts.append(
        _table(
            [
                "run",
                "answer entropy (nats)",
                "distinct strategies (solved problems)",
                f"distinct-{ngram} (correct)",
            ],
            rows,
        )
    )
    return "\n\n".join(parts)


def patterns_markdown(patterns: Mapping[str, Any]) -> str:
    """Tables of the pattern analysis: shares per run, and differences to the first run."""
    shares = patterns["shares"]
    first = next(iter(shares.values()))
    population = "correct" if "correct" in first else "all"
    parts = [
        f"## Reasoning patterns (classifier: {first['classifier']}; share of {population} completions, %, "
        "95% CI over problems)"
    ]
    order = shown_labels(shares, population)
    rows = []
    for lab in order:
        row = [lab.replace("_", " ")]
        for s in shares.values():
            entry = s[population]["shares"].get(lab)
            row.append(_pct(entry["share"], entry["ci"]) if entry else "0.0")
        rows.append(row)
    rows.append(["completions counted"] + [str(s[population]["num_completions"]) for s in shares.values()])
    parts.append(_table(["pattern", *(f"`{r}`" for r in shares)], rows))
    compare = patterns.get("compare")
    if compare and compare["differences"]:
        parts.append(f"### Share differences to `{compare['reference']}` (points, paired bootstrap 95% CI)")
        rows = [
            [lab.replace("_", " ")]
            + [_pct(d[lab]["difference"], d[lab]["ci"], signed=True) for d in compare["differences"].values()]
            for lab in compare["labels"]
            if lab in order
        ]
        parts.append(_table(["pattern", *(f"`{r}`" for r in compare["differences"])], rows))
    if "judge" in patterns:
        parts.append(
            f"Judge: {patterns['judge']['failures']} items failed and {patterns['judge']['unparsed']} answers did "
            "not parse; both are counted as `unlabeled`."
        )
    parts.append(f"![pattern shares]({patterns['figure']})")
    return "\n\n".join(parts)


def branching_markdown(branching: Mapping[str, Mapping[str, Any]]) -> str:
    """Tables of the branching analysis of each run."""
    any_run = next(iter(branching.values()))
    g = any_run["guide"]
    parts = [
        f"## Branching tokens (re-scored under `{any_run['model'] or 'the embedded model'}`; "
        f"τ = {g['tau']:g} nats, γ = {g['gamma']:g}, q ∈ [{g['q_min']:g}, {g['q_max']:g}], {g['source']})"
    ]
    rows = []
    for run, b in branching.items():
        c, i = b["correct"], b["incorrect"]
        rows.append(
            [
                f"`{run}`",
                str(b["tokens"]),
                _pct(b["share_above_tau"]),
                f"{_num(c['mean_entropy'])} / {_num(i['mean_entropy'])}",
                f"{_num(c['mean_q'])} / {_num(i['mean_q'])}",
                f"{_pct(c['share_above_tau'])} / {_pct(i['share_above_tau'])}",
            ]
        )
    parts.append(
        _table(
            [
                "run",
                "tokens",
                "H_t > τ (%)",
                "mean H_t correct / incorrect",
                "mean q correct / incorrect",
                "H_t > τ (%) correct / incorrect",
            ],
            rows,
        )
    )
    for run, b in branching.items():
        top = ", ".join(
            f"`{t['token'].strip() or repr(t['token'])}` ({t['count']})"
            for t in b["top_branching_tokens"][:10]
        )
        parts.append(
            f"`{run}`: most frequent tokens at branching points: {top or '–'}.\n\n"
            f"![H_t histogram]({b['files']['histogram']}) [completions shaded by H_t]({b['files']['html']})"
        )
    return "\n\n".join(parts)


def render_report(
    support: Mapping[str, Any] | None, patterns: Mapping[str, Any] | None, branching: Mapping[str, Any] | None
) -> str:
    """The Markdown of ``report.md`` from the analyses' results (any may be None)."""
    parts = ["# sagerl analysis report", "Every number is in `analysis.json`."]
    if support:
        runs = ", ".join(f"`{r}` ({p})" for r, p in support["paths"].items())
        parts.append(f"Runs: {runs}.")
        parts.append(support_markdown(support))
    if patterns:
        parts.append(patterns_markdown(patterns))
    if branching:
        parts.append(branching_markdown(branching))
    return "\n\n".join(parts) + "\n"


def analyze_report(
    base: EvalRun,
    runs: Sequence[EvalRun],
    out: str | Path,
    *,
    model: str | None = None,
    classifier: str = "auto",
    judge: Labeller | None = None,
    intersect: bool = False,
    ngram: int = 2,
    branching_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Support and patterns (and branching when ``model`` is given) of ``base`` and ``runs`` into ``out``:
    ``analysis.json`` (sections ``support``, ``patterns``, ``branching``), the figures and ``report.md``.

    Args:
        base: the reference run. runs: the runs to compare with it.
        out: output folder.
        model: re-score every run's completions under this model (branching analysis).
        classifier, judge: pattern labels (see :mod:`sagerl.analysis.patterns`).
        intersect: compare the problems all runs share.
        ngram: n of distinct-n.
        branching_options: keyword arguments of :func:`sagerl.analysis.branching.analyze_branching`
            (preset, gamma, tau, q_min, q_max, batch_size, limit, data_dir, dataset_files).

    Returns:
        ``{"support", "patterns", "branching" or None, "report": path}``.
    """
    out = Path(out)
    support = analyze_support(
        base, runs, out, intersect=intersect, classifier=classifier, ngram=ngram, judge=judge
    )
    update_analysis_json(out, "support", support)
    patterns = analyze_patterns([base, *runs], out, classifier=classifier, judge=judge, intersect=intersect)
    update_analysis_json(out, "patterns", patterns)
    branching = None
    if model is not None:
        from sagerl.analysis.branching import analyze_branching
        from sagerl.models import load_model, load_tokenizer

        tokenizer, model_obj = load_tokenizer(model), load_model(model)
        branching = {}
        for i, r in enumerate([base, *runs]):
            branching[r.label] = analyze_branching(
                r,
                model,
                out,
                prefix=f"branching_{i}",
                model_obj=model_obj,
                tokenizer=tokenizer,
                **(branching_options or {}),
            )
        update_analysis_json(out, "branching", branching)
    path = out / REPORT_FILE
    atomic_write_text(path, render_report(support, patterns, branching))
    return {"support": support, "patterns": patterns, "branching": branching, "report": str(path)}
