"""A study file: presets × seeds × overrides, the model and tasks, the step budget and the eval settings.

Layout (YAML)::

    name: planted-grid                 # the default output folder is runs/study-<name>
    model: planted-reference           # any --model value: a folder, a hub id, a built-in name
    train:
      dataset: planted_train           # any --dataset value
      steps: 60                        # optimizer steps per cell
      set: {learning_rate: 1.0e-3}     # --set overrides for every cell (trainer or run keys)
      keep: checkpoints                # or model: a finished run deletes its checkpoints (optimizer state)
    eval:
      datasets: [planted_common, planted_rare]
      n: 64                            # samples per problem: pass@k for k = 1, 2, 4, ..., n
      max_new_tokens: 24
      temperature: 1.0                 # also: top_p, limit, few_shot, batch_size, seed, dtype, backend
    seeds: [0, 1, 2]
    cells:
      - preset: grpo
      - preset: grpo+branch
        name: grpo+branch@reward       # default: the preset, then the overrides as key=value
        set: {kl_placement: reward}
        seeds: [0]                     # optional: this cell's own seeds
    sweeps:                            # optional: each grid expands into one cell per combination
      - preset: grpo+branch
        grid: {gamma: [0.3, 1.0], tau: [0.5, 1.0]}
        seeds: [0]                     # cells grpo+branch@gamma=0.3@tau=0.5, ...; with name: N,
                                       # N@gamma=0.3@tau=0.5, ...
    paired:                            # optional: every cell against a baseline cell, seed by seed
      baseline: grpo                   # or a list, [grpo, pkpo]: paired.md, then paired-vs-pkpo.md
      metrics: [solved/planted_rare, pass@1/planted_common, kl/reference]
    settings:                          # optional: the same cells in several settings (model, train, eval,
      - name: rare2                    # seeds, builds overridden; train.set merged), each its own folder
      - name: rare10                   # and reference: OUT/<setting>/
        model: planted-reference-10
    builds: [b1, b2, b3]               # optional: the shipped reference builds of a planted model, a
                                       # factor of the study (every cell x build x seed; the build's
                                       # reference, and its teacher for planted-teacher)
    threads: 1                         # torch threads of every run (default 1), whatever --jobs is
    kernels: canonical                 # CPU kernels of every run: canonical (AVX2, the same bytes on every
                                       # x86-64 CPU; the default on a planted model) or native (the default
                                       # otherwise); sagerl.kernels
    pareto:                            # optional: two metrics, both maximised: frontier.md and pareto.png
      x: solved/planted_rare           # (sagerl.study.frontier: dominance on paired differences)
      y: pass@1/planted_common

:func:`load_study` checks everything a cell needs before any training starts: unknown top-level or
section keys, unknown presets, unknown or ill-typed ``set`` keys and values the ``SAGEConfig`` refuses
(through the same resolution and checks as ``sagerl train --set``), duplicate cell names, a paired baseline
that is not a cell. Errors name the file, the cell and the key. :func:`load_studies` expands ``settings`` into
one :class:`Study` per setting.

**Reference builds.** A planted model (``planted-reference``, ``planted-reference-10``, ``planted-teacher``) is
shipped in several independent builds (:mod:`sagerl.tasks.planted_model`). With ``builds``, every cell runs
for every build and seed, on that build's model (and that build's ``planted-teacher`` where a cell names
it), each build with its own reference evaluation; the table pools builds × seeds
(:mod:`sagerl.study.table`).

**Threads.** Every run of a study (the reference evaluation too) runs with ``threads`` torch threads, whether
it runs alone or in a worker of ``--jobs N``: a run's numbers then do not depend on how it was scheduled
(:mod:`sagerl.determinism`).

**Kernels.** ``kernels: canonical`` runs every run (the reference evaluation too) in a worker process whose
kernel libraries are capped at AVX2 before torch loads (:mod:`sagerl.kernels`), so a planted study gives the
same numbers on every x86-64 CPU with AVX2; it is the default when the study's model is a planted one,
``native`` otherwise. Another value is one error naming ``kernels`` and the modes.
"""

