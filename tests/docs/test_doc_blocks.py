"""Every code block of the README and the docs runs or is parsed (tests/docs/blocks.py has the rules), so
a renamed option, a wrong default or an example that raises fails the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.docs import blocks as b

ALL = b.all_blocks()
CODE = [block for block in ALL if block.mode != "none"]
RUN_TIMEOUT_S = 600


def _id(block: b.Block) -> str:
    return f"{block.where}[{block.language}:{block.mode}]"


@pytest.mark.parametrize("block", [x for x in CODE if x.mode in ("parse", "gpu", "run")], ids=_id)
def test_block_parses(block):
    """Run blocks are parsed too: a broken one fails here in a second, before anything runs."""
    if block.language in b.SHELL:
        b.check_shell_block(block)
    elif block.language == "python":
        b.check_python_block(block)
    elif block.language == "yaml":
        yaml.safe_load(block.text)


PAGE_CODE_WIDTH = 88
"""Characters a code line of a page may have: what the site's column shows at 1280 px without scrolling,
beside the copy button (`make docs-check` measures it in a browser)."""


def test_every_code_line_of_the_pages_fits_the_column():
    """Every fenced block of the pages (docs/, any language: commands, output, layouts): the README is read on
    the forge, not on the site."""
    wide = [
        f"{block.where} +{i}: {len(line)} characters"
        for block in ALL
        if block.path.name != "README.md"
        for i, line in enumerate(block.text.splitlines(), 1)
        if len(line) > PAGE_CODE_WIDTH
    ]
    assert not wide, (
        f"code lines wider than {PAGE_CODE_WIDTH} characters (wrap them: a `\\` continuation, a comment on "
        f"its own line): {wide}"
    )


def test_skipped_blocks_say_why():
    unexplained = [x.where for x in CODE if x.mode == "skip" and not x.reason]
    assert not unexplained, f"'<!-- check: skip: WHY -->' needs its reason: {unexplained}"


def _scratch() -> Path:
    """A folder that links every top-level entry of the repository (what a run block writes stays here)."""
    scratch = Path(tempfile.mkdtemp(prefix="sagerl-docs-"))
    for entry in b.ROOT.iterdir():
        if entry.name not in ("runs", ".git"):
            (scratch / entry.name).symlink_to(entry)
    return scratch


_ran: dict[str, str] = {}  # block text -> where it ran first (the README and a page may share a block)


@pytest.mark.parametrize("block", [x for x in CODE if x.mode == "run"], ids=_id)
def test_block_runs(block):
    if block.text in _ran:
        pytest.skip(f"the same block ran at {_ran[block.text]}")
    _ran[block.text] = block.where
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SAGERL_DATA_DIR", str(b.ROOT.parent / "shared" / "data"))
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COLUMNS="80")
    if block.language in b.SHELL:
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    elif block.language == "python":
        command = [sys.executable, "-c", block.text]
    else:
        pytest.skip(f"{block.language} blocks are not run")
    scratch = _scratch()
    try:
        result = subprocess.run(
            command, cwd=scratch, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
    finally:  # a training block writes a model there (1.6 GB): every make test left one in the temp folder
        shutil.rmtree(scratch)
    assert result.returncode == 0, (
        f"{block.where} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )


# -- the checker itself catches drift ------------------------------------------------------------------
def _block(text: str, language: str = "bash") -> b.Block:
    return b.Block(b.ROOT / "README.md", 1, language, "parse", "", text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("sagerl train --preset grpo --steps 3\n", "No such option: --steps"),
        ("sagerl eval -d arith -n many\n", "Invalid value for '-n'"),
        ("sagerl eval --model x\n", "Missing option '--dataset'"),
        ("sagerl analyse support a b\n", "no command 'analyse'"),
        ("sagerl analyze support a --outdir x\n", "No such option: --outdir"),
        ("accelerate launch -m sagerl.cli train --presets grpo\n", "No such option: --presets"),
        ("make docs-serve\n", "no target ['docs-serve']"),
        ("python benchmarks/overhead.py --rounds 2 --tokenz 48\n", "no option --tokenz"),
        ("python -m sagerl.nothing\n", "no such module"),
        ("python -m sagerl.demo --steps three\n", "argparse refused"),
        ("bash recipes/trl/missing.sh\n", "no such file"),
        ("frobnicate --all\n", "unknown program 'frobnicate'"),
        ("sagerl train --preset 'grpo\n", "bash -n"),
    ],
)
def test_shell_drift_is_caught(text, message):
    with pytest.raises(AssertionError, match=None) as error:
        b.check_shell_block(_block(text))
    assert message in str(error.value)


def test_good_shell_passes():
    b.check_shell_block(
        _block(
            "DRY_RUN=1 bash recipes/trl/run.sh bnpo 3b   # a comment\n"
            "sagerl train --preset dapo+branch -m Qwen/Qwen2.5-Math-1.5B \\\n    --set use_vllm=true && sagerl --version\n"
            "python -m sagerl.demo --steps 2 -n 4\n"
        )
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("from sagerl.train import SAGEConfg\n", "has no 'SAGEConfg'"),
        ("from sagerl.trian import SAGEConfig\n", "no module sagerl.trian"),
        ("import sagerl.objective.nope\n", "no module sagerl.objective.nope"),
        ("x = (\n", "was never closed"),
    ],
)
def test_python_drift_is_caught(text, message):
    with pytest.raises(AssertionError) as error:
        b.check_python_block(_block(text, "python"))
    assert message in str(error.value)


def test_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- check: run -->\n```bash\nsagerl --version\n```\n\n```python\nx = 1\n```\n\n"
        "<!-- check: gpu -->\n\n```python\nimport vllm\n```\n\n<!-- check: skip: a template -->\n```bash\nX\n```\n"
        "```text\nout\n```\n"
    )
    found = [(x.language, x.mode, x.reason, x.text) for x in b.blocks(page)]
    assert found == [
        ("bash", "run", "", "sagerl --version\n"),
        ("python", "run", "", "x = 1\n"),
        ("python", "gpu", "", "import vllm\n"),
        ("bash", "skip", "a template", "X\n"),
        ("text", "none", "", "out\n"),
    ]
    page.write_text("<!-- check: runn -->\n```bash\nx\n```\n")
    with pytest.raises(ValueError, match="malformed marker"):
        b.blocks(page)
