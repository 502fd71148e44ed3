"""The canonical kernel mode (sagerl.kernels): its settings and errors, that the cap is real in a process started
under it, and the cross-CPU fingerprint: a short planted run under canonical kernels whose SHA-256s equal the
values recorded below, on whatever CPU runs this test.

Run as a script (``python tests/test_kernels.py OUT``) it does the fingerprint run into OUT and prints its
hashes as JSON; the test starts it in a new process with the canonical environment, as a study worker.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from study_scripts import load_study_script  # tests/ is on sys.path

FINGERPRINT = {
    "reference": "62b2a42af86d65408dded69d83afa12132d2d6d72f98b9427ef45a4043dfc4cf",
    "grpo": "203a7fc07d774f1f9976a652202a4ebd43ca9c8f21c8ca3f74733a12b63fab0d",
    "pkpo": "961064532e9331889a39cde93aa7842b52f7d8ea3a02a7826c11fa8555d75588",
    "samples": "78a9802e9471bbcf80a47a607c3205ab69e4c67b033f4247ee516993bf789826",
}
"""SHA-256s of the fingerprint run under canonical kernels (:func:`fingerprint_run`): the short reference
build's ``model.safetensors``, the GRPO- and PKPO-trained ``model.safetensors`` and the evaluation's samples.
Native kernels on the same Intel Xeon gave other weights (reference ``b2efc449...``, grpo ``33c7782e...``, pkpo
``164efc65...``), and so did MKL's AVX2 branch (``MKL_CBWR=AVX2``: ``c9f11648...``, ``a037d454...``,
``725e6bd6...``), all with the same samples: the weights are what tells kernels apart."""

MATCHED_ON = [
    "Intel(R) Xeon(R) Processor (AMX), torch 2.13.0+cpu, 2026-12-04",
    "AMD EPYC (AVX-512 BF16), torch 2.13.0+cpu, 2026-12-06",
    "AMD EPYC (AVX2), torch 2.13.0+cpu, 2026-12-07",
]
"""CPU kinds (:func:`sagerl.kernels.cpu_kind`) on which the fingerprint run gave :data:`FINGERPRINT`."""

KNOWN_DIFFERENT: dict[str, str] = {}
"""CPU kinds whose canonical kernels are known to give other bytes, with the evidence; the test says so there
instead of failing (none so far)."""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fingerprint_run(out: Path) -> dict[str, str]:
    """Build a short planted reference from the recipe (30 steps on 2 x 1,000 traces, build seed 1); train the
    shipped ``planted-reference`` (b1) 2 steps with GRPO and with PKPO (seed 0, 2 prompts x 8 completions a
    step); sample 4 completions of 6 problems of each planted class from the PKPO model. Returns the SHA-256
    of each model's weights and of the samples (dataset, problem, index, text, in that order)."""
    from sagerl.eval import evaluate
    from sagerl.tasks.planted_model import build_planted_model
    from sagerl.train.run import train

    reference = build_planted_model("reference", out / "reference", build_seed=1, steps=30, traces=1000)
    hashes = {"reference": _sha(reference / "model.safetensors")}
    overrides = {"model": "planted-reference", "dataset": "planted_train", "max_steps": 2, "seed": 0}
    overrides.update(per_device_train_batch_size=16, num_generations=8, learning_rate=1e-3, dtype="float32")
    overrides.update(max_completion_length=24, save_steps=100)
    for preset in ("grpo", "pkpo"):
        model = train(preset, overrides, out / preset, quiet=True)
        hashes[preset] = _sha(Path(model) / "model.safetensors")
    evaluate(
        str(out / "pkpo" / "model"), ["planted_common", "planted_rare"], n=4, limit=6, max_new_tokens=24,
        out=out / "eval", progress=False, dtype="float32",
    )  # fmt: skip
    lines = [json.loads(line) for line in (out / "eval" / "samples.jsonl").read_text().splitlines()]
    rows = sorted((r["dataset"], str(r["problem_id"]), int(r["sample_index"]), r["text"]) for r in lines)
    hashes["samples"] = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    return hashes


# --- the settings -------------------------------------------------------------------------------------------


