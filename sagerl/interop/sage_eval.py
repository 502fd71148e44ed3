"""Importing the SAGE authors' ``evaluation_results.json`` (``sagerl import sage-eval``).

Their evaluation script (``src/eval/eval_model.py`` of the paper's public repository) writes
``outputs/eval/<model>/evaluation_results.json``::

    {"k": 64, "seeds": [0], "datasets": ["MATH-500"],
     "per_seed_records": [{"dataset": "MATH-500", "algo_type": "sage", "ckpt": "checkpoint-200",
                           "step": 200, "seed": 0, "pass_at_1": 0.41, "pass_at_k": 0.83,
                           "is_correct": [[1, 0, ...], ...]}, ...],
     "aggregates": [{"dataset", "algo_type", "step", "n", "pass_at_1_mean", "pass_at_1_std", ...}]}

one record per (dataset, algo_type, step, seed), where ``is_correct[i][j]`` is the reward (math-verify, 0 or
1) of sample j of problem i, problems in the order the script loads the dataset. The record's own
``pass_at_1`` is whether the *first* sample is right (not c/k) and ``pass_at_k`` whether any of the k is:
both high-variance. The importer reads ``is_correct`` only and computes the unbiased pass@k for every
k <= n, with bootstrap CIs, from the per-problem counts (:mod:`sagerl.eval`); the records' own numbers are
kept under ``meta.imported.reported``.

Seeds. The authors' ``aggregates`` average the seeds of one (dataset, algo_type, step) as repeats of one
evaluation of that checkpoint (their ``n`` is the number of seeds), so the importer pools them by default:
one folder per checkpoint (algo_type, step), every dataset in it, n = seeds x k samples per problem (sample
``s·k + j`` is sample j of the s-th seed, seeds in increasing order). Pooling needs every dataset of the
checkpoint evaluated with the same seeds and the same problems in every seed; otherwise the import stops
with the record that breaks it and asks for ``--seeds separate`` (one folder per checkpoint and seed,
n = k). Two seeds whose outcomes are identical on every sample (not all 0 or all 1) are reported: in the
authors' script, chunk c of seed s samples with CUDA seed s + c·batch, so seeds closer than k can draw the
same samples, which pooling would count twice.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

from sagerl.errors import DataError, SagerlError
from sagerl.interop.imported import (
    ImportedEval,
    check_outcome,
    file_sha256,
    folder_name,
    map_datasets,
    parse_dataset_map,
    read_json_file,
    write_imported,
)

FORMAT = "sage-eval"
MISSING = (
    "the file holds 0/1 outcomes only: no completion texts, extracted answers or token counts, so the pattern, "
    "diversity and branching analyses need a `sagerl eval` of the checkpoint"
)
SEED_MODES = ("pool", "separate")
_RECORD_KEYS = ("dataset", "algo_type", "step", "seed", "is_correct")


def _where(path: Path, rec: dict[str, Any]) -> str:
    keys = ", ".join(f"{key}={rec.get(key)!r}" for key in ("algo_type", "step", "dataset", "seed"))
    return f"{path}: record ({keys})"


def _load(path: Path) -> dict[str, Any]:
    data = read_json_file(path)
    if not isinstance(data, dict) or "per_seed_records" not in data or "k" not in data:
        hint = ""
        if isinstance(data, dict) and {"config_general", "results"} <= set(data):
            hint = "; it is a lighteval results file: use `sagerl import lighteval`"
        elif isinstance(data, dict) and {"meta", "datasets", "average"} <= set(data):
            hint = "; it is a sagerl results.json: its folder is already an evaluation folder"
        raise DataError(
            f"{path}: not the SAGE authors' evaluation_results.json layout (needs 'k' and 'per_seed_records'){hint}"
        )
    return data


def _outcomes(path: Path, rec: dict[str, Any], k: int) -> list[list[int]]:
    """The record's ``is_correct`` checked: a non-empty list of rows of k 0/1 values."""
    rows = rec["is_correct"]
    where = _where(path, rec)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{where}: field 'is_correct' must be a non-empty list of per-problem rows")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise DataError(f"{where}: field 'is_correct[{i}]' is not a list of the problem's k outcomes")
        if len(row) != k:
            raise DataError(
                f"{where}: field 'is_correct[{i}]' has {len(row)} outcomes, the file's k is {k} "
                "(every row needs one outcome per sample)"
            )
        values = [check_outcome(v) for v in row]
        if None in values:
            j = values.index(None)
            raise DataError(
                f"{where}: field 'is_correct[{i}][{j}]' is {row[j]!r}; pass@k needs 0/1 rewards (correct or not)"
            )
        out.append(values)  # type: ignore[arg-type]
    return out


