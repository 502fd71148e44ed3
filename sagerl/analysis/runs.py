"""Reading eval run folders (written by ``sagerl eval``) for analysis, without modifying them.

An eval run folder holds ``eval_config.json`` (sampling settings), ``samples.jsonl`` (one record per
sample, see :mod:`sagerl.eval.samples`) and, once the eval finished, ``results.json``. :func:`load_eval_run`
turns one into an :class:`EvalRun`: per dataset, the problem ids in file order, and per problem its n
sample records ordered by ``sample_index``.

The user's ``samples.jsonl`` is never touched: a truncated last line (an eval killed mid-write) is skipped
with a :class:`TruncatedLineWarning`, not cut off the file as a resuming eval would.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.errors import SagerlError
from sagerl.eval.results import RESULTS_FILE, read_results
from sagerl.eval.samples import CONFIG_FILE, REQUIRED_KEYS, SAMPLES_FILE, load_samples


class TruncatedLineWarning(UserWarning):
    """``samples.jsonl`` ends in an incomplete line (an eval killed mid-write); the line was skipped."""


@dataclass
class EvalRun:
    """One eval run, as the analyses need it.

    Attributes:
        path: the run folder.
        n: samples per problem used by the analyses (every problem has exactly n records).
        settings: the sampling settings of ``eval_config.json`` (model, temperature, top_p, max_new_tokens,
            seed, few_shot).
        problem_ids: dataset name -> problem ids in the eval's order.
        records: dataset name -> problem id -> the n sample records (dicts as in ``samples.jsonl``:
            ``text``, ``extracted``, ``correct``, ``num_tokens``, ``finish_reason``, optionally
            ``strategy``), ordered by ``sample_index`` 0..n-1.
        few_shot: dataset name -> worked examples in the eval's prompts (from ``results.json``; None when
            unknown, i.e. the dataset's default).
        label: a short name for tables and plots (the folder name unless set).
    """

    path: Path
    n: int
    settings: dict[str, Any]
    problem_ids: dict[str, list[str]]
    records: dict[str, dict[str, list[dict[str, Any]]]]
    few_shot: dict[str, int | None] = field(default_factory=dict)
    label: str = ""
    labels_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Pattern labels already computed per classifier (see :mod:`sagerl.analysis.patterns`)."""

    def __post_init__(self) -> None:
        if not self.label:
            self.label = self.path.name or str(self.path)

    @property
    def datasets(self) -> list[str]:
        """Dataset names in the eval's order."""
        return list(self.problem_ids)

    def correct_counts(self, dataset: str) -> np.ndarray:
        """Per-problem correct counts c in [0, n], shape (P,), in :attr:`problem_ids` order."""
        recs = self.records[dataset]
        return np.array(
            [sum(bool(r["correct"]) for r in recs[pid]) for pid in self.problem_ids[dataset]], dtype=np.int64
        )

    def restrict(self, problem_ids: dict[str, list[str]], n: int) -> EvalRun:
        """The same run on a subset of its problems and its first ``n`` samples per problem (sharing its
        label cache, which is keyed by text)."""
        if n > self.n:
            raise ValueError(f"cannot restrict {self.path} to n={n} > {self.n}")
        records = {ds: {pid: self.records[ds][pid][:n] for pid in ids} for ds, ids in problem_ids.items()}
        return EvalRun(
            self.path,
            n,
            self.settings,
            {ds: list(ids) for ds, ids in problem_ids.items()},
            records,
            dict(self.few_shot),
            self.label,
            self.labels_cache,
        )


