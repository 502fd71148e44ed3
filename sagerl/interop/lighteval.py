"""lighteval's evaluation files in and out (``sagerl import lighteval``, ``sagerl export lighteval``).

lighteval (what open-r1 and many TRL-based papers report with) writes, under its ``--output-dir``::

    results/<model>/results_<date>.json             the means: {"config_general", "results", "versions",
                                                     "config_tasks", "summary_tasks", "summary_general"}
    details/<model>/<date>/details_<task>_<date>.parquet   with --save-details: one row per problem

where ``results[task]`` holds keys such as ``pass@k:k=1&n=16`` (the mean over problems of the per-problem
unbiased pass@k, Chen et al. 2021) and ``pass@k:k=1&n=16_stderr`` (the sample standard deviation of the
per-problem values over the square root of the number of problems), ``task`` being ``<name>|<few-shot>``,
and ``results["all"]`` averages every key over the tasks. A details row holds the problem (``doc``, with its
``id`` and ``num_samples``), the n completions' texts (``model_response.text``) and the per-problem value of
each metric (``metric``).

Import. The results file has only means, so the import reads the details: a problem's number of correct
samples c is n times its ``pass@k:k=1&n=N`` (or ``avg@n:n=N``) value, or the one c whose pass@k matches
a larger k. The details say how many samples of a problem were right but not which, so ``samples.jsonl``
places the c correct outcomes at random among the n (seeded by the problem, so that any subset is a fair
draw, as ``--intersect`` takes) and carries no texts (they could not be paired with their outcome). When
the results file is there, every pass@k it reports must equal the mean the counts give (else the two files
are not of one evaluation).

Export. :func:`export_lighteval` writes a sagerl evaluation as ``results/<model>/results_<date>.json`` in the
layout above, with ``pass@k:k=K&n=N`` for every reported k, ``avg@n:n=N`` (the mean accuracy), and
``_stderr`` computed as lighteval computes it (:func:`mean_stderr`), so the file drops into a table built
from lighteval's results. Task names: math500 -> ``math_500``; aime24, aime25 and gsm8k keep theirs
(lighteval's names); others keep the dataset's name unless ``task_names`` says otherwise.

Tested against files lighteval 0.13.0 wrote (tests/interop/data/lighteval/, README there says how).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.errors import DataError, SagerlError
from sagerl.interop.imported import (
    ImportedEval,
    file_sha256,
    folder_name,
    map_datasets,
    parse_dataset_map,
    read_json_file,
    write_imported,
)

FORMAT = "lighteval"
MISSING = (
    "lighteval's details give each problem's number of correct samples, not which ones: samples.jsonl places "
    "them at random among the n and holds no texts, so the pattern, diversity and branching analyses need a "
    "`sagerl eval` of the model"
)
DEFAULT_TASKS = {"math500": "math_500", "aime24": "aime24", "aime25": "aime25", "gsm8k": "gsm8k"}
"""sagerl set -> lighteval task name, where lighteval has the same set."""

_PASSK = re.compile(r"^(?P<base>[\w.-]*pass@k):k=(?P<k>\d+)&n=(?P<n>\d+)$")
_AVG = re.compile(r"^(?P<base>[\w.-]*avg@n):n=(?P<n>\d+)$")
_TOLERANCE = 1e-6


def mean_stderr(values: Sequence[float] | np.ndarray) -> float:
    """lighteval's standard error of a mean over problems: the sample standard deviation (ddof 1) of the
    per-problem values divided by the square root of their number (``lighteval.metrics.utils.stderr``).

    Raises:
        ValueError: fewer than two values (lighteval then writes no ``_stderr``).
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2:
        raise ValueError("a standard error needs at least two problems")
    return float(arr.std(ddof=1) / math.sqrt(arr.size))


def _task_dataset(task: str) -> str:
    """``"math_500|0"`` -> ``"math_500"`` (and the older ``"suite|task|0"`` -> ``"task"``)."""
    parts = task.split("|")
    return parts[-2] if len(parts) >= 2 else parts[0]


