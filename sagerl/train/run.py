"""``sagerl train``: resolve a preset and overrides into a run folder, then train with :class:`SAGETrainer`.

The run folder (``--output-dir``) holds:

- ``config.yaml``: the resolved config, written atomically: preset, run settings, the trainer keys set by
  the defaults, the preset and the overrides (``trainer``, compared on resumption), and every field of
  the final ``SAGEConfig`` (``trainer_all_fields``);
- ``metrics.jsonl``: one JSON line per optimizer step (see :class:`MetricsJSONLCallback`);
- ``checkpoint-N/``: HF checkpoints with optimizer, scheduler and RNG states;
- ``model/``: the final model and tokenizer, ready for ``sagerl eval --model``.

Rerunning the same command in the same folder resumes from the last complete checkpoint, exactly where
it stopped (a checkpoint cut short by a crash is skipped with a warning); a changed config is refused (the
message names the keys that differ). One process at a time trains into a folder (:mod:`sagerl.run_lock`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sagerl import __version__
from sagerl.atomic_files import atomic_write_text
from sagerl.errors import ConfigError, first_line
from sagerl.run_lock import run_lock
from sagerl.train.presets import load_preset

STEP_TRACE_ENV = "SAGERL_STEP_TRACE"
"""Environment variable: a path; when set, ``sagerl train`` records a step trace of the run there
(:mod:`sagerl.train.step_trace`: digests of every tensor the models compute, to find where two runs part)."""

# Trainer defaults that fit a 2-core CPU and the embedded model; every one can be overridden.
TRAINER_DEFAULTS: dict[str, Any] = {
    "max_steps": 20,
    "per_device_train_batch_size": 8,  # completions per micro-batch
    "gradient_accumulation_steps": 2,  # so 16 completions (2 prompts x 8) per optimizer step
    "learning_rate": 1e-6,
    "lr_scheduler_type": "constant",
    "max_completion_length": 256,
    "logging_steps": 1,
    "save_steps": 10,
    "save_total_limit": 2,
    "report_to": "none",
    "seed": 0,
    "dataloader_num_workers": 0,
    "gradient_checkpointing": False,  # TRL defaults to True, which also disables the KV cache in generation
}
# Keys that may change between a run and its resumption.
RESUMABLE_CHANGES = {"max_steps", "save_steps", "logging_steps", "report_to", "save_total_limit"} | {
    "eval_passk_every", "eval_passk_dataset", "eval_passk_n", "eval_passk_limit", "eval_passk_max_new_tokens"
}  # fmt: skip


@dataclass
class RunSettings:
    """What to train on, beside the trainer config."""

    model: str | None = None
    """HF model path or id; None: the embedded SmolLM2-135M-Instruct."""
    dataset: str = "arith_train"
    """Named set or JSONL path (fields ``problem``, ``answer``)."""
    data_dir: str | None = None
    """Folder of the named sets' JSONL files (default: ``$SAGERL_DATA_DIR``)."""
    limit: int | None = None
    """Use only the first N problems."""
    few_shot: int | None = None
    """Worked examples in each prompt; None: the dataset's default (arith: 4)."""
    fallback_to_last_number: bool = False
    """Grade the last number when there is no ``\\boxed{}``."""
    format_reward_weight: float = 0.0
    """Weight of the format reward (a complete ``\\boxed{}``); 0: off."""
    dtype: str = "auto"
    """Compute precision: ``auto``, ``float32`` or ``bfloat16`` (:mod:`sagerl.precision`)."""


RUN_KEYS = {f.name for f in dataclasses.fields(RunSettings)}


def trainer_fields() -> dict[str, dataclasses.Field]:
    from sagerl.train.config import SAGEConfig

    return {f.name: f for f in dataclasses.fields(SAGEConfig) if f.init}


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings (values read as YAML scalars: 1e-6, true, null, [1, 2]).

    Raises:
        ConfigError: a pair without ``=``, or an unknown key (with the closest known keys).
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        check_key(key)
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        out[key] = _number_if_numeric(value)
    return out


