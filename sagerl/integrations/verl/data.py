"""sagerl's data sets as verl's training and validation files (parquet, verl's RL dataset layout).

One row per problem: ``data_source`` (the set's name), ``prompt`` (chat messages from
:func:`sagerl.tasks.build_messages`: the problem and "Please reason step by step, and put your final answer
within \\boxed{}."), ``ability``, ``reward_model`` (``{"style": "rule", "ground_truth": answer}``) and
``extra_info`` (``id``, ``kind``), which :mod:`sagerl.integrations.verl.reward` grades.

Usage (what recipes/verl/run.sh runs first)::

    python -m sagerl.integrations.verl.data --out ~/data/sage math_lvl3to5 math500 aime24 amc23

writes ``<out>/<name>.parquet`` for each named set or JSONL path (see :func:`sagerl.tasks.load_problems`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sagerl.atomic_files import atomic_path
from sagerl.errors import SagerlError
from sagerl.tasks import Problem, build_messages, load_problems


def verl_rows(problems: list[Problem]) -> list[dict]:
    """verl's RL-dataset rows for ``problems`` (module docstring)."""
    return [
        {
            "data_source": p.dataset,
            "prompt": build_messages(p),
            "ability": p.kind,
            "reward_model": {"style": "rule", "ground_truth": p.answer},
            "extra_info": {"id": p.id, "kind": p.kind},
        }
        for p in problems
    ]


def write_parquet(problems: list[Problem], path: str | Path) -> Path:
    """Write ``problems`` as a verl parquet file (atomically) and return its path."""
    import pandas as pd

    path = Path(path)
    with atomic_path(path) as tmp:
        pd.DataFrame(verl_rows(problems)).to_parquet(tmp)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", help="named sets (math500, aime24, ...) or JSONL paths")
    parser.add_argument("--out", required=True, help="folder for <name>.parquet")
    parser.add_argument("--limit", type=int, default=None, help="first N problems of each set")
    args = parser.parse_args(argv)
    try:
        for name in args.sets:
            problems = load_problems(name, limit=args.limit)
            path = write_parquet(problems, Path(args.out).expanduser() / f"{Path(name).stem}.parquet")
            print(f"{path}: {len(problems)} problems")
    except SagerlError as exc:
        parser.exit(2, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
