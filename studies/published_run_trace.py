"""Where a published planted run's rerun parts from the same run on another CPU kind, step by step (issue 37).

A run of the published frontier confirmation (``studies/pareto-confirm.yaml``, setting ``rare10``, build ``b2``,
seed 2: the run ``tests/test_kernels.py`` reruns) is trained with its own command under canonical kernels with a
step trace on (:mod:`sagerl.train.step_trace`: digests of every module's output in every forward call, of every
gradient before and after clipping, and of the weights, step by step). Traces recorded on this project's CPU
kinds are kept in ``studies/results/traces/`` (about 240 kB each); comparing a new CPU kind's trace with them
names the first tensor whose bytes differ: the module whose inputs were equal and whose output was not, or the
gradient, the gradient norm, or the optimizer step.

Usage:
    python studies/published_run_trace.py                  # record here (about 35 s), compare with the recorded
    python studies/published_run_trace.py --cell pkpo-anneal@cosine
    python studies/published_run_trace.py --save           # and keep this kind's trace in studies/results/traces
    python studies/published_run_trace.py --env MKL_CBWR=AVX2   # what one library's branch moves
    python studies/published_run_trace.py --compare A B    # two trace files

Canonical kernels need an x86-64 CPU with AVX2 (:func:`sagerl.kernels.canonical_supported`).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY_FILE = ROOT / "studies" / "pareto-confirm.yaml"
TRACES = ROOT / "studies" / "results" / "traces"
SETTING, BUILD, SEED = "rare10", "b2", 2
CELLS = ("grpo", "pkpo-anneal@cosine", "pkpo-anneal")


def published_cell(cell_name: str):
    """The study and cell of ``pareto-confirm``'s ``rare10``/``b2``/seed 2 run of ``cell_name``.

    Raises:
        ValueError: ``cell_name`` is not one of :data:`CELLS`.
    """
    from sagerl.study.spec import load_studies

    if cell_name not in CELLS:
        raise ValueError(f"--cell {cell_name!r}: choose one of {', '.join(CELLS)}")
    (study,) = [
        s for s in load_studies(STUDY_FILE, check_models=False) if s.name == f"pareto-confirm-{SETTING}"
    ]
    (cell,) = [c for c in study.cells if (c.name, c.build, c.seed) == (cell_name, BUILD, SEED)]
    return study, cell


def kind_slug(kind: str) -> str:
    """A file-name form of a CPU kind: ``"AMD EPYC (AVX-512 BF16)"`` -> ``"amd-epyc-avx-512-bf16"``."""
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")


def trace_file(cell_name: str, kind: str) -> Path:
    """Where the trace of ``cell_name``'s published run recorded on CPU kind ``kind`` is kept."""
    return (
        TRACES
        / f"pareto-confirm-{SETTING}-{BUILD}-seed{SEED}-{kind_slug(cell_name)}.{kind_slug(kind)}.json.gz"
    )


def recorded_traces(cell_name: str) -> dict[str, Path]:
    """The kept traces of ``cell_name``'s published run, by CPU-kind slug."""
    prefix = trace_file(cell_name, "x").name[: -len("x.json.gz")]
    return {p.name[len(prefix) : -len(".json.gz")]: p for p in sorted(TRACES.glob(f"{prefix}*.json.gz"))}


def train_with_trace(
    cell_name: str, out: Path, trace: Path, *, eval_too: bool = False, env: dict[str, str] | None = None
) -> Path:
    """Run the published run's own commands (``sagerl.study.cell_commands``: its train command, and its eval
    command when ``eval_too``) under canonical kernels in new processes, the training with a step trace into
    ``trace``; ``env``: variables set over the canonical environment (an experiment: which library moves which
    tensor). Returns the run's folder.

    Raises:
        RuntimeError: a command failed (its last output lines).
    """
    from sagerl.kernels import environment
    from sagerl.study.runner import cell_commands
    from sagerl.train.run import STEP_TRACE_ENV

    study, cell = published_cell(cell_name)
    changed = dict(env or {})
    env = {**environment("canonical", threads=1), **changed, STEP_TRACE_ENV: str(trace)}
    lines = cell_commands(study, out, cell)
    for line in lines if eval_too else lines[:1]:
        words = shlex.split(line)
        if words[:2] != ["OMP_NUM_THREADS=1", "sagerl"] or "--kernels" not in words:
            raise RuntimeError(f"not a canonical sagerl command: {line}")
        if changed:  # the command would set the canonical variables again (sagerl.kernels.apply): the
            # environment given is the canonical one already, with the experiment's changes over it
            words[words.index("--kernels") + 1] = "native"
        done = subprocess.run(
            [sys.executable, "-m", "sagerl.cli", *words[2:]],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{line}\n{done.stderr[-3000:]}")
    return out / cell.folder


def compare_with_recorded(cell_name: str, trace: Path) -> dict[str, str]:
    """``trace`` against each kept trace of ``cell_name``: "the same at all N steps" or the first difference."""
    from sagerl.train.step_trace import first_difference, read_trace

    mine = read_trace(trace)
    out = {}
    for kind, path in recorded_traces(cell_name).items():
        found = first_difference(read_trace(path), mine)
        out[kind] = f"the same at all {len(mine['steps'])} steps" if found is None else str(found)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="grpo", help=f"one of {', '.join(CELLS)} (default grpo)")
    parser.add_argument(
        "--save", action="store_true", help="keep this CPU kind's trace in studies/results/traces"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE",
        help="a variable set over the canonical environment for this recording (repeatable); not with --save",
    )  # fmt: skip
    parser.add_argument("--compare", nargs=2, metavar="TRACE", help="compare two trace files; record nothing")
    args = parser.parse_args(argv)
    extra = dict(pair.split("=", 1) for pair in args.env if "=" in pair)
    if len(extra) != len(args.env) or (extra and args.save):
        parser.error("--env takes KEY=VALUE, and a trace recorded with --env is not kept (--save)")
    from sagerl.train.step_trace import first_difference, read_trace

    if args.compare:
        found = first_difference(*(read_trace(p) for p in args.compare))
        print("the same" if found is None else f"first difference: {found}")
        return 0
    from sagerl.determinism import machine_record
    from sagerl.kernels import canonical_supported, cpu_kind

    ok, why = canonical_supported()
    if not ok:
        print(f"canonical kernels cannot run here: {why}", file=sys.stderr)
        return 2
    kind = cpu_kind(machine_record())
    work = Path(tempfile.mkdtemp(prefix="sagerl-trace-"))
    try:
        trace = work / "trace.json.gz"
        train_with_trace(args.cell, work / "study", trace, env=extra)
        changed = "".join(f", {k}={v}" for k, v in extra.items())
        print(f"{args.cell}, pareto-confirm {SETTING} {BUILD} seed {SEED}, recorded on {kind}{changed}")
        for other, verdict in compare_with_recorded(args.cell, trace).items():
            print(f"  against {other}: {verdict}")
        if args.save:
            target = trace_file(args.cell, kind)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(trace, target)
            print(f"kept: {os.path.relpath(target, Path.cwd())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
