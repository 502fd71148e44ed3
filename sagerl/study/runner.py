"""Run a study cell by cell: the reference evaluation, then train + evaluate for every (cell, seed).

The study folder's layout is :mod:`sagerl.study.folders`.

Each cell runs through the same functions as ``sagerl train`` and ``sagerl eval`` (so their run-folder
locks, resumption and checks apply). A cell that raises is recorded as failed, with its error, and the
study goes on; rerunning the study skips finished cells and retries failed or unfinished ones. A finished
cell records the train overrides and eval settings it ran with; when the study file has changed them, the
rerun refuses before training anything (:func:`check_finished_cells`), so a table never mixes results of
two settings under one name. With
``dry_run`` nothing runs: :func:`cell_commands` gives the equivalent shell commands of every cell, for a
cluster user to submit to a scheduler, and ``sagerl study FILE --aggregate-only`` builds the table from
what they wrote.

**Kernels.** A study with ``kernels: canonical`` (the default on a planted model) runs every run, the
reference evaluations included, in worker processes started with the canonical kernels' environment and the
study's threads (:func:`sagerl.kernels.environment`: the kernel libraries read it when torch loads, so the
calling process, whose torch is loaded, cannot switch): with ``jobs=1`` one worker runs them in turn. A
process that runs the canonical kernels already (started under them) runs them itself, as a ``native``
study does. ``--dry-run``'s commands pass ``--kernels``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import yaml

from sagerl.atomic_files import atomic_write_text
from sagerl.determinism import code_record, fixed_threads, machine_record
from sagerl.errors import ConfigError, first_line
from sagerl.kernels import CANONICAL, active_mode, effective_mode, environment
from sagerl.run_lock import RunFolderLockedError
from sagerl.study.folders import CELL_FILE, REFERENCE, read_cell_status, reference_folder, study_folder
from sagerl.study.spec import Cell, Study

__all__ = [
    "CELL_FILE",
    "REFERENCE",
    "cell_commands",
    "check_finished_cells",
    "read_cell_status",
    "reference_commands",
    "run_cell",
    "run_reference",
    "run_study",
    "study_folder",
]


def _train_overrides(study: Study, cell: Cell) -> dict[str, Any]:
    return {
        **study.run_overrides(cell),
        "seed": cell.seed,
        "max_steps": study.steps,
        "model": study.model_of(cell.build),
        "dataset": study.dataset,
    }


def _eval_kwargs(study: Study) -> dict[str, Any]:
    """The :func:`sagerl.eval.evaluate` arguments of every evaluation of ``study`` (``backend`` only when it is
    not ``hf``, so the records of cells finished before it was a setting still match)."""
    e = study.eval
    backend = {} if e.backend == "hf" else {"backend": e.backend}
    return dict(
        **backend,
        n=e.n,
        limit=e.limit,
        max_new_tokens=e.max_new_tokens,
        temperature=e.temperature,
        top_p=e.top_p,
        seed=e.seed,
        few_shot=e.few_shot,
        batch_size=e.batch_size,
        dtype=e.dtype,
    )


def _eval_args(study: Study, model: str, out: Path) -> list[str]:
    e = study.eval
    args = ["sagerl", "eval", "--model", model, "--dataset", ",".join(e.datasets), "-n", str(e.n)]
    args += ["--max-new-tokens", str(e.max_new_tokens), "--temperature", str(e.temperature)]
    args += ["--top-p", str(e.top_p), "--seed", str(e.seed), "--dtype", e.dtype, "--out", str(out)]
    args += ["--kernels", study.kernels]
    if e.backend != "hf":
        args += ["--backend", e.backend]
    for flag, value in (("--limit", e.limit), ("--few-shot", e.few_shot), ("--batch-size", e.batch_size)):
        if value is not None:
            args += [flag, str(value)]
    return args


def _set_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _threads_prefix(study: Study) -> str:
    """``OMP_NUM_THREADS=N `` before a printed command: torch then runs it with the study's threads."""
    return f"OMP_NUM_THREADS={study.threads} "


