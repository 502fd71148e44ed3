"""The planted task's shipped models: every build samples the frequencies it was planted with; loading one by
name checks its files' SHA-256 and builds nothing; a build is deterministic whatever the caller's threads."""

from __future__ import annotations

import json
import math
import shutil
import time

import pytest

from sagerl.errors import ModelLoadError
from sagerl.tasks.planted import END_MARKS, REFERENCE_MIX, REFERENCE_MIX_10, STRATEGIES, TEACHER_MIX
from sagerl.tasks.planted_model import (
    MANIFEST_FILE,
    REPORT_FILE,
    SHIPPED_DIR,
    build_planted_model,
    file_sha256,
    planted_model_names,
    read_manifest,
    shipped_builds,
    shipped_planted_model,
    with_build,
)

MIX_OF = {"reference": REFERENCE_MIX, "reference-10": REFERENCE_MIX_10, "teacher": TEACHER_MIX}


def planted_entropy(mix: dict[str, float]) -> float:
    """Entropy (nats) of the first completion token under a mix: each marker's first character."""
    probs = [share * weight for name, share in mix.items() for _, weight in STRATEGIES[name].markers]
    return -sum(p * math.log(p) for p in probs if p > 0)


def report(name: str) -> dict:
    return json.loads((shipped_planted_model(name) / REPORT_FILE).read_text())


def test_three_builds_of_each_role_are_shipped_with_their_hashes():
    manifest = read_manifest()
    assert shipped_builds() == ["b1", "b2", "b3"] and manifest["default_build"] == "b1"
    roles = sorted({e["role"] for e in manifest["models"].values()})
    assert roles == ["reference", "reference-10", "teacher"]
    assert len(manifest["models"]) == 9
    assert {e["build_seed"] for e in manifest["models"].values()} == {1, 2, 3}
    weights = {e["files"]["model.safetensors"] for e in manifest["models"].values()}
    assert len(weights) == 9  # independent builds: no two alike
    for name, entry in manifest["models"].items():
        assert {"model.safetensors", "config.json", "tokenizer.json", REPORT_FILE} <= set(entry["files"])
        assert (SHIPPED_DIR / name / "model.safetensors").stat().st_size < 600_000
    assert "planted-reference" in planted_model_names() and "planted-teacher-b3" in planted_model_names()


@pytest.mark.parametrize("name", sorted(read_manifest()["models"]))
def test_every_build_samples_its_planted_frequencies(name):
    rep = report(name)
    mix = MIX_OF[rep["role"]]
    measured = rep["measured"]["all"]  # 1000 held-out problems, one sample each, temperature 1
    assert rep["planted"] == mix
    for strategy, share in mix.items():
        bound = 4 * math.sqrt(share * (1 - share) / rep["samples"]) + 0.01
        assert abs(measured.get(strategy, 0.0) - share) < bound, (strategy, measured)
    assert measured.get("none", 0.0) < 0.02  # almost every completion is a well-formed trace
    # on common problems only "head" is right: common pass@1 is about its share (carried out right)
    assert mix["head"] - 0.08 < rep["pass@1"]["common"] <= rep["measured"]["common"]["head"]
    # the decision is a many-way choice, and the rare strategy's end mark a second uncertain one
    assert rep["decision_entropy"] == pytest.approx(planted_entropy(mix), abs=0.15)
    assert rep["end_entropy"] == pytest.approx(math.log(len(END_MARKS)), abs=0.2)


@pytest.mark.parametrize("build", ["b1", "b2", "b3"])
def test_the_rare_strategy_is_known_but_rarely_used_and_the_teacher_uses_it_more(build):
    ref, teacher = report(f"planted-reference-{build}"), report(f"planted-teacher-{build}")
    assert 0.005 < ref["measured"]["all"]["tail"] < 0.05
    # carried out right when chosen: rare pass@1 is most of the rare problems' tail share
    assert ref["pass@1"]["rare"] > 0.6 * ref["measured"]["rare"]["tail"]
    assert teacher["measured"]["all"]["tail"] > 8 * ref["measured"]["all"]["tail"]
    assert teacher["pass@1"]["rare"] > 0.25


def test_loading_by_name_uses_the_shipped_files_whatever_the_thread_count(tmp_path, monkeypatch):
    import torch

    from sagerl.models import resolve_model

    monkeypatch.setenv("SAGERL_CACHE", str(tmp_path / "empty-cache"))
    expected = read_manifest()["models"]["planted-reference-b1"]["files"]["model.safetensors"]
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            start = time.perf_counter()
            path = resolve_model("planted-reference")
            assert time.perf_counter() - start < 2.0  # no build
            assert path == str(SHIPPED_DIR / "planted-reference-b1")
            assert file_sha256(SHIPPED_DIR / "planted-reference-b1" / "model.safetensors") == expected
    finally:
        torch.set_num_threads(before)
    assert not (tmp_path / "empty-cache").exists()  # nothing built or written