def test_an_unknown_mode_is_one_error_line_listing_the_modes():
    from sagerl.errors import ConfigError
    from sagerl.kernels import check_mode

    assert check_mode("canonical") == "canonical" and check_mode("native") == "native"
    with pytest.raises(ConfigError) as error:
        check_mode("fast")
    assert str(error.value) == "--kernels 'fast': choose one of canonical, native"
    with pytest.raises(ConfigError, match=r"^x.yaml: kernels 'AVX2': choose one of canonical, native$"):
        check_mode("AVX2", "x.yaml: kernels")


def test_planted_models_default_to_canonical_and_everything_else_to_native():
    from sagerl.kernels import default_mode

    assert default_mode("planted-reference") == "canonical"
    assert default_mode("planted-teacher-b2") == "canonical"
    assert default_mode(None) == "native"  # the embedded SmolLM2
    assert default_mode("HuggingFaceTB/SmolLM2-135M-Instruct") == "native"


def test_the_canonical_environment_caps_every_library_and_fixes_threads():
    from sagerl.kernels import active_mode, environment

    env = environment("canonical", threads=1, base={"PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx512"})
    assert env == {
        "PATH": "/bin",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "MKL_CBWR": "COMPATIBLE",
        "SAGERL_DTYPE": "float32",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    assert active_mode(env) == "canonical"
    assert active_mode({**env, "MKL_CBWR": "AUTO"}) == "native"  # one library left free: not canonical
    assert environment("native", base={"A": "1"}) == {"A": "1"}  # native sets nothing


def test_canonical_on_a_cpu_without_avx2_warns_once_and_runs_natively(monkeypatch):
    from sagerl import kernels

    monkeypatch.setattr(kernels, "_warned", False)
    monkeypatch.setattr(kernels.platform, "machine", lambda: "aarch64")
    assert kernels.canonical_supported() == (False, "the CPU is aarch64, not x86-64")
    with pytest.warns(kernels.KernelModeWarning) as caught:
        assert kernels.effective_mode("canonical") == "native"
        assert kernels.effective_mode("canonical") == "native"
    assert len(caught) == 1
    assert "will not match the published ones" in str(caught[0].message)
    monkeypatch.setattr(kernels.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(kernels, "cpu_flags", lambda: {"sse2", "avx", "fma"})
    assert kernels.canonical_supported() == (False, "the CPU has no AVX2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.effective_mode("native") == "native"  # native never warns


def test_a_library_caller_whose_torch_is_loaded_cannot_switch_in_process(monkeypatch):
    import torch  # noqa: F401  (loaded, as in any test)

    from sagerl import kernels
    from sagerl.errors import ConfigError

    monkeypatch.setattr(kernels, "canonical_supported", lambda: (True, ""))
    for key in kernels.CANONICAL_ENV:
        monkeypatch.delenv(key, raising=False)
    assert kernels.apply("native") == "native"
    with pytest.raises(
        ConfigError, match="torch was loaded in this process before its kernels could be capped"
    ):
        kernels.apply("canonical")
    for key, value in kernels.CANONICAL_ENV.items():
        monkeypatch.setenv(key, value)
    assert kernels.apply("canonical") == "canonical"  # started under the cap already: nothing to do


def test_the_commands_refuse_an_unknown_mode_in_one_line(tmp_path, capsys):
    from sagerl.cli import main

    for args in (
        ["planted", "build", "reference", "--out", str(tmp_path / "m"), "--kernels", "fast"],
        ["eval", "--model", "planted-reference", "--dataset", "planted_rare", "--kernels", "fast"],
        ["train", "--model", "planted-reference", "--kernels", "fast", "--dry-run"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["sagerl: error: --kernels 'fast': choose one of canonical, native"], args
    assert not (tmp_path / "m").exists()


def test_planted_build_check_compares_a_canonical_build_with_the_recorded_one(tmp_path, monkeypatch, capsys):
    """``sagerl planted build --check`` under canonical kernels compares with CANONICAL_BUILDS (the build itself
    stood in for: it takes minutes; the process runs under the cap's environment already)."""
    from sagerl import kernels
    from sagerl.cli import main

    for key, value in kernels.CANONICAL_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(kernels, "canonical_supported", lambda: (True, ""))

    def fake_build(role, out, build_seed):
        out = Path(out)
        out.mkdir()
        (out / "model.safetensors").write_bytes(b"weights")
        (out / "planted.json").write_bytes(b"report")
        return out

    monkeypatch.setattr("sagerl.tasks.planted_model.build_planted_model", fake_build)
    recorded = {
        "files": {"model.safetensors": hashlib.sha256(b"weights").hexdigest(), "planted.json": "0" * 64},
        "cpu": "Test CPU (AVX2)",
    }
    monkeypatch.setitem(kernels.CANONICAL_BUILDS, "reference/1", recorded)
    with pytest.raises(SystemExit) as exit_info:
        main(["planted", "build", "reference", "--out", str(tmp_path / "a"), "--check"])
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "(canonical kernels)" in out
    assert "differs from the recorded canonical build in planted.json (recorded on Test CPU (AVX2))" in out
    recorded["files"]["planted.json"] = hashlib.sha256(b"report").hexdigest()
    main(["planted", "build", "reference", "--out", str(tmp_path / "b"), "--check"])
    assert capsys.readouterr().out.splitlines()[-1] == (
        "identical to the recorded canonical build (recorded on Test CPU (AVX2))"
    )


def test_the_train_command_reads_its_model_without_torch_for_the_default_mode(tmp_path):
    from sagerl.cli.train import _requested_model

    config = tmp_path / "c.yaml"
    config.write_text("model: planted-reference-b2\nlearning_rate: 1.0e-3\n")
    assert _requested_model("planted-teacher", [str(config)], ["model=x"]) == "planted-teacher"
    assert _requested_model(None, [str(config)], []) == "planted-reference-b2"
    assert (
        _requested_model(None, [str(config)], ["beta=0.1", "model = planted-reference"])
        == "planted-reference"
    )
    assert _requested_model(None, [], ["beta=0.1"]) is None


def _canonical_or_skip() -> None:
    from sagerl.kernels import canonical_supported

    ok, why = canonical_supported()
    if not ok:
        pytest.skip(f"canonical kernels cannot run here: {why}")


def test_a_process_started_under_the_canonical_environment_runs_avx2_kernels():
    """The cap is real: torch in a process started with the environment says AVX2, and the machine record
    says canonical."""
    _canonical_or_skip()
    from sagerl.kernels import environment

    code = (
        "import json, torch; from sagerl.determinism import machine_record; r = machine_record(); "
        "print(json.dumps([torch.backends.cpu.get_cpu_capability(), r['kernels'], r['kernel_mode']]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment("canonical", threads=1), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["AVX2", "AVX2", "canonical"]


def test_a_cli_command_started_after_torch_loaded_starts_itself_again_under_the_cap(tmp_path):
    """A sagerl command whose process imported torch first replaces itself with the same command line under
    the canonical environment (here: a script that imports torch, then runs sagerl's CLI)."""
    _canonical_or_skip()
    from sagerl.kernels import CANONICAL_ENV, REEXEC_MARK

    script = tmp_path / "sagerl"  # named as the console script, which apply() may start again
    script.write_text(
        "import json, os, sys, torch\n"
        "from sagerl.kernels import apply\n"
        "print(json.dumps([apply(sys.argv[1]), torch.backends.cpu.get_cpu_capability(),"
        f" os.environ.get({REEXEC_MARK!r}), torch.get_num_threads()]))\n"
    )
    free = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", *CANONICAL_ENV}
    env = {k: v for k, v in __import__("os").environ.items() if k not in free}
    done = subprocess.run([sys.executable, str(script), "canonical"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["canonical", "AVX2", "1", 1]
    # before torch loads, the command sets the environment in its own process (no second start)
    code = (
        "import json, os; from sagerl.kernels import apply; mode = apply('canonical'); import torch; "
        "print(json.dumps([mode, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), "
        f"os.environ.get({REEXEC_MARK!r})]))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["canonical", "AVX2", 1, None]


# --- the fingerprint ----------------------------------------------------------------------------------------


def test_the_fingerprint_run_gives_the_recorded_bytes_on_this_cpu(tmp_path):
    """Cross-CPU check: the short planted run under canonical kernels, in a new process as a study worker
    runs it, gives the SHA-256s recorded in this file. On a CPU kind recorded as known-different the test
    says so (xfail) rather than failing; on a new kind that differs it fails, naming the kind."""
    _canonical_or_skip()
    from sagerl.determinism import machine_record
    from sagerl.kernels import cpu_kind, environment

    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path / "run")],
        env=environment("canonical", threads=1),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    kind = cpu_kind(machine_record())
    if kind in KNOWN_DIFFERENT:
        assert got != FINGERPRINT, f"{kind} now gives the recorded bytes: remove it from KNOWN_DIFFERENT"
        pytest.xfail(f"{kind} is known to give other bytes under canonical kernels: {KNOWN_DIFFERENT[kind]}")
    assert got == FINGERPRINT, (
        f"the canonical fingerprint differs on {kind} (matched on: {'; '.join(MATCHED_ON)}); find what differs "
        "(a kernel the cap misses, a library path: torch.__config__.show(), MKL_VERBOSE=1) and fix it, or record "
        f"the kind in KNOWN_DIFFERENT with the evidence. Got: {got}"
    )


# --- a published run, 100 steps ----------------------------------------------------------------------------

PUBLISHED = Path(__file__).resolve().parents[1] / "studies" / "results" / "pareto-confirm.tar.gz"
PUBLISHED_RUN = "study-pareto-confirm/rare10/cells/grpo/b2/seed-2"
"""A run of the published frontier confirmation (``studies/pareto-confirm.yaml``, canonical kernels, run on the
Intel Xeon with AMX): GRPO, 100 steps, on ``planted-reference-10`` build b2, seed 2; its ``eval/results.json``
is in the archive."""

PUBLISHED_RUN_MATCHED_ON = ["Intel(R) Xeon(R) Processor (AMX)"]
"""CPU kinds on which :data:`PUBLISHED_RUN` reruns to its archived numbers (the kind that ran it)."""

PUBLISHED_RUN_DIFFERENT = {
    "AMD EPYC (AVX-512 BF16)": (
        "2026-12-06: the whole pareto-confirm study (54 runs) rerun here under canonical kernels gave every PKPO "
        "run's numbers (36 of 36) but other numbers for 16 of the 18 GRPO runs (this one: planted_common pass@1 "
        "97.09 -> 97.14%), with the fingerprint's bytes (2 steps) matching; the code of the archive's commit "
        "(eefb632) gives this machine's bytes, so the CPU kind, not the code, moves them; the op is not found"
    ),
    "AMD EPYC (AVX2)": (
        "2026-12-07: its step trace is the AVX-512 EPYC's, byte for byte, at all 100 steps (GRPO's and annealed "
        "PKPO's run: studies/results/traces/), and it reruns this run to that EPYC's numbers, not the archive's "
        "(planted_common pass@1 97.09 -> 97.14% as there; planted_rare pass@32 0 -> 0.78%): the two AMD kinds "
        "agree with each other under canonical kernels and part from the Intel Xeon's archive in the same way"
    ),
}
"""CPU kinds on which :data:`PUBLISHED_RUN` is known to rerun to other numbers, with the evidence."""

PUBLISHED_AMD = PUBLISHED.with_name("pareto-confirm-amd.tar.gz")
"""The same 54 runs under canonical kernels on the AVX2-only AMD EPYC (2026-12-07, ``sagerl study
studies/pareto-confirm.yaml --jobs 2``, 1,024 s), archived with the published archive's files: the numbers the AMD
kinds give (the AVX-512 EPYC's rerun of 2026-12-06 gave the same table rows, and the two kinds' step traces of
:data:`PUBLISHED_RUN` are byte for byte equal)."""
PUBLISHED_AMD_KINDS = ("AMD EPYC (AVX-512 BF16)", "AMD EPYC (AVX2)")
"""CPU kinds on which :data:`PUBLISHED_RUN` must rerun to :data:`PUBLISHED_AMD`'s numbers."""


def _run_numbers(results: dict) -> dict:
    """An evaluation's pass@k, mean token count and truncated share per dataset (``results.json``)."""
    return {
        (name, key): value
        for name, data in results["datasets"].items()
        for key, value in data.items()
        if key.startswith("pass@") or key in ("mean_num_tokens", "truncated_fraction")
    }


def test_the_amd_archive_repeats_every_pkpo_run_and_reference_of_the_intel_one_and_not_grpo():
    """What the two archives of the frontier's confirmation say, run by run: the AMD kinds give every PKPO run
    (both anneals, both settings: 36) and every reference evaluation (6) of the Intel Xeon's archive to every
    digit, and other numbers for 16 of its 18 GRPO runs."""
    import tarfile

    with tarfile.open(PUBLISHED) as intel, tarfile.open(PUBLISHED_AMD) as amd:
        names = sorted(n for n in intel.getnames() if n.endswith("results.json"))
        assert names == sorted(n for n in amd.getnames() if n.endswith("results.json"))
        same: dict[str, list[bool]] = {}
        for name in names:
            kind = name.split("/")[3] if "/cells/" in name else "reference"
            on_intel, on_amd = (_run_numbers(json.load(t.extractfile(name))) for t in (intel, amd))
            same.setdefault(kind, []).append(on_intel == on_amd)
    assert {k: (sum(v), len(v)) for k, v in same.items()} == {
        "grpo": (2, 18),
        "pkpo-anneal": (18, 18),
        "pkpo-anneal@cosine": (18, 18),
        "reference": (6, 6),
    }


def test_a_published_grpo_run_reruns_to_its_archived_numbers(tmp_path):
    """Cross-CPU check at the length of a published run (the fingerprint's 2 steps can agree where 100 do not):
    :data:`PUBLISHED_RUN`'s two commands, under canonical kernels, give its archived pass@k, token counts and
    truncation to every digit (about 40 s). The training records a step trace
    (``studies/published_run_trace.py``): on a CPU kind whose trace is kept, it must equal it at every step;
    against the other kinds' traces, the first tensor that differs is in the test's message."""
    import tarfile

    _canonical_or_skip()
    from sagerl.determinism import machine_record
    from sagerl.kernels import cpu_kind
    from sagerl.train.step_trace import first_difference, read_trace

    script = load_study_script("published_run_trace")
    with tarfile.open(PUBLISHED) as tar:
        archived = json.load(tar.extractfile(f"{PUBLISHED_RUN}/eval/results.json"))
    _, setting, _, cell_name, build, seed = PUBLISHED_RUN.split("/")
    assert (setting, build, seed) == (script.SETTING, script.BUILD, f"seed-{script.SEED}")
    # the run's own commands, as the study prints them (so this test cannot drift from how the study runs it)
    trace = tmp_path / "trace.json.gz"
    folder = script.train_with_trace(cell_name, tmp_path / "study", trace, eval_too=True)
    got = json.loads((folder / "eval" / "results.json").read_text())

    kind = cpu_kind(machine_record())
    mine, kept = read_trace(trace), script.recorded_traces(cell_name)
    if script.kind_slug(kind) in kept:
        found = first_difference(read_trace(kept[script.kind_slug(kind)]), mine)
        assert found is None, f"the published run's trace on {kind} differs from the one kept for it: {found}"
    against = "; ".join(
        f"against {k}: {v}" for k, v in script.compare_with_recorded(cell_name, trace).items()
    )
    if kind in PUBLISHED_AMD_KINDS:
        with tarfile.open(PUBLISHED_AMD) as tar:
            amd = json.load(tar.extractfile(f"{PUBLISHED_RUN}/eval/results.json"))
        assert _run_numbers(got) == _run_numbers(amd), (
            f"{kind} reruns it to other numbers than the AMD archive's: {against}"
        )
    if kind in PUBLISHED_RUN_DIFFERENT:
        assert _run_numbers(got) != _run_numbers(archived), (
            f"{kind} now reruns the published run: update the record"
        )
        pytest.xfail(
            f"{kind} is known to rerun it to other numbers: {PUBLISHED_RUN_DIFFERENT[kind]} ({against})"
        )
    assert _run_numbers(got) == _run_numbers(archived), (
        f"{PUBLISHED_RUN} reruns to other numbers on {kind} (matched on: {'; '.join(PUBLISHED_RUN_MATCHED_ON)}); "
        "record the kind in PUBLISHED_RUN_DIFFERENT with the evidence, or find the kernel that differs "
        f"(the step trace: {against or 'no trace kept yet'}; python studies/published_run_trace.py --save keeps "
        "this kind's)"
    )


if __name__ == "__main__":
    print(json.dumps(fingerprint_run(Path(sys.argv[1]))))