def _number_if_numeric(value: Any) -> Any:
    """YAML 1.1 reads "1e-6" as a string; researchers mean a number."""
    if isinstance(value, str):
        for number in (int, float):
            try:
                return number(value)
            except ValueError:
                pass
    return value


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Check an override against the type of its default and convert the obvious cases."""
    if value is None or default is None or isinstance(default, list | dict):
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int) and not isinstance(value, bool):
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif isinstance(default, str):
        return str(value)
    else:
        return value
    raise ConfigError(f"config key {key!r} expects a {type(default).__name__}, got {value!r}")


def check_key(key: str) -> None:
    """Raise :class:`ConfigError` naming the closest known keys unless ``key`` is a run or trainer key."""
    known = RUN_KEYS | set(trainer_fields()) - {"output_dir"}
    if key not in known:
        close = difflib.get_close_matches(key, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"unknown config key {key!r}{hint}")


def coerce_value(key: str, value: Any) -> Any:
    """``value`` checked against the type of the default of run or trainer key ``key``, and converted.

    Raises:
        ConfigError: a value of the wrong type.
    """
    if key in RUN_KEYS:
        return _coerce(key, value, getattr(RunSettings(), key))
    field = trainer_fields()[key]
    default = field.default if field.default is not dataclasses.MISSING else None
    if default is None and field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = field.default_factory()  # type: ignore[misc]
    return _coerce(key, value, default)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The keys of a YAML config file (``sagerl train --config FILE``): a mapping of the keys ``--set``
    takes (run keys and trainer keys), checked and converted as ``--set`` values are.

    Raises:
        ConfigError: the file does not read, is not YAML or not a mapping; an unknown key or a value of the
            wrong type (``FILE:LINE: ...``).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} does not read: {first_line(exc)}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(
            f"{where}: not valid YAML: {getattr(exc, 'problem', None) or first_line(exc)}"
        ) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of config keys (key: value), got {type(data).__name__}"
        )
    lines = {node.value: node.start_mark.line + 1 for node, _ in root.value}
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        try:
            check_key(key)
            out[key] = coerce_value(key, _number_if_numeric(value))
        except ConfigError as exc:
            raise ConfigError(f"{path}:{lines.get(str(raw_key), 1)}: {exc}") from exc
    return out


@dataclass
class ResolvedConfig:
    preset: str
    settings: RunSettings
    trainer: dict[str, Any]
    dtype: str = "float32"
    """The precision the run uses (``settings.dtype`` resolved for this machine, :mod:`sagerl.precision`)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "sagerl_version": __version__,
            "preset": self.preset,
            "run": dataclasses.asdict(self.settings),
            "dtype": self.dtype,
            "trainer": self.trainer,
        }


def resolve_config(preset: str, overrides: dict[str, Any]) -> ResolvedConfig:
    """Defaults, then the preset, then the overrides; types checked against the defaults.

    Raises:
        ConfigError: unknown preset or key, or a value of the wrong type.
    """
    fields = trainer_fields()
    trainer = dict(TRAINER_DEFAULTS)
    for key, value in load_preset(preset).items():
        if key not in fields:
            raise ConfigError(f"preset {preset!r} sets unknown key {key!r}")
        trainer[key] = value
    settings = RunSettings()
    for key, value in overrides.items():
        if key in RUN_KEYS:
            setattr(settings, key, coerce_value(key, value))
        else:
            trainer[key] = coerce_value(key, value)
    dtype = _resolve_run_dtype(settings.dtype, trainer.get("bf16") if "bf16" in overrides else None)
    trainer["bf16"] = dtype == "bfloat16"
    if trainer["bf16"] and _device() == "cpu":
        trainer["use_cpu"] = True  # transformers refuses bf16 without a GPU unless told to train on the CPU
    return ResolvedConfig(preset, settings, trainer, dtype)


def _device() -> str:
    from sagerl.precision import default_device

    return default_device()


