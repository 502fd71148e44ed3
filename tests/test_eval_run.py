"""The evaluation runner: outputs, values, resume after a crash, settings checks, CLI smoke test, compare."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from sagerl.cli import main
from sagerl.errors import ConfigError, SagerlError
from sagerl.eval import evaluate, pass_at_k
from sagerl.eval.samplers import Completion, Sampler, sample_seed
from sagerl.eval.samples import SAMPLES_FILE, load_samples

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"

PROBLEMS = [
    {"id": "always", "problem": "What is 1 + 1?", "answer": "2"},
    {"id": "never", "problem": "What is 2 + 2?", "answer": "4"},
    {"id": "half", "problem": "What is 3 + 3?", "answer": "6"},
]


class PlainTokenizer:
    """A tokenizer stand-in without a chat template (prompts are rendered as plain text)."""

    chat_template = None


class FakeSampler(Sampler):
    """Deterministic sampler: problem "always" is always right, "never" never, "half" when seed is even.

    Counts how many samples it generates; raises after ``fail_after`` generate calls, if set.
    """

    name = "fake"

    def __init__(self, chunk_size: int = 4, fail_after: int | None = None) -> None:
        self.tokenizer = PlainTokenizer()
        self.chunk_size = chunk_size
        self.fail_after = fail_after
        self.calls = 0
        self.samples = 0

    def generate(self, prompts, n, *, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, sample_seeds=None):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated crash")
        self.calls += 1
        out = []
        for prompt, seeds in zip(prompts, sample_seeds, strict=True):
            problem = next(p for p in PROBLEMS if p["problem"] in prompt)
            row = []
            for s in seeds:
                right = problem["id"] == "always" or (problem["id"] == "half" and s % 2 == 0)
                answer = problem["answer"] if right else "-1"
                row.append(Completion(f"The answer is \\boxed{{{answer}}}. (seed {s})", 7, "stop"))
                self.samples += 1
            out.append(row)
        return out


def expected_half_count(n: int, seed: int, dataset: str = "toy") -> int:
    return sum(sample_seed(seed, dataset, "half", j) % 2 == 0 for j in range(n))


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS), encoding="utf-8")
    return path


def run(toy: Path, out: Path, sampler: Sampler, **kw) -> dict:
    args = {"n": 8, "max_new_tokens": 16, "seed": 3, "progress": False}
    args.update(kw)
    return evaluate("fake-model", [str(toy)], out=out, sampler=sampler, **args)


def test_evaluate_values_and_outputs(toy, tmp_path):
    out = tmp_path / "run"
    sampler = FakeSampler()
    res = run(toy, out, sampler)
    assert sampler.samples == 3 * 8
    c_half = expected_half_count(8, 3)
    assert 0 < c_half < 8  # the seeds really vary
    entry = res["datasets"]["toy"]
    for k in (1, 2, 4, 8):
        want = (1.0 + 0.0 + pass_at_k(8, c_half, k)) / 3
        assert entry[f"pass@{k}"] == pytest.approx(want)
        assert res["average"][f"pass@{k}"] == pytest.approx(want)  # one dataset: average = it
        lo, hi = entry["ci"][f"pass@{k}"]
        assert lo <= entry[f"pass@{k}"] <= hi
    assert entry["mean_accuracy"] == pytest.approx((8 + c_half) / 24)
    assert entry["n"] == 8 and entry["num_problems"] == 3
    assert entry["mean_num_tokens"] == 7 and entry["truncated_fraction"] == 0
    meta = res["meta"]
    assert meta["ks"] == [1, 2, 4, 8]
    for key in ("model", "n", "temperature", "top_p", "max_new_tokens", "seed", "backend", "sagerl_version"):
        assert key in meta
    assert meta["backend"] == "fake" and meta["model"] == "fake-model"
    assert meta["started_at"] and meta["finished_at"]
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["datasets"]["toy"]["pass@8"] == pytest.approx(entry["pass@8"])
    assert (out / "passk.png").stat().st_size > 1000
    from sagerl.atomic_files import default_file_mode

    for name in ("results.json", "passk.png", "eval_config.json"):  # atomic writes keep normal permissions
        assert (out / name).stat().st_mode & 0o777 == default_file_mode()
    lines = (out / SAMPLES_FILE).read_text().splitlines()
    assert len(lines) == 24
    rec = json.loads(lines[0])
    assert set(rec) >= {
        "dataset",
        "problem_id",
        "sample_index",
        "text",
        "extracted",
        "correct",
        "num_tokens",
        "finish_reason",
    }
    assert rec["extracted"] == "2" and rec["correct"] is True and rec["finish_reason"] == "stop"


def test_resume_after_crash_never_recomputes(toy, tmp_path):
    out = tmp_path / "run"
    # Crash after 2 generate calls of 4 samples each (8 of 24 samples written).
    with pytest.raises(KeyboardInterrupt):
        run(toy, out, FakeSampler(chunk_size=4, fail_after=2))
    before = load_samples(out / SAMPLES_FILE)
    assert len(before) == 8
    # A crash in the middle of a write leaves a truncated last line.
    with open(out / SAMPLES_FILE, "a", encoding="utf-8") as f:
        f.write('{"dataset": "toy", "problem_id": "half", "sample_in')
    sampler = FakeSampler(chunk_size=5)
    res = run(toy, out, sampler)
    assert sampler.samples == 24 - 8  # finished samples were not generated again
    assert res["meta"]["samples_generated_this_call"] == 16
    after = load_samples(out / SAMPLES_FILE)
    assert len(after) == 24
    assert (
        len((out / SAMPLES_FILE).read_text().splitlines()) == 24
    )  # the truncated line is gone, no duplicates
    for key, rec in before.items():
        assert after[key] == rec
    # Same numbers as an uninterrupted run.
    fresh = run(toy, tmp_path / "fresh", FakeSampler(chunk_size=7))
    for k in (1, 2, 4, 8):
        assert res["datasets"]["toy"][f"pass@{k}"] == fresh["datasets"]["toy"][f"pass@{k}"]
    assert res["datasets"]["toy"]["ci"] == fresh["datasets"]["toy"]["ci"]
    # A third run has nothing to do: no model or sampler call at all.
    idle = FakeSampler(fail_after=0)
    again = run(toy, out, idle)
    assert idle.calls == 0 and again["meta"]["samples_generated_this_call"] == 0


def test_raising_n_adds_samples_and_limit_restricts(toy, tmp_path):
    out = tmp_path / "run"
    run(toy, out, FakeSampler(), n=4)
    more = FakeSampler()
    res = run(toy, out, more, n=6)
    assert more.samples == 3 * 2
    assert res["meta"]["ks"] == [1, 2, 4, 6]
    small = FakeSampler(fail_after=0)
    res = run(toy, out, small, n=4, limit=2)
    assert small.calls == 0
    assert res["datasets"]["toy"]["num_problems"] == 2
    assert res["datasets"]["toy"]["pass@1"] == pytest.approx(0.5)  # "always" and "never"


@pytest.mark.parametrize(
    "change", [{"temperature": 0.7}, {"top_p": 0.9}, {"max_new_tokens": 32}, {"seed": 4}, {"few_shot": 1}]
)
def test_refuses_to_mix_sampling_settings(toy, tmp_path, change):
    out = tmp_path / "run"
    run(toy, out, FakeSampler(), n=2)
    with pytest.raises(SagerlError, match="other settings"):
        run(toy, out, FakeSampler(), n=2, **change)


def test_settings_may_change_while_no_sample_was_written(toy, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run(toy, out, FakeSampler(fail_after=0), n=2)  # e.g. a failed start: config written, no samples
    res = run(toy, out, FakeSampler(), n=2, temperature=0.5)
    assert res["meta"]["temperature"] == 0.5
    assert json.loads((out / "eval_config.json").read_text())["settings"]["temperature"] == 0.5


def test_refuses_other_model(toy, tmp_path):
    out = tmp_path / "run"
    run(toy, out, FakeSampler(), n=2)
    with pytest.raises(SagerlError, match="model"):
        evaluate(
            "other-model",
            [str(toy)],
            n=2,
            out=out,
            sampler=FakeSampler(),
            progress=False,
            max_new_tokens=16,
            seed=3,
        )


def test_invalid_options(toy, tmp_path):
    with pytest.raises(ConfigError):
        run(toy, tmp_path / "a", FakeSampler(), n=0)
    with pytest.raises(
        ConfigError, match=r"--dtype 'float64': choose one of auto, float32, bfloat16, float16"
    ):
        run(toy, tmp_path / "e", FakeSampler(), dtype="float64")  # refused even when a sampler is given
    assert not (tmp_path / "e").exists()
    with pytest.raises(ConfigError):
        run(toy, tmp_path / "b", FakeSampler(), few_shot=99)
    with pytest.raises(ConfigError):
        run(toy, tmp_path / "c", FakeSampler(), top_p=0.0)
    with pytest.raises(SagerlError, match="nope.jsonl"):
        evaluate(None, [str(tmp_path / "nope.jsonl")], n=2, out=tmp_path / "d", progress=False)


# ---- the engine a folder's samples were drawn with (issue 34 #4) -------------------------------------------


class EngineSampler(FakeSampler):
    """:class:`FakeSampler` that says its dtype and backend, as the real samplers do."""

    def __init__(self, dtype: str = "bfloat16", name: str = "hf", **kw) -> None:
        super().__init__(**kw)
        self.dtype, self.name = dtype, name


def folder_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (
            dict(dtype="bfloat16"),
            dict(dtype="float32"),
            r"dtype 'bfloat16' -> 'float32'\); resume with --dtype bfloat16 \(a study: eval.dtype\), or pass --out",
        ),
        (
            dict(name="hf"),
            dict(name="vllm"),
            r"backend 'hf' -> 'vllm'\); resume with --backend hf \(a study: eval.backend\), or pass --out",
        ),
        (
            dict(kernels="AVX512"),
            dict(kernels="AVX2"),
            r"kernels 'AVX512' -> 'AVX2'\); resume with a CPU where torch runs AVX512 kernels "
            r"\(ATEN_CPU_CAPABILITY=avx512 caps one that has more\), or pass --out",
        ),
        (
            dict(kernel_mode="canonical"),
            dict(kernel_mode="native"),
            r"kernel_mode 'canonical' -> 'native'\); resume with --kernels canonical \(a study: kernels\), or pass --out",
        ),
    ],
)
def test_resume_refuses_to_draw_with_another_dtype_backend_or_kernels(
    toy, tmp_path, monkeypatch, first, second, message
):
    """Raising n in a folder must not add samples of another engine: one line naming the key, both values,
    how to match it and --out; nothing sampled, nothing written. Without new samples to draw, nothing mixes, and
    another engine may rewrite results.json (which still names the recorded one)."""
    import torch

    def sampler(opts: dict) -> EngineSampler:
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: opts.get("kernels", "AVX2"))
        monkeypatch.setattr("sagerl.kernels.active_mode", lambda: opts.get("kernel_mode", "native"))
        return EngineSampler(**{k: v for k, v in opts.items() if k not in ("kernels", "kernel_mode")})

    out = tmp_path / "run"
    run(toy, out, sampler(first), n=2)
    before = folder_bytes(out)
    other = sampler(second)
    with pytest.raises(ConfigError, match=message) as info:
        run(toy, out, other, n=4)
    assert str(out) in str(info.value) and "6 samples" in str(info.value) and "\n" not in str(info.value)
    assert other.calls == 0 and folder_bytes(out) == before
    res = run(toy, out, sampler(second), n=2)  # nothing left to draw: nothing to mix
    recorded = {"dtype": "bfloat16", "backend": "hf", "kernels": "AVX2", "kernel_mode": "native", **first}
    recorded["backend"] = recorded.pop("name", "hf")
    assert {k: res["meta"][k] for k in ("dtype", "backend", "kernels", "kernel_mode")} == recorded
    assert len(load_samples(out / SAMPLES_FILE)) == 6


def test_cli_resume_whose_dtype_auto_resolves_otherwise_is_one_line_before_the_model_loads(
    toy, tmp_path, tiny_model, monkeypatch, capsys
):
    """A folder begun in bfloat16 (``auto`` on a CPU with bf16 units), resumed where ``auto`` is float32:
    refused before the model loads, exit status 2, one line."""
    import sagerl.eval.runner

    out = tmp_path / "run"
    evaluate(str(tiny_model), [str(toy)], n=2, out=out, sampler=EngineSampler("bfloat16"), progress=False)
    before = folder_bytes(out)

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(sagerl.eval.runner, "make_sampler", no_model)
    monkeypatch.setenv("SAGERL_DTYPE", "float32")
    argv = ["eval", "--model", str(tiny_model), "-d", str(toy), "-n", "4", "--out", str(out), "--no-progress"]
    assert cli(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dtype 'bfloat16' -> 'float32'" in err[0], err
    assert "--dtype bfloat16" in err[0] and "--out" in err[0]
    assert folder_bytes(out) == before


def test_results_record_what_drew_the_samples_not_what_the_last_call_asked(toy, tmp_path, monkeypatch):
    """results.json names the resolved dtype of every call that drew samples, with their counts and times,
    also when the last call (nothing left to draw) asked for ``auto``; a crashed call is counted too."""
    import time

    import torch

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):  # 8 of 24 samples, then a crash
        run(toy, out, EngineSampler("bfloat16", chunk_size=4, fail_after=2))
    slow = EngineSampler("bfloat16")
    real = slow.generate

    def generate(*args, **kwargs):
        time.sleep(0.02)
        return real(*args, **kwargs)

    slow.generate = generate
    run(toy, out, slow)
    res = evaluate(
        "fake-model", [str(toy)], n=8, out=out, progress=False, max_new_tokens=16, seed=3, dtype="auto"
    )
    meta = res["meta"]
    assert meta["samples_generated_this_call"] == 0
    assert (meta["dtype"], meta["backend"], meta["kernels"]) == ("bfloat16", "hf", "AVX512")  # not "auto"
    calls = meta["sampling_calls"]
    assert [(c["dtype"], c["samples"], c.get("interrupted", False)) for c in calls] == [
        ("bfloat16", 8, True),
        ("bfloat16", 16, False),
    ]
    assert calls[1]["elapsed_s"] >= 0.02 * 4 and meta["sampling_s"] == pytest.approx(
        calls[0]["elapsed_s"] + calls[1]["elapsed_s"], abs=1e-3
    )
    config = json.loads((out / "eval_config.json").read_text())
    assert config["engine"] == {
        "dtype": "bfloat16",
        "backend": "hf",
        "kernels": "AVX512",
        "kernel_mode": "native",
    }
    assert config["calls"] == calls


def test_a_killed_call_is_counted_by_the_next(toy, tmp_path):
    """SIGKILL leaves the last call without its end: the next call gives it the samples no other accounts for."""
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run(toy, out, EngineSampler("float32", chunk_size=4, fail_after=3))
    config = json.loads((out / "eval_config.json").read_text())
    for key in ("finished_at", "samples", "elapsed_s", "interrupted"):  # as a killed process leaves it
        config["calls"][-1].pop(key)
    (out / "eval_config.json").write_text(json.dumps(config))
    res = run(toy, out, EngineSampler("float32"))
    assert [(c["samples"], c.get("interrupted", False)) for c in res["meta"]["sampling_calls"]] == [
        (12, True),
        (12, False),
    ]


def make_legacy(out: Path, results_meta: dict) -> None:
    """Turn a run folder into one written before sagerl recorded engines: no ``engine`` or ``calls`` in
    eval_config.json, and ``results_meta`` over results.json's meta (what those versions wrote)."""
    config = json.loads((out / "eval_config.json").read_text())
    for key in ("engine", "calls", "machine"):
        config.pop(key)
    (out / "eval_config.json").write_text(json.dumps(config))
    results = json.loads((out / "results.json").read_text())
    meta = {k: v for k, v in results["meta"].items() if k not in ("kernels", "sampling_calls", "sampling_s")}
    results["meta"] = {**meta, **results_meta}
    (out / "results.json").write_text(json.dumps(results))