def _last_line(path: Path, block: int = 1 << 16) -> bytes:
    """The last non-blank line of a file, read backwards in blocks (the file may be large)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        end = f.tell()
        tail = b""
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            tail = f.read(end - start) + tail
            end = start
            stripped = tail.rstrip()
            if b"\n" in stripped or end == 0:
                return stripped.rsplit(b"\n", 1)[-1]
    return b""


def _is_complete(line: bytes) -> bool:
    try:
        rec = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(rec, dict) and all(k in rec for k in REQUIRED_KEYS)


def load_eval_run(path: str | Path, *, n: int | None = None, label: str | None = None) -> EvalRun:
    """Read an eval run folder (``sagerl eval --out``) without modifying it.

    n, the problems and their order come from ``results.json`` when present (the problems of the last
    eval call: the first ``num_problems`` of each dataset in ``samples.jsonl`` order, sample indices < n).
    Without ``results.json`` (an eval that did not finish), every problem in ``samples.jsonl`` is taken and
    n is the largest number of samples any problem has.

    Args:
        path: the run folder.
        n: use only the first ``n`` samples of each problem (default: the run's n).
        label: a short name for tables (default: the folder name).

    Returns:
        an :class:`EvalRun`.

    Raises:
        SagerlError: the folder does not exist or is not an eval run folder (no ``eval_config.json``; a
            training run folder is named as such); ``samples.jsonl`` is missing or empty; a line other than
            the last is not a valid record; a problem has fewer than n samples (names the first one).

    Warns:
        TruncatedLineWarning: the last line of ``samples.jsonl`` is incomplete and was skipped.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise SagerlError(f"{folder}: no such run folder")
    if not (folder / CONFIG_FILE).is_file():
        if (folder / "metrics.jsonl").is_file() or (folder / "config.yaml").is_file():
            raise SagerlError(
                f"{folder} is a training run folder; analyze takes eval run folders (`sagerl eval --out`)"
            )
        raise SagerlError(f"{folder}: not an eval run folder (no {CONFIG_FILE}; written by `sagerl eval`)")
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise SagerlError(f"{folder / CONFIG_FILE}: not valid JSON ({exc})") from exc
    samples_path = folder / SAMPLES_FILE
    if not samples_path.is_file() or samples_path.stat().st_size == 0:
        state = "missing" if not samples_path.is_file() else "empty"
        raise SagerlError(f"{samples_path}: {state}; no samples to analyze (run `sagerl eval` first)")
    records = load_samples(samples_path, repair=False)
    if not _is_complete(_last_line(samples_path)):
        warnings.warn(
            f"{samples_path}: the last line is incomplete (an eval killed mid-write?); skipped it",
            TruncatedLineWarning,
            stacklevel=2,
        )
    if not records:
        raise SagerlError(f"{samples_path}: no complete sample record")

    by_problem: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for (ds, pid, j), rec in records.items():
        by_problem.setdefault(ds, {}).setdefault(pid, {})[j] = rec
    del records

    few_shot: dict[str, int | None] = {}
    if (folder / RESULTS_FILE).is_file():
        results = read_results(folder)
        run_n = int(results.get("meta", {}).get("n") or 0)
        problem_ids: dict[str, list[str]] = {}
        for ds, entry in results["datasets"].items():
            if ds not in by_problem:
                raise SagerlError(f"{samples_path}: no sample of dataset {ds!r} listed in {RESULTS_FILE}")
            problem_ids[ds] = list(by_problem[ds])[: int(entry["num_problems"])]
            few_shot[ds] = entry.get("few_shot")
    else:
        problem_ids = {ds: list(probs) for ds, probs in by_problem.items()}
        run_n = max(len(s) for probs in by_problem.values() for s in probs.values())
    if run_n < 1:
        raise SagerlError(f"{folder / RESULTS_FILE}: no valid n in meta")
    if n is None:
        n = run_n
    elif not 1 <= n <= run_n:
        raise SagerlError(f"{folder}: n must be between 1 and the run's n={run_n}, got {n}")

    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for ds, ids in problem_ids.items():
        out[ds] = {}
        for pid in ids:
            samples = by_problem[ds][pid]
            row = [samples.get(j) for j in range(n)]
            if any(r is None for r in row):
                have = sum(r is not None for r in row)
                raise SagerlError(
                    f"{samples_path}: problem {ds}/{pid} has {have} of n={n} samples (an unfinished eval? "
                    "rerun `sagerl eval` with the same --out to complete it)"
                )
            out[ds][pid] = row  # type: ignore[assignment]
    settings = dict(config.get("settings", {}))
    return EvalRun(folder, n, settings, problem_ids, out, few_shot, label or "")


def unique_labels(paths: list[Path]) -> list[str]:
    """Short distinct names for run folders: the folder names, or more of each path where they collide
    (``#2``, ``#3``... for a folder given more than once)."""
    parts = [Path(p).resolve().parts for p in paths]
    longest = max((len(x) for x in parts), default=1)
    for depth in range(1, longest + 1):
        labels = ["/".join(x[-depth:]).lstrip("/") or "/" for x in parts]
        if len(set(labels)) == len(labels):
            return labels
    # the same folder given twice: number the repeats
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab}#{seen[lab]}")
    return out