def _resolve_run_dtype(requested: str, bf16: bool | None) -> str:
    """The run's dtype: ``requested`` resolved for this machine; with ``dtype=auto``, TRL's ``bf16`` switch
    decides when it was set (``--set bf16=true``).

    Raises:
        ConfigError: an unknown dtype, or ``bf16`` set against an explicit dtype.
    """
    from sagerl.precision import check_dtype, resolve_dtype

    check_dtype(requested, "dtype")
    if bf16 is not None:
        implied = "bfloat16" if bf16 else "float32"
        if requested not in ("auto", implied):
            raise ConfigError(
                f"bf16={bf16} contradicts dtype={requested}: set one of them (dtype: auto, float32, bfloat16)"
            )
        requested = implied
    return resolve_dtype(requested, _device())


def build_trainer_config(resolved: ResolvedConfig, output_dir: Path):
    """The :class:`SAGEConfig` of a resolved config.

    Raises:
        ConfigError: TRL or sagerl rejects the combination (one line, TRL's reason); a binary method
            (:data:`sagerl.objective.BINARY_ADVANTAGES`) with a format reward, which makes rewards other than 0/1.
    """
    from sagerl.objective import BINARY_ADVANTAGES
    from sagerl.train.config import SAGEConfig

    try:
        args = SAGEConfig(output_dir=str(output_dir), **resolved.trainer)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"invalid trainer config: {first_line(exc)}") from exc
    estimator, weight = args.resolved_advantage_estimator, resolved.settings.format_reward_weight
    if estimator in BINARY_ADVANTAGES and weight:
        raise ConfigError(
            f"advantage_estimator={estimator!r} needs binary rewards (0 or 1 per completion); "
            f"format_reward_weight={weight} adds a format reward to them: set format_reward_weight=0"
        )
    return args


def build_dataset(settings: RunSettings):
    """The training set as a ``datasets.Dataset`` with TRL's ``prompt`` (conversational, or the bare text for
    sets with the raw prompt format) plus ``answer``, ``kind``, ``problem`` (for task verifiers) and ``id``
    columns.

    Raises:
        DataError: from :func:`sagerl.tasks.load_problems` (file, line, field).
    """
    from datasets import Dataset

    from sagerl.tasks import build_prompt, default_few_shot, default_prompt_format, load_problems

    problems = load_problems(settings.dataset, data_dir=settings.data_dir, limit=settings.limit)
    if not problems:
        raise ConfigError(f"dataset {settings.dataset!r} has no problems")
    few_shot = default_few_shot(settings.dataset) if settings.few_shot is None else settings.few_shot
    prompt_format = default_prompt_format(settings.dataset)
    return Dataset.from_dict(
        {
            "prompt": [build_prompt(p, few_shot=few_shot, prompt_format=prompt_format) for p in problems],
            "answer": [p.answer for p in problems],
            "kind": [p.kind for p in problems],
            "problem": [p.problem for p in problems],
            "id": [p.id for p in problems],
        }
    )