def test_a_folder_from_before_engines_were_recorded_resumes_with_one_warning(toy, tmp_path):
    """An old folder whose last call drew nothing (its results.json says dtype "auto", the request) does not
    record what drew its samples: a resume is allowed (refusing would strand every such folder) with one
    warning naming what is unknown and --out; the new call's engine is recorded from then on. Where the old
    results.json shows one call drew every sample, its dtype and backend are known and compared."""
    out = tmp_path / "run"
    run(toy, out, EngineSampler("bfloat16"), n=2)
    make_legacy(out, {"dtype": "auto", "samples_generated_this_call": 0})
    with pytest.warns(
        UserWarning, match=r"does not record the dtype / backend / kernels / kernel_mode its 6 samples"
    ) as seen:
        res = run(toy, out, EngineSampler("float32"), n=4)
    assert len(seen) == 1 and "--out" in str(seen[0].message)
    calls = res["meta"]["sampling_calls"]
    assert [(c["dtype"], c["samples"], c.get("unrecorded", False)) for c in calls] == [
        (None, 6, True),
        ("float32", 6, False),
    ]
    assert res["meta"]["dtype"] is None  # the folder's samples are not known to share one dtype
    with pytest.raises(ConfigError, match=r"dtype 'float32' -> 'bfloat16'"):  # recorded from then on
        run(toy, out, EngineSampler("bfloat16"), n=6)

    known = tmp_path / "known"
    run(toy, known, EngineSampler("bfloat16"), n=2)
    make_legacy(known, {"dtype": "bfloat16", "samples_generated_this_call": 6})
    with pytest.raises(ConfigError, match=r"dtype 'bfloat16' -> 'float32'"):
        run(toy, known, EngineSampler("float32"), n=4)
    with pytest.warns(UserWarning, match=r"does not record the kernels / kernel_mode its 6 samples"):
        res = run(toy, known, EngineSampler("bfloat16"), n=4)
    assert res["meta"]["dtype"] == "bfloat16" and res["meta"]["sampling_calls"][0]["dtype"] == "bfloat16"


