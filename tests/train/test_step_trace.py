"""The step trace (sagerl.train.step_trace): recording changes no number, it is the same for the same run, and
first_difference names the first tensor that differs, in the order the run computed them; the traces kept for
the published run (studies/results/traces) read back whole."""

from __future__ import annotations

import copy
import hashlib
import subprocess
from pathlib import Path

import pytest
import torch
from study_scripts import load_study_script  # tests/ is on sys.path

from sagerl.train.run import STEP_TRACE_ENV, train
from sagerl.train.step_trace import Difference, digest, first_difference, read_trace

SMALL = {
    "model": "planted-reference",
    "dataset": "planted_train",
    "per_device_train_batch_size": 16,  # 2 prompts x 8
    "gradient_accumulation_steps": 1,
    "num_generations": 8,
    "max_completion_length": 24,
    "learning_rate": 1e-3,
    "dtype": "float32",
    "save_steps": 100,
    "max_steps": 2,
    "seed": 0,
}


def _weights(model: Path) -> str:
    return hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The same 2-step GRPO run three times: without a trace, and twice with one."""
    root = tmp_path_factory.mktemp("trace")
    mp = pytest.MonkeyPatch()
    try:
        plain = train("grpo", SMALL, root / "plain", quiet=True)
        runs = []
        for name in ("a", "b"):
            mp.setenv(STEP_TRACE_ENV, str(root / f"{name}.json.gz"))
            runs.append((train("grpo", SMALL, root / name, quiet=True), read_trace(root / f"{name}.json.gz")))
    finally:
        mp.undo()
    return plain, runs


def test_recording_a_trace_changes_no_weight_and_repeats_exactly(traced):
    plain, [(model_a, trace_a), (model_b, trace_b)] = traced
    assert _weights(model_a) == _weights(plain) == _weights(model_b)
    assert first_difference(trace_a, trace_b) is None
    assert [s["step"] for s in trace_a["steps"]] == [1, 2]


def test_a_trace_holds_the_policy_the_reference_and_every_parameter(traced):
    _, [(model, trace), _] = traced
    names = set(trace["names"])
    # the rollouts' decode steps and the loss's passes through the policy; the reference's passes (beta > 0)
    assert {"policy:inputs", "policy.lm_head", "policy.model.layers.0.self_attn.q_proj"} <= names
    assert {"reference:inputs", "reference.model.norm"} <= names
    # what the loss is given and what it gives
    assert {"loss inputs.advantages", "loss inputs.completion_ids", "loss"} <= names
    step = trace["steps"][0]
    # the gradients before and after clipping, last parameter first (the order the backward reaches them)
    assert list(step["raw_gradients"])[0] == "model.norm.weight"
    assert list(step["raw_gradients"])[-1] == "model.embed_tokens.weight"
    assert step["gradients"].keys() == step["raw_gradients"].keys()
    # the weights' digest: over the trained model's parameters, in order (the last step's is the saved model's)
    from transformers import AutoModelForCausalLM

    from sagerl.train.step_trace import _combined

    saved = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    assert trace["steps"][-1]["weights"] == f"{_combined(digest(p) for _, p in saved.named_parameters()):08x}"
    assert trace["steps"][0]["weights"] != trace["steps"][-1]["weights"]
    # a step holds whole forward calls: the rollout's decode steps and the loss's passes, each through every
    # module of its model
    policy_modules = [n for n in trace["names"] if n.startswith("policy.")]
    counts = [sum(trace["names"][m] == "policy.model.norm" for m in s["modules"]) for s in trace["steps"]]
    assert all(c >= 2 for c in counts), counts
    assert all(len(s["events"]) >= 2 * len(policy_modules) for s in trace["steps"])


def test_digest_tells_dtype_shape_and_bytes_apart():
    x = torch.arange(6, dtype=torch.float32)
    assert digest(x) == digest(x.clone())
    assert digest(x) != digest(x.view(2, 3))
    assert digest(x) != digest(x.double())
    y = x.clone()
    y[3] = torch.nextafter(y[3], torch.tensor(10.0))  # one unit in the last place
    assert digest(x) != digest(y)
    assert digest(torch.tensor(1.5)) == digest(torch.tensor([1.5]).squeeze())
    assert digest(x[::2]) == digest(x[::2].contiguous())
    assert 0 <= digest(x) < 2**32


def _trace(steps=3, events=4) -> dict:
    names = ["policy:inputs", "policy.a", "policy.b", "policy.(model)"]
    step = {
        "modules": list(range(events)),
        "events": [10 + i for i in range(events)],
        "raw_gradients": {"b.weight": "0000000b", "a.weight": "0000000a"},
        "grad_norm": "00000001",
        "gradients": {"b.weight": "0000000c", "a.weight": "0000000d"},
        "weights": "0000000e",
    }
    return {"names": names, "steps": [{**copy.deepcopy(step), "step": s + 1} for s in range(steps)]}


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda t: None, None),
        (lambda t: t["steps"][1]["events"].__setitem__(2, 99), Difference(2, "forward", "policy.b", 2)),
        (lambda t: t["steps"][2]["raw_gradients"].update({"b.weight": "ff"}), Difference(3, "gradient", "b.weight")),
        (lambda t: t["steps"][0].update(grad_norm="2"), Difference(1, "grad_norm", "")),
        (lambda t: t["steps"][0]["gradients"].update({"a.weight": "ff"}), Difference(1, "clipped gradient", "a.weight")),
        (lambda t: t["steps"][1].update(weights="ff"), Difference(2, "weights", "")),
        (lambda t: t["steps"].pop(), Difference(-1, "length", "3 steps against 2")),
    ],
)  # fmt: skip
def test_first_difference_names_the_first_tensor_that_differs(change, expected):
    a, b = _trace(), _trace()
    change(b)
    assert first_difference(a, b) == expected


def test_first_difference_takes_the_earliest_of_several_and_orders_forward_before_gradients():
    a, b = _trace(), _trace()
    b["steps"][1]["weights"] = "ff"
    b["steps"][1]["raw_gradients"]["a.weight"] = "ff"
    b["steps"][1]["events"][3] = 0
    b["steps"][2]["events"][0] = 0
    assert first_difference(a, b) == Difference(2, "forward", "policy.(model)", 3)
    b["steps"][1]["events"].append(5)
    b["steps"][1]["modules"].append(1)
    assert first_difference(a, b).step == 2
    c = _trace()
    c["steps"][0]["events"].append(5)
    c["steps"][0]["modules"].append(1)
    assert first_difference(a, c) == Difference(1, "length", "4 forward events against 5")
    assert "the gradient norm" in str(Difference(1, "grad_norm", ""))


def test_the_kept_traces_of_the_published_run_read_back_whole():
    script = load_study_script("published_run_trace")
    kept = script.recorded_traces("grpo")
    assert "amd-epyc-avx-512-bf16" in kept
    assert script.kind_slug("AMD EPYC (AVX-512 BF16)") == "amd-epyc-avx-512-bf16"
    for cell in ("grpo", "pkpo-anneal@cosine"):
        for path in script.recorded_traces(cell).values():
            trace = read_trace(path)
            assert [s["step"] for s in trace["steps"]] == list(range(1, 101)), path
            assert all(len(s["modules"]) == len(s["events"]) > 0 for s in trace["steps"]), path
    with pytest.raises(ValueError, match="--cell 'ppo': choose one of grpo"):
        script.published_cell("ppo")


def test_the_published_run_is_traced_with_its_own_commands_and_an_experiment_changes_one_variable(
    monkeypatch, tmp_path
):
    """The commands are the study's (canonical kernels, one thread, the trace's variable set); with ``env`` the
    canonical environment keeps every other variable and the command no longer resets them (``--kernels
    native`` over that environment)."""
    script = load_study_script("published_run_trace")
    calls = []

    def fake_run(argv, env, **kwargs):
        calls.append((argv, env))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(script.subprocess, "run", fake_run)
    folder = script.train_with_trace("grpo", tmp_path / "s", tmp_path / "t.json.gz", eval_too=True)
    assert folder == tmp_path / "s" / "cells" / "grpo" / "b2" / "seed-2"
    (train_argv, env), (eval_argv, _) = calls
    assert train_argv[1:4] == ["-m", "sagerl.cli", "train"] and eval_argv[3] == "eval"
    assert train_argv[train_argv.index("--kernels") + 1] == "canonical"
    assert "--max-steps" in train_argv and train_argv[train_argv.index("--max-steps") + 1] == "100"
    assert env[STEP_TRACE_ENV] == str(tmp_path / "t.json.gz")
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_CBWR"] == "COMPATIBLE"
    assert env["OMP_NUM_THREADS"] == "1"
    calls.clear()
    script.train_with_trace("grpo", tmp_path / "s", tmp_path / "t.json.gz", env={"MKL_CBWR": "AVX2"})
    [(argv, env)] = calls
    assert argv[argv.index("--kernels") + 1] == "native"
    assert env["MKL_CBWR"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"


def test_a_difference_says_what_differs_in_words():
    assert str(Difference(3, "forward", "loss inputs.advantages", 40)) == (
        "step 3: loss inputs.advantages (forward event 40 of the step; every event before it equal)"
    )
    assert str(Difference(1, "forward", "policy.lm_head", 7)).startswith(
        "step 1: the output of policy.lm_head (forward event 7 of the step; every event before it equal"
    )
    assert str(Difference(2, "weights", "")) == (
        "step 2: the weights after the optimizer step (every gradient equal)"
    )