# ----------------------------------------------------------------------------------------------------- import


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json_file(path)
    if not isinstance(data, dict) or not {"config_general", "results"} <= set(data):
        hint = ""
        if isinstance(data, dict) and "per_seed_records" in data:
            hint = "; it is the SAGE authors' evaluation_results.json: use `sagerl import sage-eval`"
        raise DataError(f"{path}: not a lighteval results file (needs 'config_general' and 'results'){hint}")
    return data


def _locate(path: Path) -> tuple[Path | None, Path]:
    """(results file or None, details folder) of a results file or a details folder.

    Raises:
        DataError: neither, or a results file whose details folder is missing.
    """
    if path.is_file():
        if path.suffix != ".json":
            raise DataError(
                f"{path}: neither a lighteval results file (results_<date>.json) nor a details folder"
            )
        _read_json(path)  # the layout, before looking for its details
        stamp = path.stem.removeprefix("results_")
        results_root = next((p for p in path.parents if p.name == "results"), None)
        if results_root is None:
            raise DataError(
                f"{path}: not under lighteval's results/<model>/ folder, so its details folder cannot be found; "
                "pass the details folder (details/<model>/<date>/, written with --save-details)"
            )
        details = results_root.parent / "details" / path.parent.relative_to(results_root) / stamp
        if not details.is_dir():
            raise DataError(
                f"{path}: no details folder {details}; the results file holds only means, the import needs the "
                "per-problem details lighteval writes with --save-details"
            )
        return path, details
    if path.is_dir():
        if not list(path.glob("details_*.parquet")):
            raise DataError(
                f"{path}: no details_*.parquet in it; give a lighteval details folder (details/<model>/<date>/) "
                "or a results file (results/<model>/results_<date>.json)"
            )
        details_root = next((p for p in path.parents if p.name == "details"), None)
        results = None
        if details_root is not None:
            rel = path.parent.relative_to(details_root)
            candidate = details_root.parent / "results" / rel / f"results_{path.name}.json"
            results = candidate if candidate.is_file() else None
        return results, path
    raise DataError(f"{path}: no such file or folder")


def _count(where: str, metric: Mapping[str, Any]) -> tuple[int, int]:
    """(n, c) of one problem from its per-problem metric values.

    Raises:
        DataError: no pass@k or avg@n metric, a value that is not c/n for 0/1 scores, or counts that the
            metrics do not determine.
    """
    direct: list[tuple[int, float, str]] = []  # (n, c/n, key): pass@1 or avg@n
    inverse: list[tuple[int, int, float, str]] = []  # (n, k, value, key)
    for key, value in metric.items():
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        m = _PASSK.match(key)
        if m and int(m["k"]) == 1:
            direct.append((int(m["n"]), float(value), key))
        elif m:
            inverse.append((int(m["n"]), int(m["k"]), float(value), key))
        elif (a := _AVG.match(key)) is not None:
            direct.append((int(a["n"]), float(value), key))
    if direct:
        n, share, key = max(direct, key=lambda t: t[0])
        c = share * n
        if abs(c - round(c)) > _TOLERANCE * n or not -_TOLERANCE <= share <= 1 + _TOLERANCE:
            raise DataError(
                f"{where}: field 'metric.{key}' is {share!r}, not c/{n} for a whole number c: pass@k needs 0/1 "
                "scores (correct or not)"
            )
        return n, int(round(c))
    if inverse:
        from sagerl.eval.passk import pass_at_k

        n, k, value, key = max(inverse, key=lambda t: (t[0], -t[1]))
        found = [c for c in range(n + 1) if abs(pass_at_k(n, c, k) - value) <= _TOLERANCE]
        if len(found) == 1:
            return n, found[0]
        reason = "no count c gives it" if not found else f"counts {found[0]}..{found[-1]} all give it"
        raise DataError(
            f"{where}: field 'metric.{key}' = {value!r}: {reason}; the import needs a pass@k:k=1 or avg@n metric "
            "in the task to recover the counts"
        )
    raise DataError(
        f"{where}: field 'metric' has no pass@k:k=K&n=N or avg@n:n=N value; the import needs one per problem"
    )