from __future__ import annotations

import itertools
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sagerl.errors import ConfigError, SagerlError
from sagerl.eval.backends import BACKENDS

TOP_KEYS = {
    "name",
    "model",
    "train",
    "eval",
    "seeds",
    "cells",
    "sweeps",
    "settings",
    "paired",
    "builds",
    "threads",
    "kernels",
    "pareto",
}
SETTING_KEYS = {"name", "model", "train", "eval", "seeds", "builds"}
PAIRED_KEYS = {"baseline", "metrics"}
PARETO_KEYS = {"x", "y"}
TRAIN_KEYS = {"dataset", "steps", "set", "keep"}
KEEP = ("checkpoints", "model")
"""What a finished run keeps of its training folder (``train.keep``): its ``checkpoint-*`` folders and final model
(the default: it can be resumed with more steps), or the final model only (the checkpoints, mostly optimizer
state, are deleted once the run's evaluation has finished: a study of many real-LM runs fits on a disk)."""
EVAL_KEYS = {
    "datasets",
    "n",
    "max_new_tokens",
    "temperature",
    "top_p",
    "limit",
    "few_shot",
    "batch_size",
    "seed",
    "dtype",
    "backend",
}
NUMERIC_RANGES: dict[str, dict] = {
    "train.steps": dict(low=1, integer=True),
    "seeds": dict(low=0, high=2**32 - 1, integer=True),  # SAGEConfig's seed range (numpy's)
    "eval.n": dict(low=1, integer=True),
    "eval.max_new_tokens": dict(low=1, integer=True),
    "eval.temperature": dict(low=0.0),  # 0: greedy
    "eval.top_p": dict(low=0.0, high=1.0, low_open=True),
    "eval.limit": dict(low=1, integer=True),
    "eval.few_shot": dict(low=0, integer=True),
    "eval.batch_size": dict(low=1, integer=True),
    "eval.seed": dict(low=0, high=2**32 - 1, integer=True),
    "threads": dict(low=1, integer=True),  # torch threads of every run
}
"""The allowed range of every numeric setting of a study file, as the bounds of a :class:`sagerl.objective.Range`
(built when checked, so that ``import sagerl.study`` needs no torch); a cell's ``set`` values are the
``SAGEConfig``'s own (its ``NUMERIC_RANGES``)."""
CELL_KEYS = {"preset", "name", "set", "seeds"}
SWEEP_KEYS = {"preset", "grid", "set", "seeds", "name"}
RESERVED = {"seed", "max_steps", "model", "dataset", "output_dir"}
"""Keys a cell's ``set`` may not hold: the study sets them (seeds, steps, model, dataset, folders)."""


@dataclass(frozen=True)
class Cell:
    """One (preset, overrides, seed) run of a study, on one reference build when the study has builds."""

    name: str
    preset: str
    overrides: dict[str, Any]
    seed: int
    build: str | None = None

    @property
    def folder(self) -> str:
        """Relative folder of the cell's runs: ``cells/<safe name>/seed-<seed>``, or
        ``cells/<safe name>/<build>/seed-<seed>`` on a reference build."""
        build = "" if self.build is None else f"{self.build}/"
        return f"cells/{safe_name(self.name)}/{build}seed-{self.seed}"

    @property
    def run_key(self) -> str:
        """The key of this run among its cell's runs: ``"<seed>"``, or ``"<build>/<seed>"``; a paired
        comparison pairs runs with the same key."""
        return str(self.seed) if self.build is None else f"{self.build}/{self.seed}"


