"""``samples.jsonl`` (one line per sample, appended as sampling proceeds) and ``eval_config.json``.

A line of ``samples.jsonl``::

    {"dataset": "aime24", "problem_id": "aime-2024-I-01", "sample_index": 0, "text": "...",
     "extracted": "204", "answer": "204", "correct": true, "num_tokens": 311, "finish_reason": "stop"}

``num_tokens`` counts completion tokens (the end-of-sequence token included); ``finish_reason`` is
``"stop"`` or ``"length"``. A sample is identified by ``(dataset, problem_id, sample_index)``.

Resume: :func:`load_samples` reads the lines already written, drops a truncated last line (a crash in the
middle of a write) and cuts it off the file, so that new lines are appended after the last complete one.
:func:`check_or_write_config` refuses to continue a run whose sampling settings differ, and
:func:`check_engine` one that would draw its next samples with another engine (dtype, backend, kernels).

``eval_config.json``::

    {"settings": {"model": ..., "temperature": 1.0, ...},       # SETTINGS_KEYS: compared on every resume
     "engine": {"dtype": "bfloat16", "backend": "hf", "kernels": "AVX512"},   # ENGINE_KEYS: what drew them
     "created_at": ..., "sagerl_version": ..., "machine": {...},  # the call that began the folder
     "calls": [{"dtype": "bfloat16", "backend": "hf", "kernels": "AVX512", "samples": 2048,
                "elapsed_s": 342.1, "started_at": ..., "finished_at": ...}, ...]}

``calls`` has one entry per call that set out to draw samples (:func:`begin_sampling_call`,
:func:`end_sampling_call`); a call killed before its end gets its sample count from the next call, and
``"interrupted": true``. A folder written before sagerl recorded engines has no ``engine`` and no ``calls``:
:func:`recorded_calls` then gives one entry for its samples, whose engine is known only where the folder's
``results.json`` shows that one call drew every sample (its dtype and backend; never its kernels).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagerl.atomic_files import atomic_write_text
from sagerl.errors import ConfigError, SagerlError, WriteError

SAMPLES_FILE = "samples.jsonl"
CONFIG_FILE = "eval_config.json"

REQUIRED_KEYS = ("dataset", "problem_id", "sample_index", "correct")
SETTINGS_KEYS = ("model", "temperature", "top_p", "max_new_tokens", "seed", "few_shot")
"""Settings that change what a sample is; a run folder holds samples of one combination only."""
ENGINE_KEYS = ("dtype", "backend", "kernels", "kernel_mode")
"""What drew a folder's samples besides its settings, compared before a resume draws more
(:func:`check_engine`): the resolved dtype (what ``auto`` became, never ``auto`` itself, except vLLM's own
choice on a GPU), the sampler backend, the kernels its arithmetic ran (torch's CPU capability,
``AVX2``, ``AVX512``..., or ``cuda:<GPU name>``) and the CPU kernel mode (``canonical`` or ``native``,
:func:`sagerl.kernels.active_mode`; None on a GPU). A key added here is compared from then on: a folder recorded
before it lacks the key, which a resume treats as unknown (one warning, then the new value is recorded);
:func:`engine_fix` says how to match it."""

SampleKey = tuple[str, str, int]


def sample_key(record: Mapping[str, Any]) -> SampleKey:
    """The identity of a sample record: (dataset, problem_id, sample_index)."""
    return (str(record["dataset"]), str(record["problem_id"]), int(record["sample_index"]))


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (see :mod:`sagerl.atomic_files`)."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def load_samples(path: str | Path, *, repair: bool = True) -> dict[SampleKey, dict[str, Any]]:
    """Read ``samples.jsonl`` into ``{(dataset, problem_id, sample_index): record}``.

    A last line that is not complete JSON (a write cut short by a crash) is dropped, and with
    ``repair=True`` cut off the file (and a missing final newline added), so appends stay line-aligned.
    The first record of a key wins if a key appears twice.

    Returns:
        the records, in file order; an empty dict if the file does not exist.

    Raises:
        SagerlError: a line other than the last is not valid JSON or lacks a required key (names the line).
    """
    path = Path(path)
    if not path.exists():
        return {}
    data = path.read_bytes()
    records: dict[SampleKey, dict[str, Any]] = {}
    good_end = 0  # byte offset just after the last complete, valid line
    offset = 0
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, start=1):
        is_last = lineno == len(lines)
        end = offset + len(raw) + (0 if is_last else 1)
        if raw.strip():
            try:
                rec = json.loads(raw.decode("utf-8"))
                if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED_KEYS):
                    raise ValueError(f"a sample record needs the keys {', '.join(REQUIRED_KEYS)}")
                key = sample_key(rec)
            except (ValueError, UnicodeDecodeError) as exc:
                # The last non-empty line may be cut short by a crash; anything earlier is corruption.
                if all(not rest.strip() for rest in lines[lineno:]):
                    break
                raise SagerlError(f"{path}:{lineno}: not a valid sample record ({exc})") from exc
            records.setdefault(key, rec)
        offset = end
        good_end = end
    if repair and good_end != len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    if repair and good_end > 0 and data[good_end - 1 : good_end] != b"\n":
        with open(path, "ab") as f:
            f.write(b"\n")
    return records


class SampleWriter:
    """Appends sample records to ``samples.jsonl``, one JSON line each, written to disk after every batch."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise WriteError(f"cannot write {self.path}: {exc.strerror or exc}") from exc

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append records (each as one line) and ``fsync`` them.

        Raises:
            WriteError: the write failed (disk full...): the file is cut back to its length before this
                call, so it holds only whole lines, and the message names it.
        """
        data = "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records).encode("utf-8")
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass  # load_samples drops a torn last line on the next run
            raise WriteError(
                f"cannot write {self.path}: {exc.strerror or exc} (the samples before this batch are kept; "
                "rerun to resume)"
            ) from exc

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_or_write_config(out: str | Path, settings: Mapping[str, Any], extra: Mapping[str, Any]) -> dict:
    """Record the run's sampling settings in ``eval_config.json``, or check them against an existing run.

    Args:
        out: the run folder.
        settings: values of :data:`SETTINGS_KEYS` for this call.
        extra: other information to store on first write (dates, the machine), never compared (the engine
            that draws the samples is compared by :func:`check_engine`).

    Returns:
        the stored configuration (the existing one when resuming).

    Raises:
        SagerlError: the folder holds samples of different settings, or samples without a config file.
            (A config without samples is simply replaced.)
    """
    out = Path(out)
    cfg_path = out / CONFIG_FILE
    settings = {k: settings[k] for k in SETTINGS_KEYS}
    samples = out / SAMPLES_FILE
    has_samples = samples.exists() and samples.stat().st_size > 0
    # Without samples there is nothing to mix up: a run that failed before sampling (a mistyped model, say)
    # may be rerun with other settings.
    if cfg_path.exists() and has_samples:
        try:
            stored = json.loads(cfg_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise SagerlError(f"{cfg_path}: not valid JSON ({exc})") from exc
        old = stored.get("settings", {})
        diff = [f"{k}: {old.get(k)!r} -> {settings[k]!r}" for k in SETTINGS_KEYS if old.get(k) != settings[k]]
        if diff:
            raise SagerlError(
                f"{out} holds samples drawn with other settings ({'; '.join(diff)}); "
                "use another --out or the same settings"
            )
        return stored
    if has_samples:
        raise SagerlError(f"{out / SAMPLES_FILE} exists but {CONFIG_FILE} does not; use another --out")
    stored = {"settings": settings, **extra}
    write_json_atomic(cfg_path, stored)
    return stored


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def engine_fix(key: str, recorded: Any) -> str:
    """How a resume matches the recorded value of an :data:`ENGINE_KEYS` entry (the error's advice)."""
    if key == "dtype":
        return f"--dtype {recorded} (a study: eval.dtype)"
    if key == "backend":
        return f"--backend {recorded} (a study: eval.backend)"
    if key == "kernel_mode":
        return f"--kernels {recorded} (a study: kernels)"
    if key == "kernels" and str(recorded).startswith("cuda:"):
        return f"a {str(recorded).removeprefix('cuda:')} GPU"
    if key == "kernels":
        cap = str(recorded).lower()
        return f"a CPU where torch runs {recorded} kernels (ATEN_CPU_CAPABILITY={cap} caps one that has more)"
    return f"{key}={recorded}"


def _legacy_calls(out: Path, samples: int) -> list[dict[str, Any]]:
    """The ``calls`` of a folder written before sagerl recorded them, holding ``samples`` samples: those its
    ``results.json`` lists (``meta.sampling_calls``, when a later sagerl rewrote it without sampling), else one
    entry whose dtype and backend are those ``results.json`` names when the call that wrote it drew every
    sample (the call's request ``auto`` tells nothing, and neither do the kernels: never recorded)."""
    entry: dict[str, Any] = {key: None for key in ENGINE_KEYS}
    entry.update(samples=samples, unrecorded=True)
    try:
        meta = json.loads((out / "results.json").read_text(encoding="utf-8"))["meta"]
        listed = meta.get("sampling_calls")
        if isinstance(listed, list) and sum(int(c.get("samples") or 0) for c in listed) == samples:
            return [dict(c) for c in listed]
        if meta.get("samples_generated_this_call") == samples and meta.get("dtype") not in (None, "auto"):
            entry.update(dtype=meta["dtype"], backend=meta.get("backend"))
            entry.update(elapsed_s=meta.get("elapsed_s_this_call"), started_at=meta.get("started_at"))
            entry["finished_at"] = meta.get("finished_at")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return [entry]


def recorded_calls(out: str | Path, stored: Mapping[str, Any], samples: int) -> list[dict[str, Any]]:
    """The calls that drew the ``samples`` samples of ``out`` (``eval_config.json``'s ``calls``; for a folder
    written before they were recorded, :func:`_legacy_calls`). A last call without ``finished_at`` (killed)
    gets the samples no earlier call accounts for, and ``"interrupted": true``."""
    out = Path(out)
    if "calls" not in stored:
        return _legacy_calls(out, samples) if samples else []
    calls = [dict(c) for c in stored["calls"]]
    if calls and "finished_at" not in calls[-1]:
        calls[-1]["samples"] = max(0, samples - sum(int(c.get("samples") or 0) for c in calls[:-1]))
        calls[-1]["interrupted"] = True
    return calls


def _recorded_engine(stored: Mapping[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine a folder's samples were drawn with, as far as it is known: ``engine`` of
    ``eval_config.json``, else each value its (legacy) calls all had."""
    if "engine" in stored:
        return {k: v for k, v in stored["engine"].items() if k in ENGINE_KEYS}
    drew = [c for c in calls if c.get("samples")]
    known = {}
    for key in ENGINE_KEYS:
        values = {c.get(key) for c in drew}
        if len(values) == 1 and None not in values:
            known[key] = values.pop()
    return known


def check_engine(
    out: str | Path, stored: Mapping[str, Any], engine: Mapping[str, Any], samples: int
) -> str | None:
    """Refuse to draw more samples into ``out`` with another engine than its ``samples`` samples had.

    Args:
        stored: ``eval_config.json`` as read (:func:`check_or_write_config`).
        engine: the values of :data:`ENGINE_KEYS` this call would sample with.
        samples: how many samples ``out`` holds (none: nothing to compare, nothing to say).

    Returns:
        None, or one line for a warning when some of the engine is not recorded (a folder written before
        sagerl recorded it): resuming is allowed, since refusing would strand every such folder, and the
        line names what is unknown and the switch to start clean.

    Raises:
        ConfigError: one line naming each differing key, its recorded value and this call's, how to match
            it, and ``--out`` to start a new folder instead. Nothing is written.
    """
    if not samples:
        return None
    out = Path(out)
    known = _recorded_engine(stored, recorded_calls(out, stored, samples))
    diff = [k for k in ENGINE_KEYS if k in known and known[k] != engine.get(k)]
    if diff:
        shown = ", ".join(f"{k} {known[k]!r} -> {engine.get(k)!r}" for k in diff)
        fixes = " and ".join(engine_fix(k, known[k]) for k in diff)
        raise ConfigError(
            f"{out} holds {samples} samples drawn with another engine than this call would use ({shown}); "
            f"resume with {fixes}, or pass --out a new folder to start a new evaluation"
        )
    unknown = [k for k in ENGINE_KEYS if k not in known]
    if not unknown:
        return None
    now = ", ".join(f"{k} {engine.get(k)!r}" for k in unknown)
    return (
        f"{out / CONFIG_FILE} does not record the {' / '.join(unknown)} its {samples} samples were drawn with "
        f"(written before sagerl recorded it); resuming with {now}: if theirs differed, the folder now mixes "
        "two samplers (pass --out a new folder to start clean)"
    )


def begin_sampling_call(
    out: str | Path, stored: Mapping[str, Any], engine: Mapping[str, Any], samples: int
) -> dict:
    """Record, before the first sample of a call is written, the engine it samples with: ``engine`` (the
    recorded values, those not yet recorded taken from this call) and a new ``calls`` entry; the calls
    before it as :func:`recorded_calls` gives them. Returns the stored configuration as written."""
    out = Path(out)
    calls = recorded_calls(out, stored, samples)
    known = _recorded_engine(stored, calls)
    entry = {k: engine.get(k) for k in ENGINE_KEYS}
    updated = {**stored, "engine": {**entry, **known}, "calls": [*calls, {**entry, "started_at": _now()}]}
    write_json_atomic(out / CONFIG_FILE, updated)
    return updated


def end_sampling_call(
    out: str | Path, stored: Mapping[str, Any], samples: int, elapsed_s: float, *, interrupted: bool = False
) -> dict:
    """Complete the last ``calls`` entry (:func:`begin_sampling_call`): the samples it drew, its sampling
    time, when it finished (or stopped: ``interrupted``). Returns the stored configuration as written."""
    calls = [dict(c) for c in stored["calls"]]
    calls[-1].update(samples=samples, elapsed_s=round(elapsed_s, 3), finished_at=_now())
    if interrupted:
        calls[-1]["interrupted"] = True
    updated = {**stored, "calls": calls}
    write_json_atomic(Path(out) / CONFIG_FILE, updated)
    return updated
