"""Writing imported evaluations as sagerl evaluation folders, atomically and resumably.

An :class:`ImportedEval` holds what every importer extracts from another tool's file: per dataset, the
problems' ids and, per problem, the 0/1 outcome of each of its ``n`` samples. :func:`write_imported`
turns it into the folder ``sagerl eval`` writes::

    eval_config.json   {"settings": {"model": label, ...: None}, "imported": {...}}  (provenance)
    samples.jsonl      one line per sample: dataset, problem_id, sample_index, correct (no text)
    results.json       :func:`sagerl.eval.results.summarize`: pass@k for k = 1, 2, 4, ..., n, bootstrap CIs
    passk.png          the pass@k curves

so ``sagerl compare`` and ``sagerl analyze support`` read it as they read an evaluation of their own.
What the source file cannot give (the completions' text, the extracted answers, the token counts) is left
out of ``samples.jsonl`` and named in one line (:attr:`ImportedEval.missing`, stored in ``results.json``
under ``meta.imported.missing``); nothing is made up in its place.

Atomic and resumable: every folder is checked first, then each is built in a temporary folder beside its
target and renamed into place (:func:`sagerl.atomic_files.build_folder`), so an interrupted import leaves
whole folders only. Rerunning the same import keeps the folders it already wrote (their
``imported.digest`` matches) and writes the others; a folder of the same name with other contents is an
error, before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagerl.errors import DataError, SagerlError

IMPORT_KEY = "imported"
"""The key of ``eval_config.json`` and of ``results.json``'s ``meta`` that holds an import's provenance."""


@dataclass
class ImportedEval:
    """One evaluation read from another tool's file, before it is written as a folder.

    Attributes:
        name: the folder name under the import's ``--out`` (letters, digits, ``.``, ``_``, ``-``).
        model: what was evaluated, as the source names it (becomes ``meta.model``).
        n: samples per problem (every problem of every dataset has exactly n outcomes).
        outcomes: dataset name -> per problem, its n outcomes (0 or 1), in sample order.
        problem_ids: dataset name -> the problems' ids, in the same order as ``outcomes``.
        source: provenance: the source format, file, and what the folder was made of (stored as is).
        missing: one line naming what the source cannot give.
        notes: lines the importer reports to the user (a decision it made, a suspicion).
        settings: sampling settings the source records (temperature, top_p, max_new_tokens, seed); None
            where it does not.
    """

    name: str
    model: str
    n: int
    outcomes: dict[str, list[list[int]]]
    problem_ids: dict[str, list[str]]
    source: dict[str, Any]
    missing: str
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, list[int]]:
        """Per dataset, the problems' correct counts c in [0, n]."""
        return {ds: [sum(row) for row in rows] for ds, rows in self.outcomes.items()}

    def digest(self) -> str:
        """SHA-256 of everything the folder is made of (outcomes, ids, model, provenance): equal digests mean
        equal folders, so a rerun can keep a folder it wrote before."""
        payload = {
            "name": self.name,
            "model": self.model,
            "n": self.n,
            "outcomes": self.outcomes,
            "problem_ids": self.problem_ids,
            "source": self.source,
            "settings": self.settings,
        }
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_json_file(path: Path) -> Any:
    """The parsed JSON of an evaluation file another tool wrote.

    Raises:
        DataError: the file cannot be read, or is not valid JSON (one line naming the file).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from exc


def folder_name(*parts: object) -> str:
    """A folder name from ``parts`` joined by ``-``, with every character other than letters, digits, ``.``,
    ``_`` and ``-`` replaced by ``_`` (``"sage/branch", "step200"`` -> ``sage_branch-step200``)."""
    text = "-".join(str(p) for p in parts if str(p))
    return re.sub(r"[^A-Za-z0-9._-]", "_", text).strip(".") or "imported"


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_dataset_map(pairs: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    """``["MATH-500=math500", ...]`` (``--dataset-as``) as ``{"MATH-500": "math500"}``.

    Raises:
        SagerlError: an item without ``=``, an empty side, or a source name given twice.
    """
    if not pairs:
        return {}
    if isinstance(pairs, Mapping):
        return {str(k): str(v) for k, v in pairs.items()}
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, target = str(pair).partition("=")
        if not sep or not name.strip() or not target.strip():
            raise SagerlError(
                f"--dataset-as {pair!r}: expected SOURCE_NAME=SAGERL_SET, e.g. MATH-500=math500"
            )
        if name.strip() in out:
            raise SagerlError(f"--dataset-as names {name.strip()!r} twice")
        out[name.strip()] = target.strip()
    return out


def map_datasets(
    ev: ImportedEval,
    mapping: Mapping[str, str],
    *,
    data_dir: str | Path | None = None,
    where: str = "",
) -> None:
    """Rename ``ev``'s datasets by ``mapping`` (source name -> sagerl set) and give their problems the
    sagerl set's ids, position by position, so that the imported folder lines up with a ``sagerl eval`` of
    that set (``sagerl analyze support`` pairs problems by id).

    The positions must mean the same problems (the source loaded the same set in the same order, e.g. the SAGE
    authors' MATH-500 is HuggingFaceH4/MATH-500's test split in order, as sagerl's ``math500``); only the
    number of problems is checked.

    Raises:
        DataError: the sagerl set does not load, or has another number of problems (names both), or two
            datasets would get the same name.
    """
    if not mapping:
        return
    from sagerl.tasks import load_problems

    outcomes: dict[str, list[list[int]]] = {}
    ids: dict[str, list[str]] = {}
    for name, rows in ev.outcomes.items():
        target = mapping.get(name)
        if target is None:
            new, new_ids = name, ev.problem_ids[name]
        else:
            problems = load_problems(target, data_dir=data_dir)
            if len(problems) != len(rows):
                raise DataError(
                    f"{where}dataset {name!r} has {len(rows)} problems, sagerl's {target!r} has {len(problems)}: "
                    "--dataset-as maps problems by position and needs the same set in the same order"
                )
            new = str(problems[0].dataset or target) if problems else target
            new_ids = [str(p.id) for p in problems]
        if new in outcomes:
            raise DataError(f"{where}two datasets would be named {new!r}; check --dataset-as")
        outcomes[new], ids[new] = rows, new_ids
    ev.outcomes, ev.problem_ids = outcomes, ids
    ev.source = {**ev.source, "dataset_as": dict(mapping)}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _stored_digest(folder: Path) -> str | None:
    from sagerl.eval.samples import CONFIG_FILE

    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    block = config.get(IMPORT_KEY) if isinstance(config, dict) else None
    return block.get("digest") if isinstance(block, dict) else None


def plan_folders(out: str | Path, evals: Sequence[ImportedEval]) -> list[tuple[ImportedEval, Path, bool]]:
    """Where each evaluation goes, and whether it is already there (a rerun): ``(eval, folder, done)``.

    Raises:
        SagerlError: two evaluations share a folder name; a folder exists with other contents (not this
            import's: its ``imported.digest`` differs, or it is not an imported folder).
    """
    out = Path(out)
    seen: dict[str, str] = {}
    plan = []
    for ev in evals:
        if ev.name in seen:
            raise SagerlError(
                f"two imported evaluations would both go to {out / ev.name} ({seen[ev.name]}, {ev.model})"
            )
        seen[ev.name] = ev.model
        folder = out / ev.name
        if folder.exists():
            stored = _stored_digest(folder)
            if stored != ev.digest():
                what = "another import" if stored else "something that is not this import"
                raise SagerlError(f"{folder} already holds {what}; use another --out, or remove it")
            plan.append((ev, folder, True))
        else:
            plan.append((ev, folder, False))
    return plan


def write_imported(
    out: str | Path, evals: Sequence[ImportedEval], *, plot: bool = True
) -> list[dict[str, Any]]:
    """Write each evaluation as a sagerl evaluation folder ``out/<name>`` (layout in this module's doc).

    Args:
        out: the parent folder (created if needed).
        evals: the evaluations, each with a distinct :attr:`ImportedEval.name`.
        plot: draw ``passk.png`` (as ``sagerl eval`` does).

    Returns:
        per evaluation ``{"folder": Path, "written": bool, "results": dict}``; ``written`` is False for a
        folder a previous run of the same import already wrote (kept as it is).

    Raises:
        SagerlError: as :func:`plan_folders`, before anything is written. WriteError: a folder cannot be
            written (the folders written before it are whole; rerun to resume).
    """
    from sagerl.atomic_files import build_folder
    from sagerl.eval.results import read_results

    plan = plan_folders(out, evals)
    done = []
    for ev, folder, exists in plan:
        if exists:
            done.append({"folder": folder, "written": False, "results": read_results(folder)})
            continue
        results = build_results(ev)
        build_folder(folder, lambda tmp, ev=ev, results=results: _fill(tmp, ev, results, plot))
        done.append({"folder": folder, "written": True, "results": results})
    return done


def build_results(ev: ImportedEval) -> dict[str, Any]:
    """The ``results.json`` of an imported evaluation: :func:`sagerl.eval.results.summarize` of its counts,
    with a ``meta`` in ``sagerl eval``'s layout (unknown sampling settings are None) and the provenance
    under ``meta.imported``."""
    from sagerl import __version__
    from sagerl.eval.passk import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE
    from sagerl.eval.results import summarize

    summary = summarize(ev.counts(), ev.n)
    settings = _settings(ev)
    meta = {
        "model": ev.model,
        "n": ev.n,
        "temperature": settings["temperature"],
        "top_p": settings["top_p"],
        "max_new_tokens": settings["max_new_tokens"],
        "seed": settings["seed"],
        "few_shot": None,
        "backend": None,
        "datasets": list(ev.outcomes),
        "limit": None,
        "ks": summary["ks"],
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE},
        "estimator": "unbiased pass@k, 1 - C(n-c,k)/C(n,k) (Chen et al. 2021)",
        "samples_total": ev.n * sum(len(rows) for rows in ev.outcomes.values()),
        "finished_at": ev.source.get("date") or _now(),
        "sagerl_version": __version__,
        IMPORT_KEY: {**ev.source, "missing": ev.missing, "notes": list(ev.notes), "digest": ev.digest()},
        "files": {"samples": "samples.jsonl", "config": "eval_config.json", "plot": "passk.png"},
    }
    return {"meta": meta, "datasets": summary["datasets"], "average": summary["average"]}


def _settings(ev: ImportedEval) -> dict[str, Any]:
    from sagerl.eval.samples import SETTINGS_KEYS

    settings = {key: ev.settings.get(key) for key in SETTINGS_KEYS}
    settings["model"] = ev.model
    return settings


def _fill(folder: Path, ev: ImportedEval, results: dict[str, Any], plot: bool) -> None:
    """Write the folder's files into ``folder`` (a temporary folder that is then renamed)."""
    from sagerl import __version__
    from sagerl.eval.plots import plot_run
    from sagerl.eval.results import write_results
    from sagerl.eval.samples import CONFIG_FILE, SAMPLES_FILE, write_json_atomic

    lines = []
    for ds, rows in ev.outcomes.items():
        for pid, row in zip(ev.problem_ids[ds], rows, strict=True):
            for j, outcome in enumerate(row):
                rec = {"dataset": ds, "problem_id": pid, "sample_index": j, "correct": bool(outcome)}
                lines.append(json.dumps(rec) + "\n")
    (folder / SAMPLES_FILE).write_text("".join(lines), encoding="utf-8")
    config = {
        "settings": _settings(ev),
        "created_at": _now(),
        "sagerl_version": __version__,
        IMPORT_KEY: results["meta"][IMPORT_KEY],
    }
    write_json_atomic(folder / CONFIG_FILE, config)
    write_results(folder, results)
    if plot:
        plot_run(results, folder / "passk.png")


def check_outcome(value: Any) -> int | None:
    """``value`` as 0 or 1 when it is a 0/1 reward (bool, int, or float 0.0/1.0), else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    return None
