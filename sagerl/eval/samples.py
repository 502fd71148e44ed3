"""``samples.jsonl`` (one line per sample, appended as sampling proceeds) and ``eval_config.json``.

A line of ``samples.jsonl``::

    {"dataset": "aime24", "problem_id": "aime-2024-I-01", "sample_index": 0, "text": "...",
     "extracted": "204", "answer": "204", "correct": true, "num_tokens": 311, "finish_reason": "stop"}

``num_tokens`` counts completion tokens (the end-of-sequence token included); ``finish_reason`` is
``"stop"`` or ``"length"``. A sample is identified by ``(dataset, problem_id, sample_index)``.

Resume: :func:`load_samples` reads the lines already written, drops a truncated last line (a crash in the
middle of a write) and cuts it off the file, so that new lines are appended after the last complete one.
:func:`check_or_write_config` refuses to continue a run whose sampling settings differ.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sagerl.atomic_files import atomic_write_text
from sagerl.errors import SagerlError, WriteError

SAMPLES_FILE = "samples.jsonl"
CONFIG_FILE = "eval_config.json"

REQUIRED_KEYS = ("dataset", "problem_id", "sample_index", "correct")
SETTINGS_KEYS = ("model", "temperature", "top_p", "max_new_tokens", "seed", "few_shot")
"""Settings that change what a sample is; a run folder holds samples of one combination only."""

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
        extra: other information to store on first write (backend, dates...), never compared.

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
