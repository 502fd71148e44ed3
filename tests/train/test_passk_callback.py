"""PassAtKCallback (sagerl.train.passk_callback): the pass@k logged during training is the one ``sagerl eval``
reports for the model of that step (the same samples, the same counts), it reaches metrics.jsonl and TRL's
log history, and bad settings are one-line errors."""

from __future__ import annotations

import json

import pytest

from sagerl.errors import ConfigError
from sagerl.train.passk_callback import PassAtKCallback


def _even_length(completion, answer, kind="math", problem=None, **kwargs):
    """A grader whose verdicts vary on a random tiny model's output (which never solves arithmetic)."""
    return None, len(completion) % 2 == 0


def test_logged_passk_is_sagerl_evals_of_that_steps_model(tmp_path, tiny_model, monkeypatch):
    import sagerl.tasks
    from sagerl.cli import main
    from sagerl.eval import evaluate

    monkeypatch.setattr(sagerl.tasks, "grade_completion", _even_length)
    texts: list[list[str]] = []
    real_grade = PassAtKCallback._grade

    def keep(self, item, completions):
        texts.append(list(completions))
        return real_grade(self, item, completions)

    monkeypatch.setattr(PassAtKCallback, "_grade", keep)
    out = tmp_path / "run"
    args = ["train", "-m", str(tiny_model), "-o", str(out), "--max-steps", "2"]
    for setting in ("max_completion_length=4", "per_device_train_batch_size=4", "num_generations=4",
                    "gradient_accumulation_steps=1", "limit=8", "learning_rate=0.05",
                    "eval_passk_every=2", "eval_passk_dataset=arith", "eval_passk_n=4", "eval_passk_limit=5",
                    "eval_passk_max_new_tokens=9"):  # fmt: skip
        args += ["--set", setting]
    main(args)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert "eval/pass@1" not in rows[0]  # every 2 steps
    logged = rows[1]
    assert logged["eval/passk_seconds"] > 0

    # sagerl eval of the step-2 model (the final one), same seed, n, problems, length and temperature
    results = evaluate(
        str(out / "model"), ["arith"], n=4, limit=5, max_new_tokens=9, seed=0, out=tmp_path / "eval",
        dtype="float32", progress=False,
    )  # fmt: skip
    for k in (1, 2, 4):
        assert logged[f"eval/pass@{k}"] == pytest.approx(results["average"][f"pass@{k}"], abs=1e-12), k
    assert 0 < logged["eval/pass@1"] < 1  # the grader's verdicts vary: the equality is not 0 = 0
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    by_problem: dict[str, list[str]] = {}
    for rec in sorted(samples, key=lambda r: r["sample_index"]):
        by_problem.setdefault(rec["problem_id"], []).append(rec["text"])
    assert texts == list(by_problem.values())  # the very same completions, problem by problem


def test_plain_trl_grpo_trainer_logs_passk_every_step(tmp_path, tiny_model, monkeypatch):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    import sagerl.tasks

    monkeypatch.setattr(sagerl.tasks, "grade_completion", _even_length)
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "answer": str(i + 1)} for i in range(4)
    ]
    config = GRPOConfig(
        output_dir=str(tmp_path / "trl"), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=4, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
        bf16=False, gradient_checkpointing=False,
    )  # fmt: skip

    def reward(completions, **kwargs):
        return [float(len(str(c)) % 3 == 0) for c in completions]

    trainer = GRPOTrainer(
        model=str(tiny_model), reward_funcs=[reward], args=config, train_dataset=Dataset.from_list(rows)
    )
    callback = PassAtKCallback(rows, n=2, every=1, max_new_tokens=6).attach(trainer)
    trainer.train()
    assert [h["step"] for h in callback.history] == [1, 2]
    logged = [entry for entry in trainer.state.log_history if "eval/pass@1" in entry]
    assert [entry["step"] for entry in logged] == [1, 2]
    assert set(logged[0]) >= {
        "eval/pass@1",
        "eval/pass@2",
        "eval/passk_seconds",
        "loss",
    }  # in the step's log line
    summary = callback.history[-1]["summary"]
    assert logged[-1]["eval/pass@2"] == pytest.approx(summary["average"]["pass@2"])
    assert summary["datasets"]["eval"]["num_problems"] == 4


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="n must be an integer >= 1, got 0"):
        PassAtKCallback("arith", n=0)
    with pytest.raises(ConfigError, match="every must be an integer >= 1"):
        PassAtKCallback("arith", every=-5)
    from sagerl.train.config import SAGEConfig

    with pytest.raises(ConfigError, match="eval_passk_every needs eval_passk_dataset"):
        SAGEConfig(output_dir="/tmp/x", eval_passk_every=10, report_to="none", bf16=False, use_cpu=True)
    with pytest.raises(ConfigError, match="eval_passk_n=0 must be"):
        SAGEConfig(output_dir="/tmp/x", eval_passk_n=0, report_to="none", bf16=False, use_cpu=True)
    callback = PassAtKCallback([{"question": "1+1"}], n=2, trainer=object())
    with pytest.raises(ConfigError, match="row 0 needs 'prompt' and 'answer'"):
        callback.evaluate()


def test_vllm_path_syncs_weights_then_samples_n_per_problem(tiny_model):
    """With TRL's vLLM on, the callback samples through the trainer's engine (a stand-in here: this machine's
    tests do not start vLLM): weights synced once per step, each prompt sent n times, the texts graded n by n."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)

    class Engine:
        def __init__(self):
            self.synced, self.calls = 0, []

        def sync_weights(self):
            self.synced += 1

        def generate(self, prompts, images, num_generations):
            self.calls.append((prompts, num_generations))
            texts = ["\\boxed{2}" if i % 3 == 0 else "\\boxed{5}" for i in range(len(prompts))]
            return None, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], None, None

    engine = Engine()
    trainer = SimpleNamespace(
        use_vllm=True, vllm_generation=engine, _last_loaded_step=-1, state=SimpleNamespace(global_step=3),
        accelerator=SimpleNamespace(process_index=0, num_processes=1), processing_class=tokenizer,
        args=SimpleNamespace(max_completion_length=8, temperature=1.0, top_p=1.0, seed=0),
    )  # fmt: skip
    rows = [{"prompt": f"Say {i}", "answer": "2"} for i in range(2)]
    callback = PassAtKCallback(rows, n=3, every=1, trainer=trainer)
    metrics = callback.evaluate(3)
    assert engine.synced == 1 and trainer._last_loaded_step == 3
    ((prompts, n),) = engine.calls
    assert n == 3 and len(prompts) == 6 and prompts[0] == prompts[1] == prompts[2] != prompts[3]
    # rows 0 and 3 of the six are right: one of three samples for each problem, pass@1 = 1/3, pass@3 = 1
    assert metrics["eval/pass@1"] == pytest.approx(1 / 3) and metrics["eval/pass@3"] == pytest.approx(1.0)
    callback.evaluate(3)
    assert engine.synced == 1  # the same step: no second sync