def _arranged(c: int, n: int, seed_text: str) -> list[int]:
    """c ones among n, at positions drawn at random with a seed derived from ``seed_text``."""
    from sagerl.eval.samplers import sample_seed

    rng = np.random.default_rng(sample_seed(0, "lighteval-import", seed_text) % (2**32))
    row = [0] * n
    for j in rng.permutation(n)[:c]:
        row[int(j)] = 1
    return row


def _read_details(details: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """task -> problem id -> (n, c), from every ``details_*.parquet`` of the folder.

    Raises:
        DataError: an unreadable file, a row without its fields, a problem given twice, counts as
            :func:`_count`.
    """
    import pyarrow.parquet as pq

    tasks: dict[str, dict[str, tuple[int, int]]] = {}
    for file in sorted(details.glob("details_*.parquet")):
        try:
            rows = pq.read_table(file).to_pylist()
        except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
            raise DataError(f"{file}: not a readable parquet file ({str(exc).splitlines()[0]})") from exc
        for index, row in enumerate(rows):
            doc, metric = row.get("doc"), row.get("metric")
            if not isinstance(doc, dict) or not isinstance(metric, dict):
                raise DataError(
                    f"{file}: row {index} lacks the field 'doc' or 'metric' of a lighteval details row"
                )
            task = str(doc.get("task_name") or file.stem.removeprefix("details_").rsplit("_", 1)[0])
            pid = doc.get("id")
            pid = str(index) if pid in (None, "") else str(pid)
            where = f"{file}: record (task={task!r}, problem id={pid!r})"
            per_task = tasks.setdefault(task, {})
            if pid in per_task:
                raise DataError(f"{where}: field 'doc.id' appears twice (one row per problem)")
            per_task[pid] = _count(where, metric)
    if not tasks:
        raise DataError(f"{details}: its details files hold no rows")
    return tasks


def _check_against_results(
    results_file: Path, results: dict[str, Any], counts: dict[str, dict[str, tuple[int, int]]]
) -> None:
    """Every per-task ``pass@k:k=K&n=N`` of the results file equals the mean the details' counts give.

    Raises:
        DataError: a task of the details missing from the results file, or a value that differs (names the
            task and the metric).
    """
    from sagerl.eval.passk import pass_at_k

    reported = results.get("results", {})
    for task, problems in counts.items():
        entry = reported.get(task)
        if not isinstance(entry, dict):
            raise DataError(f"{results_file}: record (task={task!r}): field 'results.{task}' is missing")
        for key, value in entry.items():
            m = _PASSK.match(key)
            if not m or not isinstance(value, int | float):
                continue
            k, n = int(m["k"]), int(m["n"])
            if any(pn != n for pn, _ in problems.values()):
                continue
            mean = float(np.mean([pass_at_k(n, c, k) for _, c in problems.values()]))
            if abs(mean - float(value)) > 1e-9:
                raise DataError(
                    f"{results_file}: record (task={task!r}): field 'results.{task}.{key}' is {value!r}, its "
                    f"details give {mean!r}: the results file and the details folder are not of one evaluation"
                )


def read_lighteval(
    path: str | Path,
    *,
    dataset_as: dict[str, str] | list[str] | None = None,
    data_dir: str | Path | None = None,
) -> list[ImportedEval]:
    """Read a lighteval evaluation (a results file with its details folder, or a details folder) into
    :class:`ImportedEval` objects: one for the model, every task a dataset (named without its ``|few-shot``),
    or one per task when the tasks have different n.

    Args:
        path: ``results/<model>/results_<date>.json`` (its details are ``details/<model>/<date>/``) or a
            details folder.
        dataset_as: task name -> sagerl set, as in :func:`sagerl.interop.sage_eval.read_sage_eval`.
        data_dir: folder of the sagerl sets' JSONL files.

    Raises:
        DataError: one line naming the file, the record (task, problem id) and the field: a file of another
            layout, a results file without its details, a problem given twice, a task whose problems differ in
            n, scores that are not 0/1, details that disagree with the results file.
    """
    mapping = parse_dataset_map(dataset_as)
    results_file, details = _locate(Path(path))
    counts = _read_details(details)
    results = _read_json(results_file) if results_file is not None else None
    if results is not None and results_file is not None:
        _check_against_results(results_file, results, counts)
    general = (results or {}).get("config_general", {}) or {}
    model = str(general.get("model_name") or details.parent.name)
    params = ((general.get("model_config") or {}).get("generation_parameters") or {}) if general else {}
    settings = {
        "temperature": params.get("temperature"),
        "top_p": params.get("top_p"),
        "max_new_tokens": params.get("max_new_tokens"),
        "seed": params.get("seed"),
    }

    by_n: dict[int, list[str]] = {}
    for task, problems in counts.items():
        ns = {n for n, _ in problems.values()}
        if len(ns) > 1:
            pid = next(p for p, (n, _) in problems.items() if n != min(ns))
            raise DataError(
                f"{details}: record (task={task!r}, problem id={pid!r}): field 'metric' has n={sorted(ns)} across "
                "the task's problems; an evaluation has one n per problem"
            )
        by_n.setdefault(ns.pop(), []).append(task)

    source_files = {"details": str(details.resolve()), "date": _iso_date(details.name)}
    if results_file is not None:
        source_files["results"] = str(results_file.resolve())
        source_files["results_sha256"] = file_sha256(results_file)
    evals = []
    for n, tasks in sorted(by_n.items()):
        groups = [tasks] if len(by_n) == 1 else [[t] for t in tasks]
        for group in groups:
            outcomes: dict[str, list[list[int]]] = {}
            ids: dict[str, list[str]] = {}
            for task in sorted(group, key=_task_dataset):
                name = _task_dataset(task)
                if name in outcomes:
                    raise DataError(f"{details}: tasks {task!r} and another both name dataset {name!r}")
                problems = counts[task]
                order = sorted(problems, key=lambda p: (0, int(p), "") if p.isdigit() else (1, 0, p))
                ids[name] = order
                outcomes[name] = [_arranged(problems[p][1], n, f"{task}/{p}") for p in order]
            suffix = "" if len(groups) == 1 else _task_dataset(group[0])
            evals.append(
                ImportedEval(
                    name=folder_name(model, suffix),
                    model=model,
                    n=n,
                    outcomes=outcomes,
                    problem_ids=ids,
                    source={
                        "format": FORMAT,
                        **source_files,
                        "tasks": sorted(group, key=_task_dataset),
                        "sample_index": "the c correct outcomes of a problem are placed at random among its n "
                        "(lighteval's details record c, not which samples)",
                        "reported": {t: (results or {}).get("results", {}).get(t) for t in sorted(group)},
                    },
                    missing=MISSING,
                    settings=settings,
                )
            )
    for ev in evals:
        map_datasets(ev, mapping, data_dir=data_dir, where=f"{details}: ")
    return evals


def import_lighteval(
    path: str | Path,
    out: str | Path,
    *,
    dataset_as: dict[str, str] | list[str] | None = None,
    data_dir: str | Path | None = None,
    plot: bool = True,
) -> list[dict[str, Any]]:
    """``sagerl import lighteval``: :func:`read_lighteval`, then :func:`.imported.write_imported` into ``out``.

    Returns:
        per evaluation ``{"folder", "written", "results", "eval"}``.

    Raises:
        DataError, SagerlError: as :func:`read_lighteval` and :func:`.imported.write_imported`; nothing is
            written when the input has an error.
    """
    evals = read_lighteval(path, dataset_as=dataset_as, data_dir=data_dir)
    done = write_imported(out, evals, plot=plot)
    for item, ev in zip(done, evals, strict=True):
        item["eval"] = ev
    return done


# ----------------------------------------------------------------------------------------------------- export


def _iso_date(stamp: str) -> str | None:
    """lighteval's file date ``2026-12-04T15-18-40.511926`` as ISO 8601 (``2026-12-04T15:18:40.511926``), or
    None when ``stamp`` is not one."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d)-(\d\d)-(\d\d(?:\.\d+)?)", stamp)
    return f"{m[1]}T{m[2]}:{m[3]}:{m[4]}" if m else None


def _stamp(meta: Mapping[str, Any]) -> str:
    """lighteval's file date (``2026-12-04T15-18-40``) from the evaluation's ``finished_at``."""
    when = str(meta.get("finished_at") or meta.get("started_at") or "1970-01-01T00:00:00")
    return re.sub(r"[+-]\d\d:\d\d$|Z$", "", when).replace(":", "-")


def lighteval_results(
    run_dir: str | Path, *, task_names: Mapping[str, str] | Sequence[str] | None = None
) -> dict[str, Any]:
    """The lighteval results document of a sagerl evaluation folder (layout in this module's doc).

    Per dataset, for n samples per problem and each reported k: ``pass@k:k=K&n=N`` (the mean over problems of
    the unbiased per-problem pass@k, as in ``results.json``), ``avg@n:n=N`` (the mean accuracy) and, with two
    or more problems, each one's ``_stderr`` (:func:`mean_stderr`). ``all`` averages every key over the tasks,
    as lighteval does. The bootstrap CIs of ``results.json`` go under ``sagerl.ci``.

    Args:
        run_dir: a folder written by ``sagerl eval`` (or an import).
        task_names: dataset -> lighteval task name (``{"arith": "my_arith"}`` or ``["arith=my_arith"]``);
            default :data:`DEFAULT_TASKS`, else the dataset's name.

    Raises:
        SagerlError: not an evaluation folder (no results.json or samples.jsonl), or a malformed ``task_names``.
    """
    from sagerl.analysis.runs import load_eval_run
    from sagerl.eval.passk import pass_at_k_matrix
    from sagerl.eval.results import read_results

    names = _task_map(task_names)
    results = read_results(run_dir)
    run = load_eval_run(run_dir)
    meta = results.get("meta", {})
    n = run.n
    ks = [int(k) for k in meta.get("ks") or []] or sorted(
        int(key.split("@")[1]) for key in results["average"] if key.startswith("pass@")
    )
    tasks: dict[str, dict[str, float]] = {}
    config_tasks: dict[str, Any] = {}
    summary_tasks: dict[str, Any] = {}
    for ds in run.datasets:
        counts = run.correct_counts(ds)
        matrix = pass_at_k_matrix(n, counts, ks)
        few_shot = run.few_shot.get(ds) or 0
        task = names.get(ds) or DEFAULT_TASKS.get(ds, ds)
        key = f"{task}|{few_shot}"
        entry: dict[str, float] = {}
        metrics = []
        columns = [(f"pass@k:k={k}&n={n}", matrix[:, j], f"PassAtK(k={k}, n={n})") for j, k in enumerate(ks)]
        columns.append((f"avg@n:n={n}", counts / n, f"AvgAtN(n={n})"))
        for metric_name, values, fn in columns:
            entry[metric_name] = float(np.mean(values))
            if values.size > 1:
                entry[f"{metric_name}_stderr"] = mean_stderr(values)
            metrics.append(
                {
                    "metric_name": metric_name,
                    "higher_is_better": True,
                    "category": "GENERATIVE",
                    "sample_level_fn": fn,
                    "corpus_level_fn": "mean",
                    "batched_compute": False,
                }
            )
        if key in tasks:
            raise SagerlError(
                f"{run_dir}: two datasets map to lighteval task {key!r}; pass --task DATASET=NAME"
            )
        tasks[key] = entry
        num = int(counts.size)
        config_tasks[key] = {
            "name": task,
            "metrics": metrics,
            "num_fewshots": few_shot,
            "original_num_docs": num,
            "effective_num_docs": num,
            "version": 0,
        }
        summary_tasks[key] = {
            "hashes": {},
            "truncated": 0,
            "non_truncated": num,
            "padded": 0,
            "non_padded": 0,
        }
    average: dict[str, float] = {}
    for entry in tasks.values():
        for metric_name, value in entry.items():
            average[metric_name] = average.get(metric_name, 0.0) + value / len(tasks)
    model = str(meta.get("model") or Path(run_dir).name)
    generation = {key: meta.get(key) for key in ("temperature", "top_p", "max_new_tokens", "seed")}
    total = sum(v["effective_num_docs"] for v in config_tasks.values())
    return {
        "config_general": {
            "lighteval_sha": None,
            "num_fewshot_seeds": 1,
            "max_samples": meta.get("limit"),
            "job_id": "0",
            "start_time": None,
            "end_time": None,
            "total_evaluation_time_secondes": None,
            "model_config": {"model_name": model, "generation_parameters": generation},
            "model_name": model,
        },
        "results": {**tasks, "all": average},
        "versions": {},
        "config_tasks": config_tasks,
        "summary_tasks": summary_tasks,
        "summary_general": {
            "hashes": {},
            "truncated": 0,
            "non_truncated": total,
            "padded": 0,
            "non_padded": 0,
        },
        "sagerl": {
            "source": str(Path(run_dir).resolve()),
            "n": n,
            "estimator": "unbiased pass@k, 1 - C(n-c,k)/C(n,k) (Chen et al. 2021); _stderr: std (ddof 1) of the "
            "per-problem values / sqrt(problems), as lighteval",
            "ci": {
                f"{names.get(ds) or DEFAULT_TASKS.get(ds, ds)}|{run.few_shot.get(ds) or 0}": results[
                    "datasets"
                ][ds].get("ci", {})
                for ds in run.datasets
            },
            "imported_from": meta.get("imported", {}).get("format")
            if isinstance(meta.get("imported"), dict)
            else None,
        },
    }


def _task_map(task_names: Mapping[str, str] | Sequence[str] | None) -> dict[str, str]:
    if not task_names:
        return {}
    if isinstance(task_names, Mapping):
        return {str(k): str(v) for k, v in task_names.items()}
    out = {}
    for pair in task_names:
        name, sep, task = str(pair).partition("=")
        if not sep or not name.strip() or not task.strip():
            raise SagerlError(f"--task {pair!r}: expected DATASET=LIGHTEVAL_TASK, e.g. math500=math_500")
        out[name.strip()] = task.strip()
    return out


def export_lighteval(
    run_dir: str | Path, out: str | Path, *, task_names: Mapping[str, str] | Sequence[str] | None = None
) -> Path:
    """``sagerl export lighteval``: write :func:`lighteval_results` of ``run_dir`` as lighteval does, to
    ``out/results/<model>/results_<date>.json`` (``out`` as lighteval's ``--output-dir``; ``<model>`` the
    model's name, the last part of a local path), or to ``out`` itself when it ends in ``.json``. Written
    atomically; rerunning writes the same file.

    Returns:
        the path written.

    Raises:
        SagerlError: as :func:`lighteval_results`. WriteError: the file cannot be written.
    """
    from sagerl.eval.results import read_results
    from sagerl.eval.samples import write_json_atomic

    doc = lighteval_results(run_dir, task_names=task_names)
    out = Path(out)
    if out.suffix == ".json":
        path = out
    else:
        model = doc["config_general"]["model_name"]
        model_path = Path(model)
        rel = model_path.name if model_path.is_absolute() or model_path.exists() else model
        path = out / "results" / rel / f"results_{_stamp(read_results(run_dir).get('meta', {}))}.json"
    write_json_atomic(path, doc)
    return path