@dataclass
class EvalSettings:
    """Arguments of :func:`sagerl.eval.evaluate` shared by every cell (and the reference)."""

    datasets: list[str]
    """Named sets or JSONL paths to evaluate on (at least one)."""
    n: int = 16
    """Samples per problem; pass@k is reported for k = 1, 2, 4, ..., n."""
    max_new_tokens: int = 512
    """Completion length limit, in tokens."""
    temperature: float = 1.0
    """Sampling temperature (0: greedy)."""
    top_p: float = 1.0
    """Nucleus sampling's top-p."""
    limit: int | None = None
    """Keep the first ``limit`` problems of each dataset (None: all)."""
    few_shot: int | None = None
    """Worked examples in each prompt; None: the dataset's default."""
    batch_size: int | None = None
    """Sequences per generation batch; None: 64 on CPU, 256 on GPU."""
    seed: int = 0
    """Sampling seed of the evaluation (each sample's seed derives from it)."""
    dtype: str = "auto"
    """Compute precision of the evaluations: ``auto``, ``float32`` or ``bfloat16`` (:mod:`sagerl.precision`)."""
    backend: str = "hf"
    """The sampler of the evaluations: ``hf`` (transformers) or ``vllm`` (:mod:`sagerl.eval.vllm_backend`)."""


@dataclass
class Study:
    """A parsed, checked study file."""

    name: str
    model: str | None
    dataset: str
    steps: int
    common: dict[str, Any]
    eval: EvalSettings
    cells: list[Cell] = field(default_factory=list)
    source: str = "<study>"
    paired: dict[str, Any] | None = None
    """``{"baselines": [cell names], "metrics": [metric keys]}``: the paired tables, one per baseline
    (:mod:`sagerl.study.table`)."""
    setting: str | None = None
    """The name of this study's setting when the file has ``settings`` (its folder under the study's)."""
    builds: list[str] | None = None
    """The reference builds the cells run on (``None``: the model as named)."""
    threads: int = 1
    """Torch threads of every run (:mod:`sagerl.determinism`)."""
    kernels: str = "native"
    """The CPU kernel mode of every run, ``canonical`` or ``native`` (:mod:`sagerl.kernels`); a study file
    without ``kernels`` gets :func:`sagerl.kernels.default_mode` of its model."""
    pareto: dict[str, str] | None = None
    """``{"x": metric, "y": metric}``: the two axes of the study's Pareto frontier (:mod:`sagerl.study.frontier`)."""
    keep: str = "checkpoints"
    """What a finished run keeps of its training folder, one of :data:`KEEP`."""

    def model_of(self, build: str | None) -> str | None:
        """The study's model on ``build`` (the model itself without builds)."""
        return self.model if build is None else build_name(self.model, build)

    def run_overrides(self, cell: Cell) -> dict[str, Any]:
        """The study's ``train.set`` and the cell's ``set``, on the cell's build: a planted ``teacher_model``
        becomes that build's."""
        overrides = {**self.common, **cell.overrides}
        teacher = overrides.get("teacher_model")
        if cell.build is not None and isinstance(teacher, str) and _has_builds(teacher):
            overrides["teacher_model"] = build_name(teacher, cell.build)
        return overrides

    @property
    def cell_names(self) -> list[str]:
        """Cell names in file order, each once."""
        return list(dict.fromkeys(c.name for c in self.cells))


def build_name(model: str | None, build: str) -> str:
    """The model name of ``build`` of a planted model (``planted-reference``, ``b2`` -> ``planted-reference-b2``).

    Raises:
        ConfigError: the model has no builds, or the build is not shipped (the known ones listed).
    """
    from sagerl.errors import ModelLoadError
    from sagerl.tasks.planted_model import with_build

    try:
        return with_build(str(model), build)
    except ModelLoadError as exc:
        raise ConfigError(str(exc)) from None


def _has_builds(model: str) -> bool:
    from sagerl.tasks.planted_model import MIXES, PREFIX

    return model.startswith(PREFIX) and model[len(PREFIX) :] in MIXES


