"""Analyses of run folders: empirical support, reasoning patterns, branching tokens, training curves, report.

They read the files ``sagerl eval`` and ``sagerl train`` write (``samples.jsonl``, ``eval_config.json``,
``results.json``, ``metrics.jsonl``, ``config.yaml``), never their Python objects, so old runs stay
analysable, and they never modify a run folder. Outputs go to an output folder: ``analysis.json`` (every
number), PNG figures, ``branching.html`` and ``report.md``, each written atomically.

Public API:

- :func:`load_eval_run` (path) -> :class:`EvalRun` (:mod:`sagerl.analysis.runs`).
- :mod:`sagerl.analysis.support`: :func:`support_taxonomy` (base, run) -> preserved / expanded / shrunk /
  never solved per dataset; :func:`paired_passk` (base, run, ks) -> pass@k differences with paired
  bootstrap CIs and the crossover k; :func:`solution_diversity` (answer entropy, distinct strategies,
  distinct-n).
- :mod:`sagerl.analysis.patterns`: :data:`TAXONOMY`, :data:`LEXICON`, :func:`lexicon_labels`,
  :func:`pattern_shares` (run, classifier="auto" | "lexicon" | "recorded" | "judge"), :func:`compare_shares`.
- :mod:`sagerl.analysis.judge`: :class:`Judge` (an LLM judge through the eval samplers).
- :mod:`sagerl.analysis.branching`: :func:`rescore` (per-token H_t and branch-guide q under a model),
  :func:`branching_stats`, :func:`write_branching_html`.
- :mod:`sagerl.analysis.curves`: :func:`plot_curves` (grouped training-curve PNGs from ``metrics.jsonl``).
- :mod:`sagerl.analysis.report`: :func:`analyze_report` (everything into one folder, with ``report.md``).

torch and matplotlib are imported only when a function needs them.
"""

from sagerl.analysis.patterns import TAXONOMY, compare_shares, lexicon_labels, pattern_shares
from sagerl.analysis.runs import EvalRun, TruncatedLineWarning, align_runs, load_eval_run
from sagerl.analysis.support import (
    answer_entropy,
    distinct_n,
    paired_passk,
    solution_diversity,
    support_taxonomy,
)

__all__ = [
    "TAXONOMY",
    "EvalRun",
    "TruncatedLineWarning",
    "align_runs",
    "answer_entropy",
    "compare_shares",
    "distinct_n",
    "lexicon_labels",
    "load_eval_run",
    "paired_passk",
    "pattern_shares",
    "solution_diversity",
    "support_taxonomy",
]
