"""The ``sagerl`` command line: usage errors, ``--version``, and the warnings it silences (issue 9)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from sagerl import __version__
from sagerl.cli import main
from sagerl.cli.warning_filters import HARMLESS_WARNINGS, silence_harmless_warnings


def sagerl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sagerl.cli", *args], capture_output=True, text=True, timeout=120
    )


# The three inputs of issue 9 (fault 7), in a real process: usage line, one error line, status 2.
@pytest.mark.parametrize(
    ("args", "usage", "error"),
    [
        (["eval", "--bogus"], "Usage: sagerl eval [OPTIONS]", "No such option: --bogus"),
        (["nosuchcmd"], "Usage: sagerl [OPTIONS] COMMAND [ARGS]...", "No such command 'nosuchcmd'"),
        (["train", "--preset"], "Usage: sagerl train [OPTIONS]", "Option '--preset' requires an argument"),
    ],
)
def test_usage_errors_in_a_subprocess(args: list[str], usage: str, error: str) -> None:
    proc = sagerl(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].strip() == usage
    assert lines[1].startswith("sagerl: error: ") and error in lines[1]
    assert lines[1].endswith(f"(see 'sagerl{' ' + args[0] if args[0] != 'nosuchcmd' else ''} --help')")


# The rest of the kind, in this process: every usage error is two lines and status 2.
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["eval", "-d", "aime24", "-n", "many"], "Invalid value for '-n' / '--num-samples'"),
        (["eval", "-d", "aime24", "--temperature", "hot"], "Invalid value for '--temperature'"),
        (["eval"], "Missing option '--dataset'"),
        (["eval", "-d"], "Option '-d' requires an argument"),
        (["train", "--max-steps", "1.5"], "Invalid value for '--max-steps'"),
        (["train", "--resume", "yes"], "unexpected extra argument(s) (yes)"),
        (["compare"], "Missing argument"),
        (["compare", "a", "--out"], "Option '--out' requires an argument"),
        (["--bogus"], "No such option: --bogus"),
        (["train", "--list-presets=3"], "Option '--list-presets' does not take a value"),
    ],
)
def test_every_usage_error_is_two_lines_and_status_2(args: list[str], error: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2, captured.err
    assert lines[0].startswith("Usage: sagerl")
    assert lines[1].startswith("sagerl: error: ") and error in lines[1]


def test_version() -> None:
    proc = sagerl("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"sagerl {__version__}"


def test_help_and_no_arguments(capsys) -> None:
    for args in ([], ["--help"]):
        main(args)  # returns normally: status 0
        out = capsys.readouterr().out
        assert "train" in out and "eval" in out and "compare" in out and "--version" in out


def test_known_harmless_warnings_are_silenced_and_others_still_show() -> None:
    examples = {
        r"`gradient_checkpointing` is deprecated and will be removed in v6": (
            "`gradient_checkpointing` is deprecated and will be removed in v6. Use `activation_checkpointing` "
            "instead."
        ),
        r"`is_gradient_checkpointing` is deprecated and will be removed in v6": (
            "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use "
            "`is_activation_checkpointing` instead."
        ),
        r"'pin_memory' argument is set as true but no accelerator is found": (
            "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory "
            "won't be used."
        ),
    }
    assert set(examples) == {message for _, message in HARMLESS_WARNINGS}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silence_harmless_warnings()
        for category, message in HARMLESS_WARNINGS:
            warnings.warn(examples[message], category, stacklevel=1)
        # the same categories with other messages, and other categories, still show
        warnings.warn(
            "`some_other_option` is deprecated and will be removed in v6.", FutureWarning, stacklevel=1
        )
        warnings.warn("the answer-verification helper restarted", UserWarning, stacklevel=1)
        warnings.warn("'pin_memory' is set as true", RuntimeWarning, stacklevel=1)
        warnings.warn("dropped 3 rows without an answer", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == [
        "`some_other_option` is deprecated and will be removed in v6.",
        "the answer-verification helper restarted",
        "'pin_memory' is set as true",
        "dropped 3 rows without an answer",
    ]


def test_the_cli_installs_the_filters_and_shows_other_warnings() -> None:
    code = (
        "import warnings, sys\n"
        "from sagerl.cli import app, main\n"
        "@app.command('warn-test')\n"
        "def warn_test():\n"
        "    warnings.warn(\"'pin_memory' argument is set as true but no accelerator is found\", UserWarning)\n"
        "    warnings.warn('`gradient_checkpointing` is deprecated and will be removed in v6.', FutureWarning)\n"
        "    warnings.warn('a warning users must see', UserWarning)\n"
        "main(['warn-test'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "a warning users must see" in proc.stderr
    assert "pin_memory" not in proc.stderr and "gradient_checkpointing" not in proc.stderr


def test_compare_writes_a_plot_only_with_out(tmp_path, monkeypatch, capsys) -> None:
    """Issue 9, fault 8: ``compare`` wrote compare.png into the current folder; now only ``--out`` writes."""
    from test_eval_run import fabricate_run  # tests/ is on sys.path (pytest rootdir import)

    a = fabricate_run(tmp_path / "base", 4, {"arith": 0.1})
    b = fabricate_run(tmp_path / "sage", 4, {"arith": 0.2})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    main(["compare", str(a), str(b)])
    assert list(cwd.iterdir()) == []
    assert "--out FILE.png" in capsys.readouterr().out
    main(["compare", str(a), str(b), "--out", "cmp.png"])
    assert (cwd / "cmp.png").stat().st_size > 1000
    assert "plot: cmp.png" in capsys.readouterr().out