def safe_name(name: str) -> str:
    """A folder name for a cell name: ``+`` and ``=`` kept, other unsafe characters replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.+=@,-]", "_", name)


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _unknown(keys: set, allowed: set, where: str) -> None:
    extra = sorted(set(keys) - allowed)
    if extra:
        raise ConfigError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(sorted(allowed))})")


def _check_number(where: str, key: str, value: Any) -> None:
    """One line, ``<where>: key=value must be <range>``, unless ``value`` is in :data:`NUMERIC_RANGES` [key]."""
    from sagerl.objective import Range, check_number

    try:
        check_number(key, value, Range(**NUMERIC_RANGES[key]), ConfigError)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _seeds(value: Any, where: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConfigError(f"{where}: seeds must be an integer or a non-empty list of integers, got {value!r}")
    for seed in values:
        _check_number(where, "seeds", seed)
    return list(dict.fromkeys(values))


def _format_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def default_cell_name(preset: str, overrides: dict[str, Any]) -> str:
    """``preset`` then ``@key=value`` for each override, in order (``grpo+branch@gamma=1.0@tau=0.5``)."""
    return preset + "".join(f"@{k}={_format_value(v)}" for k, v in overrides.items())


def _check_cell(preset: str, overrides: dict[str, Any], where: str) -> None:
    """Resolve the cell's config and build its ``SAGEConfig`` as ``sagerl train`` would, so a bad preset,
    key, type or value fails now, before any cell trains."""
    from sagerl.train.run import build_trainer_config, resolve_config

    reserved = sorted(RESERVED & set(overrides))
    if reserved:
        raise ConfigError(
            f"{where}: key {reserved[0]!r} is set by the study itself (seeds, train.steps, model, dataset)"
        )
    try:
        resolved = resolve_config(preset, overrides)
        # TRL's and sagerl's value checks of the SAGEConfig (choices, bounds, combinations). Device settings
        # are neutralised so that a GPU study (bf16) is checked on a CPU login node too.
        resolved.trainer.update(use_cpu=True, bf16=False, fp16=False)
        with tempfile.TemporaryDirectory() as scratch:
            build_trainer_config(resolved, Path(scratch))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_dataset(name: str, where: str) -> None:
    from sagerl.tasks.datasets import check_dataset_name

    try:
        check_dataset_name(name)
    except SagerlError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _normalise_overrides(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The overrides as ``sagerl train --set key=value`` reads them (same key checks and value parsing)."""
    from sagerl.train.run import parse_overrides

    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(f"{where}: override keys must be strings, got {key!r}")
    try:
        return parse_overrides([f"{key}={_format_value(value)}" for key, value in raw.items()])
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_study(data: Any, source: str = "<study>") -> Study:
    """Check and expand a study mapping (what the YAML file holds) into a :class:`Study`.

    Raises:
        ConfigError: anything wrong, naming ``source``, the cell and the key.
    """
    data = _mapping(data, source)
    _unknown(set(data), TOP_KEYS, source)
    name = str(data.get("name") or Path(source).stem)
    model = data.get("model")
    model = None if model is None else str(model)

    train = _mapping(data.get("train"), f"{source}: train")
    _unknown(set(train), TRAIN_KEYS, f"{source}: train")
    dataset = str(train.get("dataset", "arith_train"))
    steps = train.get("steps", 20)
    _check_number(source, "train.steps", steps)
    keep = train.get("keep", KEEP[0])
    if keep not in KEEP:
        raise ConfigError(f"{source}: train.keep={keep!r}: choose one of {', '.join(KEEP)}")
    common = _normalise_overrides(_mapping(train.get("set"), f"{source}: train.set"), f"{source}: train.set")
    _check_dataset(dataset, f"{source}: train.dataset")

    ev = _mapping(data.get("eval"), f"{source}: eval")
    _unknown(set(ev), EVAL_KEYS, f"{source}: eval")
    datasets = ev.get("datasets")
    if isinstance(datasets, str):
        datasets = [d.strip() for d in datasets.split(",") if d.strip()]
    if not isinstance(datasets, list) or not datasets:
        raise ConfigError(f"{source}: eval.datasets must name at least one dataset")
    try:
        eval_settings = EvalSettings(
            datasets=[str(d) for d in datasets], **{k: v for k, v in ev.items() if k != "datasets"}
        )
    except TypeError as exc:
        raise ConfigError(f"{source}: eval: {exc}") from None
    for dataset_name in eval_settings.datasets:
        _check_dataset(dataset_name, f"{source}: eval.datasets")
    for key in NUMERIC_RANGES:
        value = getattr(eval_settings, key.removeprefix("eval."), None) if key.startswith("eval.") else None
        if value is not None:
            _check_number(source, key, value)
    from sagerl.precision import check_dtype

    check_dtype(eval_settings.dtype, f"{source}: eval.dtype")
    if eval_settings.backend not in BACKENDS:
        raise ConfigError(
            f"{source}: eval.backend {eval_settings.backend!r}: choose one of {', '.join(BACKENDS)}"
        )

    seeds = _seeds(data.get("seeds", [0]), f"{source}: seeds")
    builds = _builds(data.get("builds"), model, f"{source}: builds")
    threads = data.get("threads", 1)
    _check_number(source, "threads", threads)
    from sagerl.kernels import check_mode, default_mode

    kernels = data.get("kernels")
    kernels = default_mode(model) if kernels is None else check_mode(kernels, f"{source}: kernels")
    entries: list[tuple[str, str, str, dict[str, Any], list[int]]] = []  # where, name, preset, set, seeds
    for i, raw in enumerate(data.get("cells") or []):
        where = f"{source}: cells[{i}]"
        raw = _mapping(raw, where)
        _unknown(set(raw), CELL_KEYS, where)
        if "preset" not in raw:
            raise ConfigError(f"{where}: needs a preset")
        preset = str(raw["preset"])
        overrides = _normalise_overrides(_mapping(raw.get("set"), f"{where}.set"), f"{where}.set")
        cell_name = str(raw.get("name") or default_cell_name(preset, overrides))
        cell_seeds = _seeds(raw.get("seeds", seeds), f"{where}.seeds")
        entries.append((f"{where} {cell_name!r}", cell_name, preset, overrides, cell_seeds))
    for i, raw in enumerate(data.get("sweeps") or []):
        where = f"{source}: sweeps[{i}]"
        raw = _mapping(raw, where)
        _unknown(set(raw), SWEEP_KEYS, where)
        if "preset" not in raw:
            raise ConfigError(f"{where}: needs a preset")
        preset = str(raw["preset"])
        grid = _mapping(raw.get("grid"), f"{where}.grid")
        if not grid or not all(isinstance(v, list) and v for v in grid.values()):
            raise ConfigError(f"{where}: grid must map each key to a non-empty list of values")
        fixed = _normalise_overrides(_mapping(raw.get("set"), f"{where}.set"), f"{where}.set")
        sweep_seeds = _seeds(raw.get("seeds", seeds), f"{where}.seeds")
        for combo in itertools.product(*grid.values()):
            point = _normalise_overrides(dict(zip(grid, combo, strict=True)), f"{where}.grid")
            overrides = {**fixed, **point}
            # a named sweep's cells are the name and the grid point; an unnamed one's, the preset and all
            cell_name = (
                default_cell_name(str(raw["name"]), point)
                if raw.get("name")
                else default_cell_name(preset, overrides)
            )
            entries.append((f"{where} {cell_name!r}", cell_name, preset, overrides, sweep_seeds))
    if not entries:
        raise ConfigError(f"{source}: no cells (give 'cells' or 'sweeps')")
    seen: dict[str, str] = {}
    cells = []
    for where, cell_name, preset, overrides, cell_seeds in entries:
        if safe_name(cell_name) in seen:
            raise ConfigError(f"{where}: the name is used twice (set 'name' to tell the cells apart)")
        seen[safe_name(cell_name)] = cell_name
        _check_cell(preset, {**common, **overrides}, where)
        teacher = {**common, **overrides}.get("teacher_model")
        if builds and isinstance(teacher, str) and _has_builds(teacher):
            for build in builds:
                build_name(teacher, build)  # every build ships its teacher
        cells.extend(
            Cell(cell_name, preset, dict(overrides), s, build)
            for build in builds or [None]
            for s in cell_seeds
        )
    paired = _paired(data.get("paired"), [c.name for c in cells], source)
    study = Study(name, model, dataset, steps, common, eval_settings, cells, source, paired, keep=keep)
    study.builds, study.threads, study.kernels = builds, threads, kernels
    study.pareto = _pareto(data.get("pareto"), source)
    if study.pareto is not None:
        _check_paired_runs(cells, source)
    return study