def checkpoint_is_complete(folder: Path) -> bool:
    """Whether ``checkpoint-N`` was written to the end: its ``trainer_state.json``, which the Trainer
    writes after the weights, optimizer, scheduler and RNG states, is whole JSON for step N."""
    try:
        state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and state.get("global_step") == checkpoint_step(folder)


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder of a run, or None.

    A newer checkpoint that is incomplete (the run was killed, or the disk filled, while writing it) is
    skipped with a warning and removed, so that the Trainer writes that step afresh when it gets there.
    """
    if not output_dir.is_dir():
        return None
    found = [
        (int(p.name.split("-", 1)[1]), p)
        for p in output_dir.iterdir()
        if p.is_dir() and p.name.startswith("checkpoint-") and p.name.split("-", 1)[1].isdigit()
    ]
    for _, folder in sorted(found, reverse=True):
        if checkpoint_is_complete(folder):
            return folder
        warnings.warn(
            f"{folder} is incomplete (the run stopped while writing it): removed, resuming from the "
            "previous complete checkpoint",
            stacklevel=2,
        )
        shutil.rmtree(folder, ignore_errors=True)
    return None


def check_resume_compatible(saved: dict, resolved: ResolvedConfig, path: Path) -> None:
    """Refuse to resume a run whose config changed (except keys in :data:`RESUMABLE_CHANGES`)."""
    new = resolved.as_dict()
    diffs = []
    if saved.get("preset") != new["preset"]:
        diffs.append("preset")
    for key in sorted(set(saved.get("run", {})) | set(new["run"])):
        if saved.get("run", {}).get(key) != new["run"].get(key):
            diffs.append(key)
    old_t, new_t = saved.get("trainer", {}), new["trainer"]
    for key in sorted(set(old_t) | set(new_t)):
        if key not in RESUMABLE_CHANGES and old_t.get(key) != new_t.get(key):
            diffs.append(key)
    if diffs:
        raise ConfigError(
            f"{path} was written with another config (differs in: {', '.join(diffs)}); "
            "use another --output-dir, or the same options to resume"
        )


def validate_model(model: str | None) -> str:
    """Resolve the model and check that its config and tokenizer load (before building the trainer).

    Raises:
        ModelLoadError: one line naming the model.
    """
    from sagerl.models import load_config, load_tokenizer, resolve_model

    load_config(model)
    path = resolve_model(model)
    load_tokenizer(path)
    return path


def config_yaml(resolved: ResolvedConfig, args) -> str:
    """The text of a run's ``config.yaml``: the resolved config and every field of its ``SAGEConfig``."""
    record = {**resolved.as_dict(), "trainer_all_fields": json.loads(json.dumps(args.to_dict(), default=str))}
    return yaml.safe_dump(record, sort_keys=False, allow_unicode=True)


def dry_run(preset: str, overrides: dict[str, Any], output_dir: str | Path | None = None) -> str:
    """What :func:`train` would run, as the ``config.yaml`` it would write, after every check it makes
    before loading the model: keys and types, TRL's and sagerl's checks of the ``SAGEConfig``, the model's
    config and tokenizer, and the training set. Writes nothing, trains nothing.

    Raises:
        ConfigError, DataError, ModelLoadError: as :func:`train`.
    """
    resolved = resolve_config(preset, overrides)
    args = build_trainer_config(resolved, Path(output_dir or Path("runs") / preset))
    validate_model(resolved.settings.model)
    build_dataset(resolved.settings)
    return config_yaml(resolved, args)


def train(
    preset: str = "grpo+branch",
    overrides: dict[str, Any] | None = None,
    output_dir: str | Path | None = None,
    resume: bool | None = None,
    callbacks: list | None = None,
    quiet: bool = False,
) -> Path:
    """Train ``preset`` with ``overrides`` into ``output_dir``; returns the final model folder.

    Args:
        preset: a name from :func:`sagerl.train.presets.list_presets`.
        overrides: run keys (:class:`RunSettings`) and trainer keys (:class:`SAGEConfig`).
        output_dir: run folder (default ``runs/<preset>``).
        resume: True: resume (error if there is no checkpoint); False: refuse a folder that has
            checkpoints; None: resume when a checkpoint exists.
        callbacks: extra ``transformers.TrainerCallback`` objects.
        quiet: print nothing per step (no progress bar, no logged dicts); ``metrics.jsonl`` still gets
            every step (for studies that run many cells).

    The arguments (config, model) are checked first; then the run folder is locked for the whole run
    (:mod:`sagerl.run_lock`; in a multi-process run, by the process of rank 0).

    Raises:
        ConfigError, DataError, ModelLoadError: user errors, one line each.
        RunFolderLockedError: another live process is training into ``output_dir``.
    """
    resolved = resolve_config(preset, overrides or {})
    out = Path(output_dir or Path("runs") / preset)
    args = build_trainer_config(resolved, out)
    model_path = validate_model(resolved.settings.model)
    from sagerl.models import load_tokenizer
    from sagerl.train.rewards import AnswerReader, CorrectnessReward, FormatReward

    tokenizer = load_tokenizer(model_path)
    dataset = build_dataset(resolved.settings)
    reward_funcs: list = [CorrectnessReward(resolved.settings.fallback_to_last_number)]
    if resolved.settings.format_reward_weight:
        reward_funcs.append(FormatReward())
        args.reward_weights = [1.0, float(resolved.settings.format_reward_weight)]
    trainer_kwargs = {
        "model": model_path,
        "reward_funcs": reward_funcs,
        "args": args,
        "train_dataset": dataset,
        "processing_class": tokenizer,
        "final_answer": AnswerReader(resolved.settings.fallback_to_last_number),
    }
    if int(os.environ.get("RANK", "0")) != 0:  # other processes of a multi-process run: rank 0 holds the lock
        return _train_in_folder(resolved, out, trainer_kwargs, resume, callbacks, quiet)
    with run_lock(out):
        return _train_in_folder(resolved, out, trainer_kwargs, resume, callbacks, quiet)


