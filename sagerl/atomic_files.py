"""Atomic file writes: write a temporary file in the target's folder, then ``os.replace`` it into place
(and the same for whole folders: :func:`build_folder`).

A reader (or a rerun after a crash) sees either the old file or the whole new one, never half of one.
The file gets the mode a plainly created file would (``mkstemp`` alone gives 0o600).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sagerl.errors import WriteError


def default_file_mode() -> int:
    """The mode a plainly created file gets: 0o666 minus the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block succeeds, move it onto ``path``.

    The folder is created if needed. On an exception the temporary file is removed and ``path`` is untouched.

    Raises:
        WriteError: an ``OSError`` while creating, writing or renaming (disk full, no permission): one
            line naming ``path``; the old file, if any, is left as it was.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix or ".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
    os.close(fd)
    try:
        os.chmod(tmp, default_file_mode())
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise WriteError(
            f"cannot write {path}: {exc.strerror or exc} (the previous version is kept)"
        ) from exc
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, flushed to disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def build_folder(target: str | Path, build: Callable[[Path], None]) -> Path:
    """Build a folder atomically: ``build(tmp)`` fills a temporary folder beside ``target``, which is then
    renamed into place, so a crash never leaves a half-built ``target``.

    If ``target`` appeared meanwhile (a concurrent build won the race), the new copy is discarded. On an
    exception (KeyboardInterrupt included) the temporary folder is removed and the exception re-raised.

    Returns:
        ``target``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        if target.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