def _check_paired_runs(cells: list[Cell], source: str) -> None:
    """A ``pareto:`` study's cells share enough runs to be compared: every two cells (a lone cell: its own runs)
    at least :data:`sagerl.study.statistics.MIN_PAIRED_RUNS` run keys (seeds, or builds × seeds), the fewest
    whose paired difference has an interval (:func:`sagerl.study.frontier.dominates`).

    Raises:
        ConfigError: two cells share fewer, naming them, the runs they share and the fix.
    """
    from sagerl.study.statistics import MIN_PAIRED_RUNS

    runs: dict[str, set[str]] = {}
    for c in cells:
        runs.setdefault(c.name, set()).add(c.run_key)
    names = list(runs)
    pairs = list(itertools.combinations(names, 2)) or [(names[0], names[0])]
    for a, b in pairs:
        shared = sorted(runs[a] & runs[b])
        if len(shared) < MIN_PAIRED_RUNS:
            who = f"cell {a!r} has" if a == b else f"cells {a!r} and {b!r} share"
            named = ", ".join(k if "/" in k else f"seed {k}" for k in shared)
            count = f"{len(shared)} run{'' if len(shared) == 1 else 's'}" + (f" ({named})" if named else "")
            raise ConfigError(
                f"{source}: pareto needs at least {MIN_PAIRED_RUNS} paired runs (seeds, or builds × seeds) between "
                f"every two cells, but {who} {count}: give seeds: [0, 1] or more (the study's, or each cell's own)"
            )


