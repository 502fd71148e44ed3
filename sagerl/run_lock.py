"""One process per run folder: an exclusive lock held for the whole of a ``sagerl train`` or ``sagerl eval``.

The lock is ``fcntl.flock`` on the file ``.sagerl.lock`` in the run folder, taken without waiting. The
holder writes who it is into the file (pid, host, command line, start time), so a second process fails at
once with a message naming the folder and the first process. The kernel releases a ``flock`` when the
holder's file descriptor closes, which includes every way a process can die (``kill -9`` too), so a lock
left by a dead process never blocks the next run: the file stays, but nobody holds it.

The lock file is never deleted: deleting it would let one process lock the old file while another creates
and locks a new one. Limits: POSIX only; on a network file system ``flock`` is as reliable as the file
system's lock support (NFSv4 supports it); a child process started by ``fork`` without ``exec`` shares the
descriptor and keeps the lock while it lives.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sagerl.errors import SagerlError

LOCK_FILE = ".sagerl.lock"


class RunFolderLockedError(SagerlError):
    """Another live process holds the run folder (the message names the folder and that process)."""


def _command_line() -> str:
    """This process's command line as a user typed it: "sagerl eval ...", "python -m sagerl.cli eval ..."."""
    orig = list(getattr(sys, "orig_argv", []))
    if "-m" in orig[:3]:
        return shlex.join(["python", *orig[orig.index("-m") :]])
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else ""


def _holder() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": _command_line(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _describe(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 65536, 0).decode("utf-8"))
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started_at']}: {holder['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its details yet"


@contextmanager
def run_lock(folder: str | Path) -> Iterator[Path]:
    """Hold the exclusive lock of run folder ``folder`` (created if needed) for the ``with`` block.

    Yields:
        the lock file's path.

    Raises:
        RunFolderLockedError: another live process holds the folder (pid, host, command, start time).
        SagerlError: the folder or its lock file cannot be created (names the path).
    """
    folder = Path(folder)
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise SagerlError(f"cannot create the lock file {path}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderLockedError(
                f"{folder} is in use by another sagerl run ({_describe(fd)}); wait for it to finish, or "
                f"use another folder (a killed run does not hold the folder: its lock goes with it)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(_holder()) + "\n").encode("utf-8"), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
