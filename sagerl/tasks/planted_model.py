"""The planted task's reference and teacher models: tiny character-level models (:mod:`sagerl.char_lm`)
trained on traces with planted strategy frequencies. sagerl ships them; it never builds one implicitly.

**Shipped builds.** The planted models are the benchmark's fixed artefacts, so they are files inside the
package (``sagerl/tasks/planted_models/``, about 0.45 MB each), each file's SHA-256 in ``manifest.json``.
There are several independent *builds* of each role (the same recipe with another build seed: other
traces, another initialisation and data order), so that a study can treat the reference model as a factor
(``builds:`` in a study file, :mod:`sagerl.study.spec`). Names: ``planted-<role>-<build>``
(``planted-reference-b2``); ``planted-<role>`` alone is the default build, :data:`DEFAULT_BUILD`.
:func:`shipped_planted_model` returns a shipped model's folder after checking every file's hash; a
missing, truncated or altered file is a :class:`~sagerl.errors.ModelLoadError` naming the file and the
expected hash.

**Building one** (for a changed task): :func:`build_planted_model`, or ``sagerl planted build``, trains with
1 torch thread and deterministic kernels (:func:`sagerl.determinism.deterministic`) whatever the caller's
thread count, so a build gives the same bytes on the same kind of machine (CPU model, torch build), not
across CPUs (``manifest.json`` records the machine the shipped builds came from).

**The recipe.** The model learns from two kinds of traces, shuffled together. *Planted* traces draw the
strategy from the planted mix (:data:`~sagerl.tasks.planted.REFERENCE_MIX`, ``REFERENCE_MIX_10`` or
``TEACHER_MIX``) and carry the loss on the whole completion: they set how often the model *chooses* each
strategy (its first token). *Skill* traces draw every strategy equally often (:data:`SKILL_MIX`) with the loss
on all but the first token: they teach how to *carry out* each one without changing how often it is chosen.
The result knows the rare strategy but rarely uses it, as a language model that saw a method in a few
solutions does. (Planted traces alone do not teach the rare strategy: on common problems its digit equals
the dominant one's, so only its few rare-type traces show which digit it copies; the model then copies the
first digit after every marker. Training on skill traces first and planted ones second makes it forget the
same way. Both were measured while building this task.)
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sagerl.atomic_files import atomic_write_text, build_folder
from sagerl.char_lm import CharLMConfig, Example, Phase, train_char_lm
from sagerl.determinism import deterministic, machine_record
from sagerl.errors import ModelLoadError
from sagerl.kernels import PLANTED_PREFIX
from sagerl.random_state import preserved_rng
from sagerl.tasks.planted import (
    REFERENCE_MIX,
    REFERENCE_MIX_10,
    TEACHER_MIX,
    make_planted_problems,
    make_traces,
    read_strategy,
    solve,
    verify,
)

TRAIN_TRACES = 20_000
"""Traces of each kind (planted and skill)."""
TRAIN_STEPS = 1500
SKILL_MIX = {name: 0.25 for name in ("head", "tail", "second", "third")}
"""The skill traces: every strategy equally often, the loss on all but their first token."""
MEASURE_PROBLEMS = 1_000
MEASURE_SEED = 5
MIXES = {"reference": REFERENCE_MIX, "reference-10": REFERENCE_MIX_10, "teacher": TEACHER_MIX}
"""The planted roles and the strategy mix of their planted traces."""
CONFIG = CharLMConfig()
"""Size and optimiser of every planted model; its ``seed`` is replaced by the build seed."""
BUILD_THREADS = 1
"""Torch threads of a build (and of its measurement), whatever the caller's."""
MAX_NEW_TOKENS = 24
REPORT_FILE = "planted.json"
SHIPPED_DIR = Path(__file__).with_name("planted_models")
"""The shipped builds: one model folder per name, and ``manifest.json``."""
MANIFEST_FILE = "manifest.json"
DEFAULT_BUILD = "b1"
"""The build that ``planted-<role>`` without a build names."""
PREFIX = PLANTED_PREFIX
"""What every shipped planted model's name begins with."""


def _trace_seeds(build_seed: int) -> tuple[int, int, int]:
    """Seeds of the planted traces, the skill traces and their shuffle for a build seed."""
    base = 1000 * build_seed + 11
    return base, base + 1, base