def _pareto(value: Any, source: str) -> dict[str, str] | None:
    """The study's two frontier axes, or None.

    Raises:
        ConfigError: not a mapping of exactly ``x`` and ``y`` to two different metric keys (``name/dataset`` or a
            training metric such as ``kl/reference``).
    """
    if value is None:
        return None
    value = _mapping(value, f"{source}: pareto")
    _unknown(set(value), PARETO_KEYS, f"{source}: pareto")
    axes = {}
    for axis in ("x", "y"):
        metric = value.get(axis)
        if not isinstance(metric, str) or not metric.strip():
            raise ConfigError(
                f"{source}: pareto.{axis} must name a metric of the table (e.g. solved/planted_rare), got {metric!r}"
            )
        axes[axis] = metric.strip()
    if axes["x"] == axes["y"]:
        raise ConfigError(f"{source}: pareto.x and pareto.y name the same metric {axes['x']!r}")
    return axes


def _builds(value: Any, model: str | None, where: str) -> list[str] | None:
    """The study's reference builds (``None`` without ``builds``), each checked against the shipped ones.

    Raises:
        ConfigError: not a non-empty list of names, a name twice, an unknown build (the shipped ones
            listed), or a model that has no builds.
    """
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(b, str) for b in value):
        raise ConfigError(f"{where}: expected a non-empty list of build names (b1, b2, ...), got {value!r}")
    if len(set(value)) < len(value):
        raise ConfigError(f"{where}: names a build twice: {value}")
    for build in value:
        try:
            build_name(model, build)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return list(value)


def _paired(value: Any, cell_names: list[str], source: str) -> dict[str, Any] | None:
    if value is None:
        return None
    value = _mapping(value, f"{source}: paired")
    _unknown(set(value), PAIRED_KEYS, f"{source}: paired")
    baseline = value.get("baseline")
    baselines = baseline if isinstance(baseline, list) and baseline else [baseline]
    for name in baselines:
        if name not in cell_names:
            raise ConfigError(f"{source}: paired.baseline {name!r} is not a cell of the study")
    if len(set(baselines)) < len(baselines):
        raise ConfigError(f"{source}: paired.baseline names a cell twice: {baselines}")
    metrics = value.get("metrics", ["solved/total"])
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise ConfigError(f"{source}: paired.metrics must be a non-empty list of metric keys")
    return {"baselines": list(baselines), "metrics": list(metrics)}