def read_sage_eval(
    path: str | Path,
    *,
    seeds: str = "pool",
    dataset_as: dict[str, str] | list[str] | None = None,
    data_dir: str | Path | None = None,
) -> list[ImportedEval]:
    """Read an ``evaluation_results.json`` into one :class:`ImportedEval` per checkpoint (algo_type, step),
    or per checkpoint and seed with ``seeds="separate"`` (the rules in this module's doc).

    Args:
        path: the file.
        seeds: ``"pool"`` (default; n = seeds x k) or ``"separate"`` (n = k, a folder per seed).
        dataset_as: source dataset name -> sagerl set (``{"MATH-500": "math500"}`` or ``["MATH-500=math500"]``):
            rename the dataset and take the set's problem ids by position (:func:`.imported.map_datasets`).
        data_dir: folder of the sagerl sets' JSONL files (else ``$SAGERL_DATA_DIR``).

    Returns:
        the evaluations, sorted by algo_type, step (and seed).

    Raises:
        DataError: one line naming the file, the record (algo_type, step, dataset, seed) and the field: a file
            of another layout, a record without a required field, a row of ``is_correct`` whose length is not
            k, an outcome other than 0/1, a record given twice, seeds that cannot be pooled.
        SagerlError: an unknown ``seeds`` mode or a malformed ``dataset_as``.
    """
    if seeds not in SEED_MODES:
        raise SagerlError(f"--seeds {seeds!r}: choose pool or separate")
    mapping = parse_dataset_map(dataset_as)
    path = Path(path)
    data = _load(path)
    k = data["k"]
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DataError(f"{path}: field 'k' must be an integer >= 1, got {k!r}")
    records = data["per_seed_records"]
    if not isinstance(records, list) or not records:
        raise DataError(f"{path}: field 'per_seed_records' must be a non-empty list of records")

    # (algo_type, step) -> dataset -> seed -> (outcomes, record)
    checkpoints: dict[tuple[str, int], dict[str, dict[int, tuple[list[list[int]], dict]]]] = defaultdict(dict)
    seen: dict[tuple, int] = {}
    for index, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise DataError(f"{path}: per_seed_records[{index}] is not a record (a JSON object)")
        missing = [key for key in _RECORD_KEYS if key not in rec]
        if missing:
            raise DataError(f"{_where(path, rec)}: per_seed_records[{index}] lacks the field {missing[0]!r}")
        for key in ("step", "seed"):
            if not isinstance(rec[key], int) or isinstance(rec[key], bool):
                raise DataError(f"{_where(path, rec)}: field {key!r} must be an integer, got {rec[key]!r}")
        key = (str(rec["algo_type"]), rec["step"], str(rec["dataset"]), rec["seed"])
        if key in seen:
            raise DataError(
                f"{_where(path, rec)}: per_seed_records[{index}] repeats per_seed_records[{seen[key]}] "
                "(one record per algo_type, step, dataset and seed)"
            )
        seen[key] = index
        outcomes = _outcomes(path, rec, k)
        checkpoints[(key[0], key[1])].setdefault(key[2], {})[key[3]] = (outcomes, rec)

    evals: list[ImportedEval] = []
    for (algo, step), by_dataset in sorted(checkpoints.items()):
        if seeds == "pool":
            evals.append(_pooled(path, data, k, algo, step, by_dataset))
        else:
            all_seeds = sorted({s for per_seed in by_dataset.values() for s in per_seed})
            for seed in all_seeds:
                part = {ds: {seed: per_seed[seed]} for ds, per_seed in by_dataset.items() if seed in per_seed}
                evals.append(_pooled(path, data, k, algo, step, part, seed=seed))
    for ev in evals:
        map_datasets(ev, mapping, data_dir=data_dir, where=f"{path}: ")
    return evals