def recipe_phases(role: str, build_seed: int) -> list[Phase]:
    """The one training phase of ``role``'s build ``build_seed``: planted and skill traces, shuffled
    (see the module docstring).

    Raises:
        ValueError: unknown role.
    """
    _check_role(role)
    planted_seed, skill_seed, shuffle_seed = _trace_seeds(build_seed)
    examples = []
    for mix, loss_on, seed in (
        (MIXES[role], "completion", planted_seed),
        (SKILL_MIX, "after_first_token", skill_seed),
    ):
        problems = make_planted_problems(TRAIN_TRACES, seed=seed, split="train", name="planted_train")
        examples += [
            Example(prompt, completion, loss_on)
            for prompt, completion, _ in make_traces(problems, mix, seed=seed)
        ]
    random.Random(shuffle_seed).shuffle(examples)
    return [Phase(tuple(examples), TRAIN_STEPS)]


def _check_role(role: str) -> None:
    if role not in MIXES:
        raise ValueError(f"unknown planted model role {role!r}; expected one of {sorted(MIXES)}")


def measure_strategies(
    model_dir: str | Path, *, problems: int = MEASURE_PROBLEMS, seed: int = MEASURE_SEED
) -> dict:
    """Sample one completion per held-out problem at temperature 1 and count the strategies used.

    Returns:
        ``{"samples", "measured": {"all"|"common"|"rare": {strategy: share}}, "pass@1": {class: share},
        "decision_entropy", "end_entropy"}`` (entropies in nats).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    held_out = make_planted_problems(problems, seed=seed, split="eval", name="planted")
    ids = torch.tensor([tokenizer(p.problem)["input_ids"] for p in held_out])  # equal lengths
    torch.manual_seed(seed)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        decision_entropy = -(logp.exp() * logp).sum(-1).mean().item()
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=MAX_NEW_TOKENS,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    counts: dict[str, Counter] = {"all": Counter(), "common": Counter(), "rare": Counter()}
    solved: Counter = Counter()
    for p, text in zip(held_out, texts, strict=True):
        strategy = read_strategy(text)
        cls = "rare" if p.meta["rare"] else "common"
        counts["all"][strategy] += 1
        counts[cls][strategy] += 1
        solved[cls] += int(verify(p, text)[1])
    sizes = {cls: sum(c.values()) for cls, c in counts.items()}
    measured = {cls: {s: c[s] / max(sizes[cls], 1) for s in sorted(c)} for cls, c in counts.items()}
    return {
        "samples": problems,
        "measured": measured,
        "pass@1": {cls: solved[cls] / max(sizes[cls], 1) for cls in ("common", "rare")},
        "decision_entropy": decision_entropy,
        "end_entropy": _end_entropy(model, tokenizer, held_out[:200]),
    }


def _end_entropy(model, tokenizer, problems) -> float:
    """Mean entropy (nats) of the next token after "<prompt>tail <digit>": the rare strategy's end mark."""
    import torch

    texts = [p.problem + f"tail {solve(p, 'tail')}" for p in problems]
    ids = torch.tensor([tokenizer(t)["input_ids"] for t in texts])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1).mean().item()


def build_planted_model(
    role: str, out: str | Path, *, build_seed: int = 1, steps: int = TRAIN_STEPS, traces: int | None = None
) -> Path:
    """Build ``role``'s model with ``build_seed`` into the folder ``out`` (atomically; a plain Hugging Face
    model folder with ``planted.json``, the planted and the measured strategy frequencies).

    Runs with :data:`BUILD_THREADS` torch thread and deterministic kernels whatever the caller's settings,
    and leaves the caller's random generators as they were: the same arguments give the same bytes on the
    same kind of machine. About 1.5-2.5 min on one core of this project's CPU machine.

    Args:
        steps, traces: a shorter recipe (for tests); the shipped builds use the defaults.

    Raises:
        ValueError: unknown role, or ``out`` exists.
    """
    _check_role(role)
    out = Path(out)
    if out.exists():
        raise ValueError(f"{out} exists: build_planted_model writes a new folder")
    phases = recipe_phases(role, build_seed) if traces is None else _short_phases(role, build_seed, traces)
    phases = [replace(p, steps=steps) for p in phases]
    config = replace(CONFIG, seed=build_seed)

    def build(folder: Path) -> None:
        train_char_lm(phases, config, folder)
        report = {
            "role": role,
            "build_seed": build_seed,
            "planted": MIXES[role],
            "traces": {
                "planted": {"mix": MIXES[role], "count": traces or TRAIN_TRACES, "loss_on": "completion"},
                "skill": {"mix": SKILL_MIX, "count": traces or TRAIN_TRACES, "loss_on": "after_first_token"},
                "seeds": list(_trace_seeds(build_seed)),
            },
            "steps": steps,
            "config": asdict(config),
        }
        report.update(measure_strategies(folder))
        atomic_write_text(folder / REPORT_FILE, json.dumps(report, indent=2) + "\n")

    with preserved_rng(), deterministic(BUILD_THREADS):
        return build_folder(out, build)