def _merged(base: dict, setting: dict) -> dict:
    """The study mapping with one setting applied: top-level keys replaced, ``train``/``eval`` keys replaced
    one by one and ``train.set`` merged key by key."""
    out = {k: v for k, v in base.items() if k != "settings"}
    for key, value in setting.items():
        if key == "name":
            continue
        if key in ("train", "eval") and isinstance(value, dict):
            section = dict(out.get(key) or {})
            for sub, sub_value in value.items():
                if key == "train" and sub == "set" and isinstance(sub_value, dict):
                    section["set"] = {**(section.get("set") or {}), **sub_value}
                else:
                    section[sub] = sub_value
            out[key] = section
        else:
            out[key] = value
    return out


def parse_studies(data: Any, source: str = "<study>") -> list[Study]:
    """:func:`parse_study`, expanding ``settings`` into one study per setting (named ``<name>-<setting>``,
    with ``setting`` set); a file without settings gives one study.

    Raises:
        ConfigError: as :func:`parse_study`, and a setting without a name, twice the same name, or an
            unknown key in a setting.
    """
    data = _mapping(data, source)
    settings = data.get("settings")
    if settings is None:
        return [parse_study(data, source)]
    if not isinstance(settings, list) or not settings:
        raise ConfigError(f"{source}: settings must be a non-empty list of mappings")
    base_name = str(data.get("name") or Path(source).stem)
    studies, seen = [], set()
    for i, raw in enumerate(settings):
        where = f"{source}: settings[{i}]"
        raw = _mapping(raw, where)
        _unknown(set(raw), SETTING_KEYS, where)
        label = raw.get("name")
        if not isinstance(label, str) or not label or safe_name(label) != label:
            raise ConfigError(f"{where}: needs a name (letters, digits, . _ - + = @ ,), got {label!r}")
        if label in seen:
            raise ConfigError(f"{where}: the setting name {label!r} is used twice")
        seen.add(label)
        merged = _merged(data, raw)
        merged["name"] = f"{base_name}-{label}"
        study = parse_study(merged, f"{source} (setting {label})")
        study.setting = label
        study.source = source
        studies.append(study)
    return studies


def load_study(path: str | Path) -> Study:
    """Read and check a study YAML file without ``settings``.

    Raises:
        SagerlError: the file cannot be read or is not YAML. ConfigError: see :func:`parse_study`; a file
            with ``settings`` (use :func:`load_studies`).
    """
    studies = load_studies(path)
    if len(studies) != 1 or studies[0].setting is not None:
        raise ConfigError(f"{path}: has settings; load it with load_studies (one study per setting)")
    return studies[0]


def load_studies(path: str | Path, *, check_models: bool = True) -> list[Study]:
    """Read and check a study YAML file: one :class:`Study`, or one per setting (:func:`parse_studies`),
    each study's model included unless ``check_models`` is False (:func:`sagerl.models.check_model`: a hub
    id is looked up when online and refused offline unless cached; nothing is built or loaded). ``sagerl
    study --dry-run`` does not check them: its commands run where the models are (a GPU study's hub model,
    printed on a CPU machine without it).

    Raises:
        SagerlError: the file cannot be read or is not YAML. ConfigError: see :func:`parse_studies`; or a
            model that does not exist, or cannot be read offline.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SagerlError(f"{path}: cannot read the study file ({exc.strerror or exc})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SagerlError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    studies = parse_studies(data, str(path))
    if not check_models:
        return studies
    from sagerl.errors import ModelLoadError
    from sagerl.models import check_model

    for model in dict.fromkeys(study.model for study in studies):
        try:  # a hub id that does not exist, or cannot be read offline, fails here, not at the reference eval
            check_model(model)
        except ModelLoadError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return studies