def set_unique_labels(runs: list[EvalRun]) -> None:
    """Give runs distinct labels (:func:`unique_labels` of their folders)."""
    for run, lab in zip(runs, unique_labels([r.path for r in runs]), strict=True):
        run.label = lab


def align_runs(runs: list[EvalRun], *, intersect: bool = False) -> tuple[list[EvalRun], dict[str, Any]]:
    """The same problems and n for every run, in the first run's order.

    Args:
        runs: two or more runs (the first one is the reference, e.g. the base model).
        intersect: keep the problems every run has, and the smallest n, instead of failing.

    Returns:
        (aligned runs, a note ``{"dropped_problems": {dataset: count}, "n": n, "n_dropped": bool}``).

    Raises:
        SagerlError: without ``intersect``, the runs differ in n, in datasets or in problems (one line
            naming the two runs and the first mismatching ids).
    """
    ref = runs[0]
    if not intersect:
        for other in runs[1:]:
            if other.n != ref.n:
                raise SagerlError(
                    f"runs {ref.path} and {other.path} have different n ({ref.n} vs {other.n}); "
                    "pass --intersect to use the first min(n) samples of each"
                )
            for ds in dict.fromkeys([*ref.datasets, *other.datasets]):
                a, b = ref.problem_ids.get(ds), other.problem_ids.get(ds)
                if a is None or b is None:
                    missing = other.path if b is None else ref.path
                    raise SagerlError(
                        f"runs {ref.path} and {other.path} have different datasets ({missing} has no {ds!r}); "
                        "pass --intersect to compare the common problems"
                    )
                if a != b:
                    only_a = [p for p in a if p not in set(b)][:3]
                    only_b = [p for p in b if p not in set(a)][:3]
                    detail = (
                        f"only in {ref.path}: {only_a}, only in {other.path}: {only_b}"
                        if only_a or only_b
                        else "same ids in another order"
                    )
                    raise SagerlError(
                        f"runs {ref.path} and {other.path} have different problems in {ds!r} ({detail}); "
                        "pass --intersect to compare the common problems"
                    )
        return runs, {"dropped_problems": {ds: 0 for ds in ref.datasets}, "n": ref.n, "n_dropped": False}
    n = min(r.n for r in runs)
    common: dict[str, list[str]] = {}
    dropped: dict[str, int] = {}
    for ds in ref.datasets:
        if not all(ds in r.problem_ids for r in runs):
            dropped[ds] = max(len(r.problem_ids.get(ds, [])) for r in runs)
            continue
        keep = set.intersection(*(set(r.problem_ids[ds]) for r in runs))
        ids = [p for p in ref.problem_ids[ds] if p in keep]
        dropped[ds] = max(len(r.problem_ids[ds]) for r in runs) - len(ids)
        if ids:
            common[ds] = ids
    for r in runs[1:]:
        for ds in r.datasets:
            if ds not in dropped:
                dropped[ds] = len(r.problem_ids[ds])
    if not common:
        raise SagerlError(f"runs {', '.join(str(r.path) for r in runs)} have no problem in common")
    aligned = [r.restrict(common, n) for r in runs]
    return aligned, {"dropped_problems": dropped, "n": n, "n_dropped": any(r.n != n for r in runs)}