def _pooled(
    path: Path,
    data: dict[str, Any],
    k: int,
    algo: str,
    step: int,
    by_dataset: dict[str, dict[int, tuple[list[list[int]], dict]]],
    seed: int | None = None,
) -> ImportedEval:
    """One evaluation of checkpoint (algo, step) from its records: every dataset's seeds pooled (or the one
    ``seed`` of a separate import)."""
    seed_sets = {ds: sorted(per_seed) for ds, per_seed in by_dataset.items()}
    first_ds = next(iter(seed_sets))
    for ds, ss in seed_sets.items():
        if ss != seed_sets[first_ds]:
            rec = next(iter(by_dataset[ds].values()))[1]
            raise DataError(
                f"{_where(path, rec)}: field 'seed': dataset {ds!r} has seeds {ss}, {first_ds!r} has "
                f"{seed_sets[first_ds]}; pooling seeds needs the same seeds on every dataset of a checkpoint "
                "(or pass --seeds separate)"
            )
    the_seeds = seed_sets[first_ds]
    outcomes: dict[str, list[list[int]]] = {}
    notes: list[str] = []
    reported: dict[str, dict[str, Any]] = {}
    ckpts = set()
    for ds, per_seed in sorted(by_dataset.items()):
        first_rows, first_rec = per_seed[the_seeds[0]]
        for s in the_seeds[1:]:
            rows, rec = per_seed[s]
            if len(rows) != len(first_rows):
                raise DataError(
                    f"{_where(path, rec)}: field 'is_correct' has {len(rows)} problems, seed {the_seeds[0]} has "
                    f"{len(first_rows)}; pooled seeds need the same problems (or pass --seeds separate)"
                )
        for a, b in combinations(the_seeds, 2):
            ra = per_seed[a][0]
            if ra == per_seed[b][0] and len({v for row in ra for v in row}) > 1:
                notes.append(
                    f"{algo} step {step} {ds}: seeds {a} and {b} have identical outcomes on all "
                    f"{len(ra)} x {k} samples: the same samples drawn twice? (pooling counts them twice)"
                )
        outcomes[ds] = [sum((per_seed[s][0][i] for s in the_seeds), []) for i in range(len(first_rows))]
        reported[ds] = {
            str(s): {key: per_seed[s][1].get(key) for key in ("pass_at_1", "pass_at_k")} for s in the_seeds
        }
        ckpts.update(str(per_seed[s][1].get("ckpt")) for s in the_seeds)
    ckpt = ", ".join(sorted(ckpts))
    name = folder_name(algo, f"step{step}", f"seed{seed}" if seed is not None else "")
    n = k * len(the_seeds)
    source = {
        "format": FORMAT,
        "file": str(path.resolve()),
        "sha256": file_sha256(path),
        "algo_type": algo,
        "step": step,
        "ckpt": ckpt,
        "k": k,
        "seeds": the_seeds,
        "pooled_seeds": len(the_seeds) > 1,
        "sample_index": "seed position x k + sample j of that seed (seeds in increasing order)",
        "reported": reported,
    }
    settings = {"seed": the_seeds[0] if len(the_seeds) == 1 else None}
    return ImportedEval(
        name=name,
        model=name,
        n=n,
        outcomes=outcomes,
        problem_ids={ds: [str(i) for i in range(len(rows))] for ds, rows in outcomes.items()},
        source=source,
        missing=MISSING,
        notes=notes,
        settings=settings,
    )


def import_sage_eval(
    path: str | Path,
    out: str | Path,
    *,
    seeds: str = "pool",
    dataset_as: dict[str, str] | list[str] | None = None,
    data_dir: str | Path | None = None,
    plot: bool = True,
) -> list[dict[str, Any]]:
    """``sagerl import sage-eval``: :func:`read_sage_eval`, then :func:`.imported.write_imported` into ``out``.

    Returns:
        per evaluation ``{"folder", "written", "results", "eval"}`` (``eval``: the :class:`ImportedEval`).

    Raises:
        DataError, SagerlError: as :func:`read_sage_eval` and :func:`.imported.write_imported`; nothing is
            written when the file has an error.
    """
    evals = read_sage_eval(path, seeds=seeds, dataset_as=dataset_as, data_dir=data_dir)
    done = write_imported(out, evals, plot=plot)
    for item, ev in zip(done, evals, strict=True):
        item["eval"] = ev
    return done
