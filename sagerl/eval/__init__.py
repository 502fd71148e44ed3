"""Evaluation harness: samplers (hf, vllm), unbiased pass@k with bootstrap CIs, results, plots, compare.

Public API:

- :func:`pass_at_k` (n, c, k) -> float: the unbiased estimator of Chen et al. 2021.
- :func:`evaluate` (model, datasets, n=..., out=...) -> results dict (also ``out/results.json``).
- :func:`compare_runs` (run_dirs, out=...) -> table data and an overlaid plot.

torch, transformers and matplotlib are imported only when used, so ``import sagerl.eval`` is cheap.
"""

from sagerl.eval.compare import compare_runs
from sagerl.eval.passk import ks_up_to, pass_at_k, pass_at_k_matrix
from sagerl.eval.runner import evaluate

__all__ = ["pass_at_k", "pass_at_k_matrix", "ks_up_to", "evaluate", "compare_runs"]