def _short_phases(role: str, build_seed: int, traces: int) -> list[Phase]:
    (phase,) = recipe_phases(role, build_seed)
    return [Phase(phase.examples[: 2 * traces], phase.steps)]


# --- the shipped builds ------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path = SHIPPED_DIR) -> dict[str, Any]:
    """The shipped builds' manifest (``manifest.json``).

    Raises:
        ModelLoadError: the file is missing or not JSON (one line naming it).
    """
    path = folder / MANIFEST_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"{path}: the planted models' manifest does not read ({exc}); reinstall sagerl"
        ) from exc


def planted_model_names(folder: Path = SHIPPED_DIR) -> list[str]:
    """Every shipped name: ``planted-<role>-<build>`` for each build, and ``planted-<role>`` for the default."""
    models = read_manifest(folder)["models"]
    aliases = sorted({f"{PREFIX}{entry['role']}" for entry in models.values()})
    return aliases + sorted(models)


def shipped_builds(folder: Path = SHIPPED_DIR) -> list[str]:
    """The build names of the shipped models (``["b1", "b2", "b3"]``)."""
    return sorted({entry["build"] for entry in read_manifest(folder)["models"].values()})


def with_build(name: str, build: str, folder: Path = SHIPPED_DIR) -> str:
    """The name of ``build`` of the planted model ``name`` (``planted-teacher``, ``b2`` ->
    ``planted-teacher-b2``).

    Raises:
        ModelLoadError: ``name`` is not a planted role's name (a build names one of the shipped roles), or
            the build is not shipped (the known builds listed).
    """
    models = read_manifest(folder)["models"]
    roles = {entry["role"] for entry in models.values()}
    if not name.startswith(PREFIX) or name[len(PREFIX) :] not in roles:
        raise ModelLoadError(
            f"model {name!r} has no reference builds: builds apply to "
            f"{', '.join(PREFIX + r for r in sorted(roles))}"
        )
    target = f"{name}-{build}"
    if target not in models:
        raise ModelLoadError(
            f"unknown build {build!r} of {name}; shipped builds: {', '.join(shipped_builds(folder))}"
        )
    return target


def shipped_planted_model(name: str, folder: Path = SHIPPED_DIR) -> Path:
    """The folder of the shipped planted model ``name`` (``planted-reference``, ``planted-teacher-b3``, ...),
    after checking every file of it against the manifest's SHA-256.

    Raises:
        ModelLoadError: an unknown name (the shipped names listed), or a file that is missing or whose hash
            differs (one line naming the file and the expected hash; nothing is written).
    """
    manifest = read_manifest(folder)
    models = manifest["models"]
    full = name if name in models else f"{name}-{manifest.get('default_build', DEFAULT_BUILD)}"
    if full not in models:
        raise ModelLoadError(
            f"unknown planted model {name!r}; shipped: {', '.join(planted_model_names(folder))}"
        )
    model_dir = folder / full
    for file, expected in models[full]["files"].items():
        path = model_dir / file
        if not path.is_file():
            raise ModelLoadError(
                f"{path}: missing (shipped planted model {full}, expected SHA-256 {expected}); reinstall sagerl"
            )
        actual = file_sha256(path)
        if actual != expected:
            raise ModelLoadError(
                f"{path}: SHA-256 {actual} differs from the manifest's {expected} (the shipped planted model "
                f"{full} is altered or truncated); reinstall sagerl, or rebuild it with sagerl planted build"
            )
    return model_dir


def build_shipped_set(
    out: str | Path, builds: dict[str, int], roles: tuple[str, ...] = tuple(MIXES), log=print
) -> Path:
    """Build every role for every build (name -> build seed) into ``out`` and write its ``manifest.json``:
    how the shipped set in ``sagerl/tasks/planted_models`` was made (``sagerl planted build --all``).
    Resumable: a model folder already there is kept (and hashed as it is)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models = {}
    for build, seed in builds.items():
        for role in roles:
            name = f"{PREFIX}{role}-{build}"
            folder = out / name
            if not (folder / REPORT_FILE).is_file():
                log(f"building {name} (build seed {seed})")
                build_planted_model(role, folder, build_seed=seed)
            files = sorted(p.name for p in folder.iterdir() if p.is_file())
            models[name] = {
                "role": role,
                "build": build,
                "build_seed": seed,
                "files": {f: file_sha256(folder / f) for f in files},
            }
    manifest = {
        "format": 1,
        "default_build": DEFAULT_BUILD if DEFAULT_BUILD in builds else sorted(builds)[0],
        "recipe": {"traces": TRAIN_TRACES, "steps": TRAIN_STEPS, "config": asdict(CONFIG)},
        "built_with": {**machine_record(), "threads": BUILD_THREADS},
        "models": models,
    }
    atomic_write_text(out / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
    return out
