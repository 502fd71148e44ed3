"""The code blocks of the README and of every page under docs/, and how each is checked.

The convention (docs/contributing.md states it for writers): an HTML comment on the line before a fenced
block says what ``make test`` does with it::

    <!-- check: run -->       run as written: cheap (--help, --dry-run, tiny sizes), offline, on a CPU
    <!-- check: parse -->     checked without running (the default for bash blocks)
    <!-- check: gpu -->       needs a GPU, so parsed only; the text before the block says so
    <!-- check: skip: WHY --> not checked; WHY says why (a template, a command's output)

Defaults without a comment: ``bash``/``sh``/``shell`` blocks are parsed, ``python`` blocks run, ``yaml``
blocks are loaded with ``yaml.safe_load``; blocks in any other language (``text``, output) are not code.

*Parsed* means, for shell: ``bash -n`` on the block; every ``sagerl`` command (also under ``python -m
sagerl.cli``, ``accelerate launch ... -m sagerl.cli``, ``torchrun``) parsed by the real command-line parser
(commands, option names, value types, required options); ``python -m sagerl.demo`` by the demo's parser;
``make T`` needs a Makefile target T; ``python FILE``/``bash FILE`` need the file (and a script's
``--options`` must be among its ``add_argument`` names; a bash script passes ``bash -n``); ``python -m
MODULE`` needs the module's file. A program not in :data:`KNOWN_PROGRAMS` fails the check, so a new kind
of command is a decision. For Python: ``compile``, and every ``from sagerl... import name`` must name a
module that exists and defines or imports ``name`` (read with ast, nothing imported).

*Run* means: shell blocks with ``bash -euo pipefail``, Python blocks with the project's interpreter, in a
scratch folder that links every top-level entry of the repository (so ``studies/...`` resolves and
``runs/`` lands in the scratch folder), with ``.venv/bin`` first on PATH, ``HF_HUB_OFFLINE=1`` and
``SAGERL_DATA_DIR`` set as the Makefile sets them.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MODES = ("run", "parse", "gpu", "skip")
SHELL = ("bash", "sh", "shell")
MARKER = re.compile(r"^<!--\s*check:\s*(run|parse|gpu|skip)\b\s*:?\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
REDIRECTION = re.compile(r"(?<!\S)\d*(?:>>|>|<)(?:&\d+|\s*[^\s;&|]+)")

KNOWN_PROGRAMS = {
    # checked further below
    "sagerl",
    "python",
    "python3",
    "make",
    "bash",
    "sh",
    "accelerate",
    "torchrun",
    # accepted as they are (setup, shell built-ins, other tools)
    "pip",
    "git",
    "cd",
    "export",
    "source",
    ".",
    "cat",
    "ls",
    "echo",
    "tensorboard",
    "trl",
    "nvidia-smi",
    "mkdocs",
    "ruff",
    "pytest",
    "tmux",
    "head",
    "tail",
    "grep",
    "wc",
}
EXTERNAL_MODULES = {"verl.trainer.main_ppo", "pytest", "pip", "venv", "mkdocs"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    mode: str  # run | parse | gpu | skip | none (not code)
    reason: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def default_mode(language: str) -> str:
    if language in SHELL or language == "yaml":
        return "parse"
    if language == "python":
        return "run"
    return "none"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the mode its marker (or its language) gives.

    Raises:
        ValueError: a marker that is not followed by a block, or an unknown check mode.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i].lstrip())
        if fence is None:
            if lines[i].strip().startswith("<!-- check") and not MARKER.match(lines[i].strip()):
                raise ValueError(f"{path}:{i + 1}: malformed marker {lines[i].strip()!r} (modes: {MODES})")
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        language = fence[2].lower()
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(previous)
        mode, reason = (marker[1], marker[2]) if marker else (default_mode(language), "")
        if marker and language not in (*SHELL, "python", "yaml"):
            raise ValueError(f"{path}:{i + 1}: a check marker before a {language or 'plain'} block")
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[1]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        out.append(Block(path, i + 1, language, mode, reason, "\n".join(body) + "\n"))
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in blocks(path)]


# -- shell --------------------------------------------------------------------------------------------
def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments and redirections dropped,
    split at ``&&``, ``||``, ``;`` and ``|``; leading ``VAR=value`` assignments removed."""
    joined = re.sub(r"\\\n", " ", text)
    commands = []
    for line in joined.splitlines():
        line = REDIRECTION.sub("", line)  # > file, >> file, 2>&1, < file
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token in (";", "&&", "||", "|", "&"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
        if current:
            commands.append(current)
    out = []
    for command in commands:
        while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
            command = command[1:]
        if command:
            out.append(command)
    return out


def check_shell_syntax(text: str) -> None:
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"bash -n: {result.stderr.strip()}")


