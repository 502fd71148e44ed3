"""Unbiased pass@k in verl's validation step, beside verl's own ``best@N``.

verl 0.9 validates with ``mean@N``, ``best@N`` and ``maj@N`` (``process_validation_metrics``): ``best@N`` is the
mean over bootstrap draws of N of the samples' maximum, which under-reports pass@k (one correct sample of four
gives best@4/mean ≈ 0.68; pass@4 is 1) and verl has no unbiased pass@k. With the plugin installed, every
validation step also logs, per data source, the unbiased pass@k (1 − C(n−c, k)/C(n, k), Chen et al. 2021;
:func:`sagerl.eval.passk.pass_at_k_matrix`) of the variable verl treats as the core one (``acc`` when the reward
function reports it, else ``reward``), for k = 1, 2, 4, …, n with n = ``val_kwargs.n`` (the samples per prompt,
:func:`sagerl.eval.passk.ks_up_to`), under verl's metric naming::

    val-core/<data source>/<acc or reward>/pass@<k>

(beside verl's ``val-core/<data source>/<acc or reward>/best@<n>/mean``). A prompt's n is its number of samples;
when prompts have different n, each k up to the smallest n is averaged over all of them, each with its own n. A
data source whose core values are not all 0 or 1 (pass@k needs a verdict per sample) gets no pass@k and one
warning in the log.

How it is hooked: verl computes its validation metrics in the trainer method ``_val_metrics_update(data_sources,
sample_uids, reward_extra_infos_dict, sample_turns, ...)`` of both its trainers (the legacy ``RayPPOTrainer``
and v1's ``PPOTrainer``), which receives every sample's data source, prompt uid and scores. :func:`install`
wraps that method on the two classes (verl is not modified on disk; the wrapper calls verl's own method and adds
the pass@k keys to the dictionary it returns). For v1's failed sessions (``expected_acc_counts``), the missing
samples count as wrong, as verl's ``acc`` does. tests/integrations/verl/test_verl_validation.py checks both
trainers' methods and the contract the wrapper relies on.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

SECTION = "val-core"
_MARK = "__sagerl_passk__"


def _binary(values: Sequence[Any]) -> list[int] | None:
    """``values`` as 0/1 integers, or None when one of them is not a 0/1 verdict."""
    out = []
    for v in values:
        if isinstance(v, bool | np.bool_):
            out.append(int(v))
        elif isinstance(v, int | float | np.integer | np.floating) and float(v) in (0.0, 1.0):
            out.append(int(v))
        else:
            return None
    return out


def validation_passk(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos: Mapping[str, Sequence[Any]],
    expected_acc_counts: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, float]:
    """The pass@k metrics of one validation step (naming and rules in this module's doc).

    Args:
        data_sources: each sample's data source, shape (S,).
        sample_uids: each sample's prompt uid, shape (S,) (a prompt's n samples share it).
        infos: verl's ``reward_extra_infos_dict``: variable name -> per-sample values, shape (S,) (``reward``
            always; ``acc`` when the reward function reports it).
        expected_acc_counts: v1's expected sample count per (data source, uid); missing ``acc`` samples are 0.

    Returns:
        ``{"val-core/<source>/<var>/pass@<k>": value in [0, 1]}``; empty when there is nothing to score.
    """
    from sagerl.eval.passk import ks_up_to, pass_at_k_matrix

    groups: dict[str, dict[str, dict[str, list[Any]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for i, source in enumerate(data_sources):
        for var in ("acc", "reward"):
            values = infos.get(var)
            if values is not None and len(values) == len(data_sources) and values[i] is not None:
                groups[str(source)][str(sample_uids[i])][var].append(values[i])
    metrics: dict[str, float] = {}
    for source, by_uid in groups.items():
        var = "acc" if any(v.get("acc") for v in by_uid.values()) else "reward"
        rows: list[list[int]] = []
        for uid, by_var in by_uid.items():
            values = list(by_var.get(var, []))
            if var == "acc" and expected_acc_counts:
                values += [0] * max(expected_acc_counts.get((source, uid), 0) - len(values), 0)
            row = _binary(values)
            if row is None:
                logger.warning(
                    "sagerl: no pass@k for data source %r: its %r values are not all 0 or 1 (e.g. %r)",
                    source,
                    var,
                    next(v for v in values if _binary([v]) is None),
                )
                rows = []
                break
            if row:
                rows.append(row)
        if not rows:
            continue
        ks = ks_up_to(min(len(r) for r in rows))
        per_problem = np.empty((len(rows), len(ks)))
        by_n: dict[int, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            by_n[len(row)].append(index)
        for n, indices in by_n.items():
            counts = [sum(rows[i]) for i in indices]
            per_problem[indices] = pass_at_k_matrix(n, counts, ks)
        for j, k in enumerate(ks):
            metrics[f"{SECTION}/{source}/{var}/pass@{k}"] = float(per_problem[:, j].mean())
    return metrics


def _wrap(method):
    """verl's ``_val_metrics_update``, returning its metrics plus :func:`validation_passk`'s."""

    @functools.wraps(method)
    def _val_metrics_update(
        self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, *args, **kwargs
    ):
        metrics = method(
            self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, *args, **kwargs
        )
        expected = kwargs.get("expected_acc_counts", args[0] if args else None)
        metrics.update(
            validation_passk(list(data_sources), list(sample_uids), reward_extra_infos_dict, expected)
        )
        return metrics

    setattr(_val_metrics_update, _MARK, True)
    return _val_metrics_update


def trainer_classes() -> list[type]:
    """verl's trainer classes whose validation metrics get pass@k: v0's ``RayPPOTrainer``, v1's ``PPOTrainer``."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [RayPPOTrainer, PPOTrainer]


def install() -> None:
    """Wrap ``_val_metrics_update`` of :func:`trainer_classes` (idempotent; the plugin's ``install`` calls it)."""
    for cls in trainer_classes():
        method = cls.__dict__.get("_val_metrics_update")
        if method is None or getattr(method, _MARK, False):
            continue
        cls._val_metrics_update = _wrap(method)