def test_an_altered_truncated_or_missing_file_is_one_error_naming_it(tmp_path):
    folder = tmp_path / "planted_models"
    shutil.copytree(SHIPPED_DIR, folder)
    weights = folder / "planted-teacher-b2" / "model.safetensors"
    expected = read_manifest(folder)["models"]["planted-teacher-b2"]["files"]["model.safetensors"]
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(ModelLoadError) as error:
        shipped_planted_model("planted-teacher-b2", folder)
    message = str(error.value)
    assert "\n" not in message and str(weights) in message and expected in message
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit flipped
    with pytest.raises(ModelLoadError, match=f"{weights}: SHA-256 .* differs from the manifest's {expected}"):
        shipped_planted_model("planted-teacher-b2", folder)
    weights.unlink()
    with pytest.raises(ModelLoadError, match=f"{weights}: missing .*expected SHA-256 {expected}"):
        shipped_planted_model("planted-teacher-b2", folder)
    assert sorted(p.name for p in (folder / "planted-teacher-b2").iterdir()) == sorted(
        set(read_manifest(folder)["models"]["planted-teacher-b2"]["files"]) - {"model.safetensors"}
    )  # nothing written
    (folder / MANIFEST_FILE).write_text("{")
    with pytest.raises(ModelLoadError, match="manifest.json: the planted models' manifest does not read"):
        shipped_planted_model("planted-teacher-b2", folder)


def test_builds_by_name_and_the_errors_for_unknown_ones():
    assert with_build("planted-teacher", "b2") == "planted-teacher-b2"
    assert with_build("planted-reference-10", "b3") == "planted-reference-10-b3"
    with pytest.raises(
        ModelLoadError, match="unknown build 'b9' of planted-reference; shipped builds: b1, b2, b3"
    ):
        with_build("planted-reference", "b9")
    with pytest.raises(ModelLoadError, match="'gpt2' has no reference builds"):
        with_build("gpt2", "b1")
    with pytest.raises(
        ModelLoadError, match="unknown planted model 'planted-reference-b7'; shipped: planted-"
    ):
        shipped_planted_model("planted-reference-b7")


def test_a_build_gives_the_same_bytes_whatever_the_callers_threads(tmp_path):
    """A short recipe (30 steps on 4,000 traces), built with the caller at 2 threads and at 1: the build
    fixes its own thread count and deterministic kernels, so the bytes are equal (and the caller's
    settings are restored)."""
    import torch

    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    hashes = []
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            folder = build_planted_model(
                "reference", tmp_path / f"t{threads}", build_seed=7, steps=30, traces=2000
            )
            assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
            hashes.append({f: file_sha256(folder / f) for f in ("model.safetensors", REPORT_FILE)})
    finally:
        torch.set_num_threads(before[0])
    assert hashes[0] == hashes[1]
    assert json.loads((tmp_path / "t1" / REPORT_FILE).read_text())["build_seed"] == 7
    with pytest.raises(ValueError, match="exists"):
        build_planted_model("reference", tmp_path / "t1", steps=1, traces=10)
    with pytest.raises(ValueError, match="unknown planted model role 'oracle'"):
        build_planted_model("oracle", tmp_path / "x")


def test_a_misspelled_built_in_name_fails_at_once_with_a_suggestion(tmp_path):
    from sagerl.models import load_config, resolve_model

    with pytest.raises(ModelLoadError, match=r"'planted-referenc' .*did you mean 'planted-reference'"):
        load_config("planted-referenc")  # no hub lookup (which retries for half a minute offline)
    with pytest.raises(ModelLoadError, match=r"did you mean 'smollm2-135m-instruct'"):
        resolve_model("smollm2-135m-instruc")
    for other in ("gpt2", "Qwen/Qwen2.5-Math-7B", "planted-referenc/x", str(tmp_path)):
        assert resolve_model(other) == other  # hub ids, paths and unrelated names pass through


def test_the_cli_lists_and_verifies_the_shipped_models(capsys):
    from sagerl.cli import main

    main(["planted", "list"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("9 models in ") and "default build b1" in out[0] and "1 thread" in out[0]
    rows = {line.split()[0]: line for line in out[1:]}
    assert sorted(rows) == sorted(read_manifest()["models"])
    weights = read_manifest()["models"]["planted-teacher-b2"]["files"]["model.safetensors"]
    assert f"weights {weights[:12]}" in rows["planted-teacher-b2"] and "seed 2" in rows["planted-teacher-b2"]
    main(["planted", "verify"])
    assert capsys.readouterr().out.strip() == "9 shipped planted models: every file matches its SHA-256"


def test_the_cli_build_refuses_an_unknown_role_in_one_line(tmp_path, capsys):
    from sagerl.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["planted", "build", "oracle", "--out", str(tmp_path / "m")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown planted model role 'oracle'" in err[0]
    assert not (tmp_path / "m").exists()