def check_sagerl_args(args: list[str]) -> None:
    """Parse ``sagerl ARGS`` with the real CLI (typer/click) without running the command.

    Raises:
        AssertionError: an unknown command or option, a value of the wrong type, a missing option.
    """
    import typer

    from sagerl.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("sagerl", [], resilient_parsing=True)
    command, path = group, ["sagerl"]
    rest = list(args)
    try:
        while hasattr(command, "get_command"):  # a group: the next word names its command
            if not rest or rest[0] in ("--help", "--version"):
                return
            sub = command.get_command(ctx, rest[0])
            if sub is None:
                raise AssertionError(f"{' '.join(path)}: no command {rest[0]!r}")
            path.append(rest[0])
            ctx = (
                sub.make_context(rest[0], [], parent=ctx, resilient_parsing=True)
                if hasattr(sub, "get_command")
                else ctx
            )
            command, rest = sub, rest[1:]
        command.make_context(path[-1], rest, parent=ctx)
    except typer.Exit:
        return  # --help / --version
    except typer.TyperException as exc:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise AssertionError(f"{' '.join(path)}: {message}") from None


def script_options(path: Path) -> set[str] | None:
    """The option strings a Python script declares with ``add_argument`` (None: it declares none)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found |= {
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")
            }
    return found or None


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _check_python_command(args: list[str]) -> None:
    if not args:
        return
    if args[0] == "-m":
        module, rest = args[1], args[2:]
        if module == "sagerl.cli":
            check_sagerl_args(rest)
        elif module == "sagerl.demo":
            from sagerl.demo import build_parser

            _parse_argparse(build_parser(), rest, module)
        elif module in EXTERNAL_MODULES:
            pass
        elif _module_file(module) is None:
            raise AssertionError(f"python -m {module}: no such module in the repository")
        return
    if args[0] == "-c":
        compile(args[1], "<python -c>", "exec")
        return
    script = ROOT / args[0]
    if not script.is_file():
        raise AssertionError(f"python {args[0]}: no such file")
    declared = script_options(script)
    if declared is not None:
        for token in args[1:]:
            option = token.split("=", 1)[0]
            if option.startswith("-") and option not in declared | {"-h", "--help"}:
                raise AssertionError(f"python {args[0]}: no option {option} (it has {sorted(declared)})")


def _parse_argparse(parser, args: list[str], name: str) -> None:
    if "-h" in args or "--help" in args:
        return
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"{name}: argparse refused {args}") from exc


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M))


def check_command(command: list[str]) -> None:
    """One simple command of a parsed shell block (see the module docstring)."""
    program, args = command[0], command[1:]
    name = Path(program).name
    if re.fullmatch(r"\.venv[\w-]*/bin/[\w.-]+", program):  # a tool of one of the project's environments
        program = name
    if program not in KNOWN_PROGRAMS and name not in ("python", "python3"):
        raise AssertionError(
            f"unknown program {program!r}: check it (tests/docs/blocks.py) or mark the block"
        )
    if name in ("python", "python3"):
        _check_python_command(args)
    elif program == "sagerl":
        check_sagerl_args(args)
    elif program == "make":
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        missing = [t for t in targets if t not in _makefile_targets()]
        if missing:
            raise AssertionError(f"make: no target {missing} in the Makefile")
    elif program in ("bash", "sh"):
        script = ROOT / args[0]
        if not script.is_file():
            raise AssertionError(f"{program} {args[0]}: no such file")
        check_shell_syntax(script.read_text(encoding="utf-8"))
    elif program in ("accelerate", "torchrun"):
        for option in ("--config_file", "--config-file"):
            if option in args:
                config = args[args.index(option) + 1]
                if not (ROOT / config).is_file():
                    raise AssertionError(f"{program}: no config file {config}")
        if "-m" in args:
            _check_python_command(args[args.index("-m") :])
        else:
            script = next((a for a in args if a.endswith(".py")), None)
            if script is not None:
                _check_python_command([script, *args[args.index(script) + 1 :]])


def check_shell_block(block: Block) -> None:
    check_shell_syntax(block.text)
    for command in shell_commands(block.text):
        try:
            check_command(command)
        except AssertionError as exc:
            raise AssertionError(f"{block.where}: `{shlex.join(command)}`: {exc}") from None


# -- python -------------------------------------------------------------------------------------------
def _defines(module_file: Path, name: str) -> bool:
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def check_python_block(block: Block) -> None:
    """compile, and every ``from sagerl... import name`` resolved statically."""
    try:
        tree = ast.parse(block.text, filename=block.where)
    except SyntaxError as exc:
        raise AssertionError(f"{block.where}: {exc}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sagerl":
            module_file = _module_file(node.module)
            if module_file is None:
                raise AssertionError(f"{block.where}: no module {node.module}")
            for alias in node.names:
                if (
                    not _defines(module_file, alias.name)
                    and _module_file(f"{node.module}.{alias.name}") is None
                ):
                    raise AssertionError(f"{block.where}: {node.module} has no {alias.name!r}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sagerl" and _module_file(alias.name) is None:
                    raise AssertionError(f"{block.where}: no module {alias.name}")
