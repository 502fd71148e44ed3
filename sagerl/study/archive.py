"""A study folder's results without its weights, as one ``.tar.gz``: what a study that outlives its machine
carries from one sitting to the next (and what ``studies/results/`` ships).

The archive holds, under one top folder named as the study folder, everything a rerun needs to skip what
finished and everything the aggregate reads: the study's own files (``study.yaml``, ``study.json``,
``table.md``, figures), the reference evaluations, and every *finished* run (``cell.json`` status ``ok``) with
its ``cell.json``, ``train/`` logs (``config.yaml``, ``metrics.jsonl``, ``train_state.json``, ``README.md``)
and ``eval/`` (``samples.jsonl``, ``results.json``, ``eval_config.json``). Left out: model weights and
checkpoints (``model/``, ``checkpoint-*/``, ``*.safetensors``, ``*.bin``, ``*.pt``), lock files, and runs that
failed or did not finish (without their checkpoints they restart from step 0 anyway, and a half-written
run folder in an archive would only hide that).

Restoring is ``tar xzf ARCHIVE -C runs`` (the folder's parent): ``sagerl study FILE`` then skips every run the
archive holds and runs the rest; ``--aggregate-only`` rebuilds the table from it. The file is written
atomically (a temporary file, then a rename), so an interrupted write keeps the previous archive.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

from sagerl.atomic_files import atomic_path
from sagerl.run_lock import LOCK_FILE
from sagerl.study.folders import REFERENCE, read_cell_status
from sagerl.study.spec import Study

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
"""Files never archived, wherever they are: model weights and optimizer state."""
WEIGHT_FOLDERS = ("model",)
"""Folders never archived (with ``checkpoint-*``): a run's final model."""


@dataclass(frozen=True)
class ArchiveSummary:
    """What :func:`archive_study` wrote: the archive, the finished runs in it, those left out (not finished),
    its number of files and its size in bytes."""

    path: Path
    finished: int
    unfinished: int
    files: int
    size: int


def _kept(path: Path) -> bool:
    """Whether a file under a finished run or a reference folder goes into the archive."""
    if path.name == LOCK_FILE or path.name.startswith(".") or path.suffix in WEIGHT_SUFFIXES:
        return False
    return not any(part in WEIGHT_FOLDERS or part.startswith("checkpoint-") for part in path.parts)


def archive_members(study: Study, out: Path) -> tuple[list[Path], int, int]:
    """The files of the study folder ``out`` that go into its archive (relative to ``out``, sorted), the number
    of finished runs among them and the number of runs left out (failed, unfinished or not started)."""

    def files(folder: Path, deep: bool = True) -> list[Path]:
        found = folder.rglob("*") if deep else folder.iterdir()
        return [p.relative_to(out) for p in sorted(found) if p.is_file()]

    members = files(out, deep=False)
    if (out / REFERENCE).is_dir():
        members += files(out / REFERENCE)
    finished = unfinished = 0
    for cell in study.cells:
        status = read_cell_status(out, cell)
        if status is None or status.get("status") != "ok":
            unfinished += 1
            continue
        finished += 1
        members += files(out / cell.folder)
    members = [m for m in members if _kept(m)]
    return members, finished, unfinished


def archive_study(study: Study, out: str | Path, archive: str | Path) -> ArchiveSummary:
    """Write the study folder ``out``'s results without weights to ``archive`` (a ``.tar.gz``; module docstring).

    Args:
        study: the study the folder holds (its cells say which runs exist).
        out: the study folder (``runs/study-<name>``).
        archive: the file to write; its folder is created; an existing file is replaced only when the new one
            is complete.

    Returns:
        :class:`ArchiveSummary`.

    Raises:
        FileNotFoundError: ``out`` is not a study folder (no ``study.yaml``): nothing is written.
        WriteError: the archive cannot be written (the previous one is kept).
    """
    out, archive = Path(out), Path(archive)
    if not (out / "study.yaml").is_file():
        raise FileNotFoundError(f"{out}: not a study folder (no study.yaml): run the study first")
    members, finished, unfinished = archive_members(study, out)
    top = out.resolve().name
    with atomic_path(archive) as tmp:
        with tarfile.open(tmp, "w:gz") as tar:
            for member in members:
                tar.add(out / member, arcname=f"{top}/{member.as_posix()}", recursive=False)
    return ArchiveSummary(archive, finished, unfinished, len(members), archive.stat().st_size)


__all__ = ["ArchiveSummary", "archive_members", "archive_study"]