def _train_in_folder(
    resolved: ResolvedConfig,
    out: Path,
    trainer_kwargs: dict[str, Any],
    resume: bool | None,
    callbacks,
    quiet: bool = False,
) -> Path:
    """:func:`train` once the arguments are checked and the run folder is locked."""
    checkpoint = last_checkpoint(out)
    config_path = out / "config.yaml"
    if resume is True and checkpoint is None:
        raise ConfigError(f"--resume: no checkpoint in {out}")
    if resume is False and checkpoint is not None:
        raise ConfigError(f"{out} already has {checkpoint.name}; pass --resume or use another --output-dir")
    if checkpoint is not None and config_path.is_file():
        check_resume_compatible(
            yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}, resolved, config_path
        )

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from sagerl.train.metrics import CompactProgressCallback, MetricsJSONLCallback
    from sagerl.train.trainer import SAGETrainer

    args = trainer_kwargs["args"]
    atomic_write_text(config_path, config_yaml(resolved, args))
    final = out / "model"
    step = checkpoint_step(checkpoint) if checkpoint is not None else 0
    if checkpoint is not None and 0 < args.max_steps <= step:
        # Already trained (the run stopped while saving the final model, or is rerun): the Trainer would
        # take one more step when resumed at max_steps, so the final model is the last checkpoint's.
        export_checkpoint(checkpoint, final)
    else:
        trainer = SAGETrainer(
            **trainer_kwargs, callbacks=[MetricsJSONLCallback(out / "metrics.jsonl"), *(callbacks or [])]
        )
        trace_path = os.environ.get(STEP_TRACE_ENV)
        if trace_path:
            # a diagnostic: digests of every computed tensor, step by step (sagerl.train.step_trace)
            from sagerl.train.step_trace import StepTraceCallback

            trace = StepTraceCallback(trace_path)
            trace.attach(trainer)
            trainer.add_callback(trace)
        if quiet:
            trainer.pop_callback(ProgressCallback)
            trainer.pop_callback(PrinterCallback)
        else:  # one line per logged step, under sagerl's bar (none with disable_tqdm), not HF's tqdm/dicts
            trainer.pop_callback(ProgressCallback)
            trainer.pop_callback(PrinterCallback)
            trainer.add_callback(CompactProgressCallback(bar=not args.disable_tqdm))
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        trainer.save_model(str(final))
        step = trainer.state.global_step
    trainer_kwargs["processing_class"].save_pretrained(str(final))
    atomic_write_text(out / "train_state.json", json.dumps({"global_step": step}) + "\n")
    return final


TRAINING_STATE_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "sage_outcome_counts.json",
)
"""Files of a checkpoint that hold training state rather than the model (left out of ``model/``)."""


def checkpoint_step(folder: Path) -> int:
    """The optimizer step a ``checkpoint-N`` folder was saved at (N)."""
    return int(folder.name.rpartition("-")[2])


def export_checkpoint(checkpoint: Path, final: Path) -> None:
    """Make ``final`` a copy of ``checkpoint`` without its training state, replacing it atomically."""
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint, tmp, ignore=shutil.ignore_patterns(*TRAINING_STATE_FILES))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