def cell_commands(study: Study, out: Path, cell: Cell) -> list[str]:
    """The ``sagerl train`` and ``sagerl eval`` commands that run ``cell`` (what ``--dry-run`` prints), each
    with the study's thread count (``OMP_NUM_THREADS=N``) and kernel mode (``--kernels``)."""
    folder = out / cell.folder
    args = ["sagerl", "train", "--preset", cell.preset, "--output-dir", str(folder / "train")]
    model = study.model_of(cell.build)
    if model is not None:
        args += ["--model", model]
    args += ["--dataset", study.dataset, "--max-steps", str(study.steps), "--kernels", study.kernels]
    for key, value in {**study.run_overrides(cell), "seed": cell.seed}.items():
        args += ["--set", f"{key}={_set_value(value)}"]
    evaluate = _eval_args(study, str(folder / "train" / "model"), folder / "eval")
    return [_threads_prefix(study) + shlex.join(args), _threads_prefix(study) + shlex.join(evaluate)]


def reference_commands(study: Study, out: Path) -> list[str]:
    """The ``sagerl eval`` command of the reference (the model before training), one per build."""
    return [
        _threads_prefix(study)
        + shlex.join(
            _eval_args(study, study.model_of(b) or "smollm2-135m-instruct", out / reference_folder(b))
        )
        for b in study.builds or [None]
    ]


def _recorded_settings(study: Study, cell: Cell) -> dict[str, Any]:
    """What a finished cell's ``cell.json`` records of how it ran (compared on every rerun): the train
    overrides, the eval settings and the keys its preset held (so a preset changed by a sagerl upgrade is
    noticed too)."""
    from sagerl.train.presets import load_preset

    record = {
        "train": _train_overrides(study, cell),
        "eval": _eval_kwargs(study),
        "preset_keys": load_preset(cell.preset),
        "threads": study.threads,
        "kernels": study.kernels,
        "dtypes": run_dtypes(study, cell),
    }
    return json.loads(json.dumps(record))