def test_load_samples_tolerates_only_a_truncated_last_line(tmp_path):
    path = tmp_path / SAMPLES_FILE
    good = {"dataset": "d", "problem_id": "p", "sample_index": 0, "correct": True}
    path.write_text(json.dumps(good) + "\n" + '{"dataset": "d", "prob')
    assert list(load_samples(path)) == [("d", "p", 0)]
    assert path.read_text() == json.dumps(good) + "\n"
    # a complete last record without its newline is kept, and the newline added
    path.write_text(json.dumps(good))
    assert len(load_samples(path)) == 1 and path.read_text().endswith("\n")
    # a broken line in the middle is corruption: refuse, naming the line
    path.write_text(json.dumps(good) + "\nnot json\n" + json.dumps({**good, "sample_index": 1}) + "\n")
    with pytest.raises(SagerlError, match=r"samples.jsonl:2"):
        load_samples(path)


# ---- with a real (tiny random) model and the shared data ------------------------------------------------


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from sagerl.models import save_tiny_random_model

    return save_tiny_random_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def shared_data(monkeypatch):
    if not (DATA_DIR / "aime24.jsonl").is_file():
        pytest.skip(f"shared data not found at {DATA_DIR}")
    monkeypatch.setenv("SAGERL_DATA_DIR", str(DATA_DIR))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return DATA_DIR


def cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_cli_eval_smoke_on_two_aime_problems(tiny_model, shared_data, tmp_path, capsys):
    out = tmp_path / "evalrun"
    argv = [
        "eval",
        "--model",
        str(tiny_model),
        "--dataset",
        "aime24",
        "--limit",
        "2",
        "-n",
        "2",
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli(*argv) == 0
    printed = capsys.readouterr().out
    assert "pass@1" in printed and "results.json" in printed
    for name in ("samples.jsonl", "results.json", "passk.png", "eval_config.json"):
        assert (out / name).is_file(), name
    res = json.loads((out / "results.json").read_text())
    assert set(res) == {"meta", "datasets", "average"}
    entry = res["datasets"]["aime24"]
    assert {"pass@1", "pass@2", "ci", "n", "num_problems", "mean_accuracy"} <= set(entry)
    assert set(entry["ci"]) == {"pass@1", "pass@2"}
    assert entry["n"] == 2 and entry["num_problems"] == 2
    assert {"pass@1", "pass@2", "ci"} <= set(res["average"])
    assert res["meta"]["backend"] == "hf" and res["meta"]["max_new_tokens"] == 8
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 4
    assert {(r["problem_id"], r["sample_index"]) for r in recs} == {
        ("aime-2024-I-01", 0),
        ("aime-2024-I-01", 1),
        ("aime-2024-I-02", 0),
        ("aime-2024-I-02", 1),
    }
    for r in recs:
        assert 1 <= r["num_tokens"] <= 8 and r["finish_reason"] in ("stop", "length")
        assert r["correct"] is False  # a random 2-layer model does not solve AIME
    # Rerun: resumes, nothing generated.
    assert cli(*argv) == 0
    assert "0 samples generated now" in capsys.readouterr().out
    # Different settings in the same folder: one-line error, exit 2.
    assert cli(*argv[:-1], "--temperature", "0.5", "--no-progress") == 2
    assert "other settings" in capsys.readouterr().err


def test_cli_eval_static_backend_writes_the_hf_backends_samples(tiny_model, shared_data, tmp_path, capsys):
    """``--backend static`` (sagerl's static decode loop): the same completions, token counts and grades as
    ``--backend hf`` on the same seeds, recorded as the static backend (a resume with the other is refused)."""
    runs = {}
    for backend in ("hf", "static"):
        out = tmp_path / backend
        argv = ["eval", "--model", str(tiny_model), "--dataset", "aime24", "--limit", "3", "-n", "4"]
        argv += ["--max-new-tokens", "8", "--backend", backend, "--out", str(out), "--no-progress"]
        assert cli(*argv) == 0
        runs[backend] = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        assert json.loads((out / "results.json").read_text())["meta"]["backend"] == backend
    keys = ("problem_id", "sample_index", "text", "num_tokens", "finish_reason", "correct")
    assert len(runs["hf"]) == 12
    assert [{k: r[k] for k in keys} for r in runs["static"]] == [{k: r[k] for k in keys} for r in runs["hf"]]
    capsys.readouterr()
    more = [a if a != "4" else "5" for a in argv[:-4]]  # one more sample a problem, to be drawn by hf
    assert cli(*more, "hf", "--out", str(tmp_path / "static"), "--no-progress") == 2
    assert "backend 'static' -> 'hf'" in capsys.readouterr().err


def fabricate_run(folder: Path, n: int, values: dict[str, float]) -> Path:
    """A results.json as `sagerl eval` writes it (pass@k = 1 - (1 - v)^k, made-up)."""
    from sagerl.eval.passk import ks_up_to
    from sagerl.eval.results import write_results

    def entry(v: float) -> dict:
        e = {f"pass@{k}": 1 - (1 - v) ** k for k in ks_up_to(n)}
        e["ci"] = {key: [max(0.0, x - 0.05), min(1.0, x + 0.05)] for key, x in e.items()}
        return {**e, "n": n, "num_problems": 10, "mean_accuracy": v}

    datasets = {name: entry(v) for name, v in values.items()}
    avg = entry(float(np.mean(list(values.values()))))
    write_results(folder, {"meta": {"model": folder.name, "n": n}, "datasets": datasets, "average": avg})
    return folder


def test_cli_compare_two_runs(tmp_path, capsys):
    a = fabricate_run(tmp_path / "base", 16, {"aime24": 0.1, "amc23": 0.3})
    b = fabricate_run(tmp_path / "grpo", 16, {"aime24": 0.2, "amc23": 0.4})
    plot = tmp_path / "cmp.png"
    assert cli("compare", str(a), str(b), "--out", str(plot)) == 0
    printed = capsys.readouterr().out
    assert "base" in printed and "grpo" in printed and "pass@16" in printed
    assert "10.0" in printed and "20.0" in printed  # pass@1 of aime24, in %
    assert plot.stat().st_size > 1000

    from sagerl.eval import compare_runs

    cmp = compare_runs([a, b], out=None, ks=[1, 4])
    assert cmp["columns"][:2] == [("aime24", 1), ("aime24", 4)]
    assert cmp["rows"]["grpo"][0] == pytest.approx(0.2)
    assert cmp["rows"]["base"][-2] == pytest.approx(0.2)  # average pass@1 of base
    assert cmp["cis"]["grpo"][0] == pytest.approx((0.15, 0.25))


def test_compare_single_dataset_has_no_average_column(tmp_path):
    from sagerl.eval import compare_runs
    from sagerl.eval.compare import render_table

    a = fabricate_run(tmp_path / "before", 8, {"arith": 0.05})
    b = fabricate_run(tmp_path / "after", 8, {"arith": 0.10})
    cmp = compare_runs([a, b], out=None, ks=[1, 8])
    assert cmp["columns"] == [("arith", 1), ("arith", 8)]
    from sagerl.tables import render_text

    text = render_text(render_table(cmp), width=120)  # one data set: its name in the title, not per column
    assert "pass@k (%) on arith" in text and "arith\n" not in text and text.count("pass@1") == 1
    assert re.search(r"^before\s+5\.0 \[0\.0, 10\.0\]\s+33\.7 \[28\.7, 38\.7\]$", text, re.M), text
    assert re.search(r"^after\s+10\.0 \[5\.0, 15\.0\]\s", text, re.M), text
    narrow = render_text(render_table(cmp), width=30)  # CIs on their own row rather than wrapped
    assert max(len(line) for line in narrow.splitlines()) <= 30 and "[0.0, 10.0]" in narrow


def test_cli_compare_missing_results_names_the_folder(tmp_path, capsys):
    a = fabricate_run(tmp_path / "ok", 4, {"aime24": 0.5})
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    assert cli("compare", str(a), str(empty), "--out", str(tmp_path / "x.png")) == 2
    err = capsys.readouterr().err
    assert "not-a-run" in err and "results.json" in err and len(err.strip().splitlines()) == 1


def test_atomic_write_leaves_the_old_file_on_failure(tmp_path):
    from sagerl.atomic_files import atomic_path, atomic_write_text

    target = tmp_path / "results.json"
    atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half a file")
        raise RuntimeError("crash while writing")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left behind
