"""`sagerl train --config FILE` (YAML of the keys --set takes) and `--dry-run` (check, print, train nothing)."""

from __future__ import annotations

import pytest
import yaml

from sagerl.cli import main
from sagerl.errors import ConfigError
from sagerl.train.run import read_config_file


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_values_are_read_as_set_reads_them(tmp_path):
    path = write(
        tmp_path / "c.yaml",
        "# comment\nlearning_rate: 1e-6\nmax-steps: 7.0\nguide: branch\nuse_vllm: true\nmodel: null\n",
    )
    assert read_config_file(path) == {
        "learning_rate": 1e-6,  # YAML 1.1 reads 1e-6 as a string
        "max_steps": 7,
        "guide": "branch",
        "use_vllm": True,
        "model": None,
    }
    assert read_config_file(write(tmp_path / "empty.yaml", "# nothing\n")) == {}


@pytest.mark.parametrize(
    "text, message",
    [
        ("beta: 0.1\nbetta: 0.2\n", "c.yaml:2: unknown config key 'betta' (did you mean beta"),
        ("beta: 0.1\n\nnum_generations: many\n", "c.yaml:3: config key 'num_generations' expects a int"),
        ("output_dir: x\n", "c.yaml:1: unknown config key 'output_dir'"),
        ("- beta\n- gamma\n", "c.yaml: expected a mapping of config keys (key: value), got list"),
        ("beta: 0.1\ngamma: [1, 2\n", "c.yaml:3: not valid YAML"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path, text, message):
    with pytest.raises(ConfigError) as exc:
        read_config_file(write(tmp_path / "c.yaml", text))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file .*nowhere.yaml does not read"):
        read_config_file(tmp_path / "nowhere.yaml")


def test_dry_run_applies_preset_then_files_then_set_and_writes_nothing(tmp_path, tiny_model, capsys):
    a = write(tmp_path / "a.yaml", "beta: 0.1\ngamma: 0.5\nlimit: 4\n")
    b = write(tmp_path / "b.yaml", "beta: 0.2\n")
    out = tmp_path / "run"
    base = ["train", "--preset", "grpo+branch", "-m", str(tiny_model), "-o", str(out), "--dry-run"]
    main([*base, "--config", str(a), "-c", str(b), "--set", "gamma=0.4", "--max-steps", "3"])
    record = yaml.safe_load(capsys.readouterr().out)
    assert record["preset"] == "grpo+branch" and record["run"]["limit"] == 4
    fields = record["trainer_all_fields"]
    assert (fields["beta"], fields["gamma"], fields["max_steps"]) == (0.2, 0.4, 3)
    assert fields["tau"] == 1.2 and fields["guide"] == "branch"  # from the preset
    assert not out.exists()


def test_dry_run_reports_what_training_would_reject(tmp_path, tiny_model, capsys):
    bad = write(tmp_path / "bad.yaml", "guide: branch\nbeta: 0.0\n")
    with pytest.raises(SystemExit) as exc:
        main(["train", "-m", str(tiny_model), "-o", str(tmp_path / "run"), "-c", str(bad), "--dry-run"])
    assert exc.value.code == 2
    assert "needs beta > 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