def run_dtypes(study: Study, cell: Cell) -> dict[str, str]:
    """The precision ``cell`` trains and is evaluated in on this machine: ``dtype: auto`` resolved as the run
    resolves it (bfloat16 where the CPU has bfloat16 units, :mod:`sagerl.precision`), so a study continued on
    another kind of machine does not pair float32 runs with bfloat16 ones (:func:`check_finished_cells`)."""
    from sagerl.train.run import resolve_config

    with warnings.catch_warnings():  # bfloat16 asked for on a CPU without its units: the run itself warns
        warnings.simplefilter("ignore")
        return {
            "train": resolve_config(cell.preset, _train_overrides(study, cell)).dtype,
            "eval": _planned_eval_dtype(study),
        }


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [d for k in keys for d in _differences(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [f"{prefix.rstrip('.')} ({_show(old)} -> {_show(new)})"]


def _show(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def check_finished_cells(study: Study, out: Path, *, runs_here: bool = True) -> None:
    """Refuse a rerun in which a finished cell's settings changed.

    A cell's ``cell.json`` records its preset, train overrides (the study's ``train.set``, the cell's
    ``set``, seed, steps, model, data set), eval settings and the keys the preset held; files written before
    this record hold only the preset and the cell's ``set`` (or no preset keys), which are then what is
    compared.

    Args:
        runs_here: the precisions (``dtype: auto`` resolved) are compared with what this machine resolves
            them to, since the runs to come run here. False where nothing runs (``--aggregate-only``, which
            may be read on any machine, an archive restored on a CPU without bfloat16 units included): the
            finished runs' and the reference's precisions are then compared with each other, so a table
            still never pairs runs of two precisions.

    Raises:
        ConfigError: naming the study folder, each changed cell and seed, and the keys that differ (old ->
            new), with what to do: delete that cell's folder to rerun it, or give the cell another name; or,
            with ``runs_here=False``, each precision the finished runs ran in and which runs.
    """
    stale = []
    planned = _planned_eval_dtype(study) if runs_here else None
    ran_in: dict[tuple[str, str], list[str]] = {}  # (stage, dtype) -> the runs in it
    for build in study.builds or [None]:  # the reference's evaluation is paired with every cell's
        recorded = _reference_dtype(out / reference_folder(build))
        if recorded is not None and not runs_here:
            ran_in.setdefault(("eval", recorded), []).append(
                f"the reference{'' if build is None else f' of {build}'}"
            )
        if None not in (recorded, planned) and recorded != planned:
            stale.append(f"the reference evaluation{'' if build is None else f' of {build}'}: dtypes.eval "
                         f"({json.dumps(recorded)} -> {json.dumps(planned)})")  # fmt: skip
    for cell in study.cells:
        previous = read_cell_status(out, cell)
        if previous is None or previous.get("status") != "ok":
            continue
        diffs = _differences({"preset": previous.get("preset")}, {"preset": cell.preset})
        if "settings" in previous:
            now = _recorded_settings(study, cell)
            for key in ("preset_keys", "threads", "kernels", "dtypes"):  # recorded before these were
                if key not in previous["settings"]:
                    now.pop(key)
            for key, value in list(now.get("dtypes", {}).items()):  # what this machine cannot tell
                if value is None or not runs_here:
                    now["dtypes"].pop(key)
                    ran = previous["settings"]["dtypes"].pop(key, None)
                    if not runs_here and ran is not None:
                        ran_in.setdefault((key, ran), []).append(f"{cell.name} seed {cell.seed}")
            diffs += _differences(previous["settings"], now)
        else:
            diffs += _differences(previous.get("overrides", {}), json.loads(json.dumps(cell.overrides)))
        if diffs:
            stale.append(f"{cell.name} seed {cell.seed}: {', '.join(diffs)}")
    for stage in ("train", "eval"):
        kinds = {dtype: runs for (where, dtype), runs in ran_in.items() if where == stage}
        if len(kinds) > 1:
            shown_kinds = (
                f"{dtype} ({', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''})"
                for dtype, runs in kinds.items()
            )
            stale.append(f"dtypes.{stage}: the finished runs ran in {' and '.join(shown_kinds)}")
    if stale:
        shown = "; ".join(stale[:5]) + (f"; and {len(stale) - 5} more" if len(stale) > 5 else "")
        dtype_hint = (
            " (dtype: auto resolves by the machine, bfloat16 where the CPU has bfloat16 units: to go on in the "
            "finished runs' precision, set dtype in train.set and eval.dtype, or run on a machine of their kind)"
            if "dtypes." in shown and runs_here
            else ""
        )
        raise ConfigError(
            f"{out}: finished cells ran with other settings than the study file gives ({shown}){dtype_hint}. "
            f"Delete those cells' folders under {out / 'cells'} to rerun them, or give the cells new names"
        )


def _planned_eval_dtype(study: Study) -> str | None:
    """The dtype the study's evaluations sample in here; None where this machine cannot tell (vLLM not installed:
    a GPU study checked or printed on a login node)."""
    from sagerl.eval.runner import planned_engine

    try:
        return planned_engine(study.eval.backend, study.eval.dtype)["dtype"]
    except ImportError:
        return None


def _reference_dtype(folder: Path) -> str | None:
    """The dtype a finished (or started) reference evaluation sampled in, from its ``eval_config.json``."""
    path = folder / "eval_config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("engine", {}).get("dtype")
    except (OSError, ValueError, AttributeError):
        return None  # the evaluation's own resume check reads it and says what is wrong


def _write_status(out: Path, cell: Cell, status: dict[str, Any]) -> None:
    atomic_write_text(out / cell.folder / CELL_FILE, json.dumps(status, indent=2) + "\n")


def run_reference(study: Study, out: Path, progress: bool = False, build: str | None = None) -> Path:
    """Evaluate the untrained model (of ``build``) once, with the study's threads (resumable); returns its
    eval folder."""
    from sagerl.eval import evaluate

    folder = out / reference_folder(build)
    with fixed_threads(study.threads):
        evaluate(
            study.model_of(build), study.eval.datasets, out=folder, progress=progress, **_eval_kwargs(study)
        )
    return folder


RUNNING_ERROR = "stopped before it finished (killed, or still running); rerun the study to resume it"
"""The ``error`` of a ``cell.json`` whose run has not finished: what the table shows for it meanwhile."""


def _earlier_calls(previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The calls of a cell before this one, from its ``cell.json``: its ``calls``, the last marked
    ``interrupted`` when its process stopped while running; a ``cell.json`` written before calls were recorded
    is one call of its times."""
    if previous is None:
        return []
    if "calls" in previous:
        calls = [dict(c) for c in previous["calls"]]
        if calls and previous.get("status") == "running":
            calls[-1]["status"], calls[-1]["interrupted"] = "interrupted", True
        return calls
    call = {k: previous[k] for k in ("train_s", "eval_s", "total_s") if k in previous}
    return [{**call, "status": previous.get("status")}]


def run_cell(study: Study, out: Path, cell: Cell, progress: bool = False) -> dict[str, Any]:
    """Train and evaluate one cell with the study's threads; returns (and writes) its status. Never raises
    for a failing cell (except KeyboardInterrupt). A cell whose folder another process holds (a study still
    running it) is returned with status ``busy`` and its records are left to that process.

    ``cell.json``'s ``train_s``, ``eval_s`` and ``total_s`` are sums over every call that ran the cell
    (``calls``: each one's times, status and machine), so a cell resumed after a failure or a kill reports
    the time it took, not the resume's. It is written once training ends (status ``running``) and at the
    end: a call killed in the middle of a stage adds the stages it finished."""
    from sagerl.eval import evaluate
    from sagerl.train.run import train

    folder = out / cell.folder
    earlier = _earlier_calls(read_cell_status(out, cell))
    status: dict[str, Any] = {"cell": cell.name, "preset": cell.preset, "seed": cell.seed}
    status["overrides"] = cell.overrides
    status["settings"] = _recorded_settings(study, cell)
    status["machine"] = machine_record()  # not a setting: a rerun elsewhere resumes, the table says so
    status["code"] = code_record()  # nor is the commit: study.json lists the commits the runs ran at
    if cell.build is not None:
        status["build"] = cell.build
    this: dict[str, Any] = {"machine": status["machine"], "code": status["code"]}
    started = time.perf_counter()

    def record(state: str) -> None:
        this["total_s"] = round(time.perf_counter() - started, 2)
        this["status"] = state
        calls = [*earlier, this]
        for key in ("train_s", "eval_s", "total_s"):
            if any(key in c for c in calls):
                status[key] = round(sum(float(c.get(key, 0.0)) for c in calls), 2)
        status["calls"] = calls
        status["status"] = state
        if state == "running":
            status["error"] = RUNNING_ERROR
        elif state == "ok":
            status.pop("error", None)
        _write_status(out, cell, status)

    stage, stage_started = "train_s", started
    try:
        with fixed_threads(study.threads):
            model = train(cell.preset, _train_overrides(study, cell), folder / "train", quiet=not progress)
        this["train_s"] = round(time.perf_counter() - stage_started, 2)
        record("running")  # a kill during the evaluation keeps the training's time
        stage, stage_started = "eval_s", time.perf_counter()
        with fixed_threads(study.threads):
            evaluate(
                str(model), study.eval.datasets, out=folder / "eval", progress=progress, **_eval_kwargs(study)
            )
        this["eval_s"] = round(time.perf_counter() - stage_started, 2)
        state = "ok"
    except RunFolderLockedError as exc:  # another process runs this cell now: its records are its own
        return {**status, "status": "busy", "error": f"{type(exc).__name__}: {first_line(exc)}"}
    except Exception as exc:  # a failing cell is reported, and the study goes on
        this[stage] = round(time.perf_counter() - stage_started, 2)
        state = "failed"
        status["error"] = f"{type(exc).__name__}: {first_line(exc)}"
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / "error.txt", traceback.format_exc())
    if state == "ok":
        (folder / "error.txt").unlink(missing_ok=True)  # an earlier call's failure, now resolved
        if study.keep == "model":
            drop_checkpoints(folder / "train")
    record(state)
    return status


def drop_checkpoints(train_folder: Path) -> list[Path]:
    """Delete a finished run's ``checkpoint-*`` folders (``train.keep: model``), keeping its final model, logs and
    metrics; returns what it deleted. A run is resumable from them only, so this is done after its evaluation."""
    dropped = sorted(p for p in train_folder.glob("checkpoint-*") if p.is_dir())
    for path in dropped:
        shutil.rmtree(path)
    return dropped


def _run_label(cell: Cell) -> str:
    """``grpo seed 3``, or ``grpo b2 seed 3`` on a reference build."""
    build = "" if cell.build is None else f" {cell.build}"
    return f"{cell.name}{build} seed {cell.seed}"


def _init_worker(filters: list) -> None:
    """A ``run_study(jobs > 1)`` worker starts with its parent's warning filters (spawned processes do not
    inherit them; the environment, with its progress-bar switches, they do) and glibc's malloc keeping what torch
    frees (:func:`sagerl.allocator.keep_freed_memory`, as the ``sagerl`` command's own process)."""
    import warnings

    from sagerl.allocator import keep_freed_memory

    keep_freed_memory()
    warnings.filters[:] = filters


def _import_run_modules() -> None:
    """What a :func:`run_study` worker runs first while the reference is evaluated: the imports of a run
    (torch, transformers, TRL; about 10 s of one core), so that the worker is ready when the runs are handed out.
    ``ProcessPoolExecutor`` starts a spawned worker only when a task finds none idle, one at a time."""
    import sagerl.eval  # noqa: F401
    import sagerl.train.run  # noqa: F401


def _run_cell_in_worker(
    study: Study, out: Path, cell: Cell, progress: bool = False, until: float | None = None
) -> dict[str, Any]:
    """:func:`run_cell` in a worker process of :func:`run_study` (the study's threads, as every run); quiet
    unless ``progress``; not started once ``until`` has passed (checked when the worker takes the run up)."""
    skipped = _not_started(until)
    if skipped is not None:
        return skipped
    from transformers.utils import logging as hf_logging

    if not progress:
        hf_logging.disable_progress_bar()
    return run_cell(study, out, cell, progress=progress)


def _run_reference_in_worker(study: Study, out: Path, build: str | None, progress: bool = False) -> Path:
    """:func:`run_reference` in a worker process of :func:`run_study` (a study with canonical kernels)."""
    from transformers.utils import logging as hf_logging

    if not progress:
        hf_logging.disable_progress_bar()
    return run_reference(study, out, progress=progress, build=build)


def _needs_workers(study: Study) -> bool:
    """Whether the study's runs must go to worker processes: canonical kernels, a CPU that runs them (else
    one warning, and the runs go on natively here) and a process that does not run them already."""
    if study.kernels != CANONICAL:
        return False
    return effective_mode(CANONICAL, "kernels") == CANONICAL and active_mode() != CANONICAL


@contextmanager
def _worker_environment(study: Study) -> Iterator[None]:
    """This process's environment set, for the body, to what the study's worker processes must start with
    (:func:`sagerl.kernels.environment`: its kernel mode and threads); restored after. Spawned workers copy
    it when they start; this process's torch, loaded already, is not changed by it."""
    wanted = environment(study.kernels, threads=study.threads)
    before = {k: os.environ.get(k) for k, v in wanted.items() if os.environ.get(k) != v}
    os.environ.update({k: wanted[k] for k in before})
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_study(
    study: Study,
    out: str | Path | None = None,
    *,
    progress: bool = False,
    log: Callable[[str], None] = print,
    jobs: int = 1,
    until: float | None = None,
) -> Path:
    """Run every unfinished cell of ``study`` (reference first) into ``out`` (default :func:`study_folder`),
    then write the aggregate table. Runs go seed by seed (each cell's run of the first seed, in file order, then
    the next seed), so a study stopped partway holds whole seeds for its paired comparisons; the log numbers each
    run by its place in the file.

    Args:
        jobs: cells run at once, each in its own process (the reference evaluations are done first). Every
            run, alone or in a worker, has the study's ``threads`` torch threads and its own seeds, so a run
            gives the same weights whatever ``jobs`` (tests/study checks it): ``jobs`` only trades cores for
            time. On a 2-core machine ``jobs=2`` with ``threads: 1`` runs the planted task's tiny-model cells
            about twice as fast. Progress bars are off in the workers.
        until: a time (seconds since the epoch, as ``time.time()``) after which no run starts: the runs under
            way finish, the others are logged as not started and left for a later call (a sitting of a study
            longer than the machine is held; ``sagerl study --until``). The reference evaluations always run.

    Returns:
        the study folder.

    Raises:
        ConfigError: a finished cell ran with other settings (:func:`check_finished_cells`), or jobs < 1.
        SagerlError: the reference evaluation fails (every comparison needs it).
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs={jobs!r}: give a positive number of cells to run at once")
    from sagerl.study.table import write_study_table

    out = Path(out) if out is not None else study_folder(study, None)
    check_finished_cells(study, out)
    out.mkdir(parents=True, exist_ok=True)
    if not progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights", "Writing model shards" for every cell
    record = {"name": study.name, "source": study.source, "cells": [c.__dict__ for c in study.cells]}
    atomic_write_text(out / "study.yaml", yaml.safe_dump(record, sort_keys=False, allow_unicode=True))
    start = time.perf_counter()
    workers = _needs_workers(study)
    todo = []
    for i, cell in enumerate(study.cells, start=1):
        previous = read_cell_status(out, cell)
        if previous is not None and previous.get("status") == "ok":
            log(f"[{i}/{len(study.cells)}] {_run_label(cell)}: done before, skipped")
        else:
            todo.append((i, cell))
    # seed by seed (every cell's first seed, then the next): a study stopped partway holds whole seeds to pair
    seed_order = {seed: n for n, seed in enumerate(dict.fromkeys(c.seed for c in study.cells))}
    todo.sort(key=lambda item: (seed_order[item[1].seed], item[0]))
    later: list[Cell] = []  # runs not started: past ``until``

    def report(i: int, cell: Cell, status: dict[str, Any]) -> None:
        if status["status"] == NOT_STARTED:
            later.append(cell)
        detail = f"{status['total_s']:.0f} s" if status["status"] == "ok" else status["error"]
        log(f"[{i}/{len(study.cells)}] {_run_label(cell)}: {status['status']} ({detail})")

    def reference_line(build: str | None) -> str:
        return f"reference: {study.model_of(build) or 'embedded model'} on {', '.join(study.eval.datasets)}"

    if not workers and (jobs == 1 or len(todo) <= 1):
        for build in study.builds or [None]:
            log(reference_line(build))
            run_reference(study, out, progress=progress, build=build)
        for i, cell in todo:
            report(i, cell, _not_started(until) or run_cell(study, out, cell, progress=progress))
    else:
        import multiprocessing
        import warnings
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")  # no forked torch or tokenizer state
        shown = progress and jobs == 1  # one worker at a time may draw its bars
        with (
            _worker_environment(study) if workers else nullcontext(),
            ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=context,
                initializer=_init_worker,
                initargs=(list(warnings.filters),),
            ) as pool,
        ):
            # the other workers start (and import what a run needs, about 10 s of a core each) while the
            # reference is evaluated, not when the first runs are handed out after it
            warming = [
                pool.submit(_import_run_modules) for _ in range(min(jobs, len(todo)) - (1 if workers else 0))
            ]
            for build in study.builds or [None]:
                log(reference_line(build))
                if workers:  # with the study's kernels, in a worker; else here, before the cells
                    pool.submit(_run_reference_in_worker, study, out, build, shown).result()
                else:
                    run_reference(study, out, progress=progress, build=build)
            for future in warming:
                future.result()
            submitted = {
                pool.submit(_run_cell_in_worker, study, out, cell, shown, until): (i, cell)
                for i, cell in todo
            }
            for future in as_completed(submitted):
                report(*submitted[future], future.result())
    write_study_table(study, out)
    left = f"; {len(later)} runs not started (past --until): run the study again to go on" if later else ""
    log(f"study total {time.perf_counter() - start:.0f} s this call; table: {out / 'table.md'}{left}")
    return out


def longest_run_s(study: Study, out: Path) -> float | None:
    """The longest ``total_s`` (training and evaluation, seconds, over every call) among the study's finished
    runs in ``out``; None when none has finished. What ``sagerl study --finish-by`` keeps free before its end:
    a run of the same study on the same machine is expected to take about as long (a run restored from an
    archive made on another kind of machine took that machine's time)."""
    times = [
        float(status["total_s"])
        for cell in study.cells
        if (status := read_cell_status(out, cell)) is not None
        and status.get("status") == "ok"
        and isinstance(status.get("total_s"), (int, float))
    ]
    return max(times) if times else None


NOT_STARTED = "not started"
"""The status :func:`run_study` reports (and writes nowhere) for a run it did not start: past its ``until``."""


def _not_started(until: float | None) -> dict[str, Any] | None:
    """The report of a run not started because ``until`` has passed; None while it has not (or is None)."""
    if until is None or time.time() < until:
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(until))
    return {"status": NOT_STARTED, "error": f"past {when}: left for a later call"}
