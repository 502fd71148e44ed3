"""SAGETrainer with issue 23's methods: the advantages of a rollout equal sagerl.objective's on inputs recomputed
independently of TRL (texts, answers, partitions, counts, the scheduled k), and bad settings fail at config time."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from datasets import Dataset
from test_trainer_loss import GROUP, rollout

from sagerl.errors import ConfigError
from sagerl.objective import ADVANTAGE_INPUTS, compute_advantages, lexical_partition, partition_from_keys
from sagerl.train import SAGEConfig, SAGETrainer
from sagerl.train.run import build_trainer_config, resolve_config


class TextRecordingReward:
    """Deterministic rewards with spread inside groups; records the texts and token ids it scored."""

    __name__ = "correctness"

    def __init__(self):
        self.calls: list[tuple[list[float], list[str], list[list[int]]]] = []

    def __call__(self, completions, completion_ids, **kwargs):
        rewards = [float(sum(ids) % 3 == 0) for ids in completion_ids]
        self.calls.append((rewards, list(completions), [list(ids) for ids in completion_ids]))
        return rewards


def first_character(text: str, row: dict) -> str | None:
    """A final answer for the tiny random model's text: its first character (None for an empty text)."""
    return text[:1] or None


def make(tiny_model, tmp_path, **overrides):
    args = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=10,
        temperature=0.9,
        beta=0.05,
        report_to="none",
        seed=3,
        max_steps=5,
        bf16=False,
        loss_type="grpo",
    )
    args.update(overrides)
    reward = TextRecordingReward()
    dataset = Dataset.from_dict({"prompt": ["What is 2 + 3?", "What is 7 - 4?"], "answer": ["5", "3"]})
    trainer = SAGETrainer(
        model=str(tiny_model),
        reward_funcs=[reward],
        args=SAGEConfig(**args),
        train_dataset=dataset,
        final_answer=first_character,
    )
    trainer.model.train()
    trainer.state.max_steps = 5
    trainer.current_gradient_accumulation_steps = 1
    return trainer, reward


PROMPTS = ["What is 2 + 3?"] * GROUP + ["What is 7 - 4?"] * GROUP  # the rows of rollout()


def expected_inputs(args, reward, step_calls):
    """The estimator's inputs recomputed from what the reward function saw (every rollout so far, for counts)."""
    rewards, texts, ids = reward.calls[-1]
    inputs = {}
    answers = [first_character(t, {}) for t in texts]
    needs = ADVANTAGE_INPUTS[args.resolved_advantage_estimator]
    if "clusters" in needs:
        if args.partition == "lexical":
            inputs["clusters"] = lexical_partition(ids, GROUP, args.partition_ngram, args.partition_threshold)
        else:
            inputs["clusters"] = partition_from_keys(answers, GROUP)
    if "answers" in needs:
        inputs["answers"] = partition_from_keys(answers, GROUP)
    if "counts" in needs:
        seen = Counter(
            (prompt, first_character(t, {}))
            for _, call_texts, _ in reward.calls[-step_calls:]
            for prompt, t in zip(PROMPTS, call_texts, strict=True)
            if first_character(t, {}) is not None
        )
        inputs["counts"] = torch.tensor(
            [seen[(p, a)] if a is not None else 0 for p, a in zip(PROMPTS, answers, strict=True)],
            dtype=torch.float64,
        )
    return torch.tensor(rewards), inputs


CASES = {
    "rs-grpo": dict(advantage_estimator="rs_grpo", risk_beta=4.0),
    "passk-mix per group": dict(advantage_estimator="passk_mix", passk_k=2),
    "passk-mix constant": dict(advantage_estimator="passk_mix", passk_k=2, passk_mix_weight=0.3),
    "darling answer": dict(advantage_estimator="darling", partition="answer", scale_rewards="none"),
    "darling lexical": dict(
        advantage_estimator="darling", partition="lexical", partition_threshold=0.1, partition_ngram=1
    ),
    "ucb-mean": dict(advantage_estimator="ucb_mean", outcome_coef=0.7),
    "ucb-con": dict(advantage_estimator="ucb_con", outcome_b0=0.25),
    "outcome-batch": dict(advantage_estimator="outcome_batch"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rollout_advantages_equal_the_objective(case, tiny_model, tmp_path):
    trainer, reward = make(tiny_model, tmp_path, **CASES[case])
    args = trainer.args
    rollouts = 2 if args.resolved_advantage_estimator.startswith("ucb") else 1  # counts carry over
    for _ in range(rollouts):
        inputs = rollout(trainer)
    rewards, extra = expected_inputs(args, reward, rollouts)
    params = {**args.advantage_params, "scale": args.scale_rewards, **extra}
    advantages = compute_advantages(args.resolved_advantage_estimator, rewards, GROUP, **params)
    torch.testing.assert_close(inputs["advantages"], advantages.float(), rtol=1e-5, atol=1e-6)
    assert advantages.abs().sum() > 0
    if "clusters" in extra:  # the partition is not trivial on this rollout
        assert len(set(extra["clusters"].tolist())) < 2 * GROUP or case == "darling answer"
        plain = compute_advantages("darling", rewards, GROUP, clusters=torch.arange(2 * GROUP), scale="none")
        assert not torch.allclose(advantages.float(), plain.float())
    if "counts" in extra:
        assert extra["counts"].max() >= 2  # an answer seen in both rollouts
        assert len(trainer._outcome_counts) > 0
    assert torch.isfinite(trainer.compute_loss(trainer.model, inputs))


def test_the_k_schedule_follows_the_optimizer_step(tiny_model, tmp_path):
    trainer, reward = make(
        tiny_model, tmp_path, advantage_estimator="pkpo", passk_k=4, passk_k_schedule="linear", passk_k_end=1
    )
    for step, k in ((0, 4), (3, 2), (5, 1)):  # round(4 − 3·s/5)
        trainer.state.global_step = step
        inputs = rollout(trainer)
        rewards = torch.tensor(reward.calls[-1][0])
        torch.testing.assert_close(inputs["advantages"], compute_advantages("pkpo", rewards, GROUP, k=k))
        assert trainer._metrics["train"]["passk_k"][-1] == k


def test_the_strategy_oracle_needs_the_planted_task(tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="partition='strategy' .* needs a planted training set"):
        make(tiny_model, tmp_path, advantage_estimator="darling", partition="strategy")


BASE = dict(output_dir="/tmp/unused", num_generations=GROUP, per_device_train_batch_size=GROUP, use_cpu=True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(advantage_estimator="rs_grpo", risk_beta=0.0), r"risk_beta=0.0 must be a number in \(0, inf\)"),
        (dict(risk_beta=-1.0), r"risk_beta=-1.0 must be a number in \(0, inf\)"),
        (dict(risk_beta=float("nan")), r"risk_beta=nan must be a number in \(0, inf\)"),
        (dict(risk_beta=float("inf")), r"risk_beta=inf must be a number in \(0, inf\)"),
        (
            dict(advantage_estimator="pkpo", passk_k=4, passk_k_schedule="linear", passk_k_end=5),
            r"passk_k_end=5 must be an integer in \[1, 4\] \(num_generations=4\): k stays in it at every step of "
            "passk_k_schedule='linear'",
        ),
        (
            dict(advantage_estimator="passk", passk_k=2, passk_k_schedule="cosine", passk_k_end=0),
            r"passk_k_end=0 must be an integer in \[1, inf\)",
        ),
        (
            dict(advantage_estimator="passk", passk_k=6, passk_k_schedule="step", passk_k_end=1),
            r"passk_k=6 must be an integer in \[1, 4\] \(num_generations=4\): k stays in it at every step",
        ),
        (dict(advantage_estimator="passk", passk_k_schedule="linear"), "needs passk_k_end"),
        (
            dict(
                advantage_estimator="pkpo",
                passk_k=1,
                passk_k_schedule="linear",
                passk_k_end=4,
                pkpo_baseline="loo",
            ),
            "needs passk_k <= num_generations - 1 = 3 at every step of the schedule",
        ),
        (dict(passk_k_schedule="linear", passk_k_end=1), "reads no k"),
        (dict(advantage_estimator="passk", passk_k_end=2), "passk_k_end=2 is read by a passk_k_schedule"),
        (
            dict(advantage_estimator="passk", passk_k_schedule="step", passk_k_end=1, passk_k_switch=0.0),
            r"passk_k_switch=0.0 must be a number in \(0, 1\]",
        ),
        (dict(passk_k_schedule="exp"), "passk_k_schedule='exp' is not one of constant, cosine, linear, step"),
        (dict(passk_mix_weight=1.5), r"passk_mix_weight=1.5 must be a number in \[0, 1\]"),
        (dict(passk_mix_weight=float("nan")), r"passk_mix_weight=nan must be a number in \[0, 1\]"),
        (dict(partition="semantic"), "partition='semantic' is not one of answer, lexical, strategy"),
        (dict(partition_threshold=1.0), r"partition_threshold=1.0 must be a number in \[0, 1\)"),
        (dict(partition_ngram=0), r"partition_ngram=0 must be an integer in \[1, inf\)"),
        (dict(outcome_coef=-0.5), r"outcome_coef=-0.5 must be a number in \[0, inf\)"),
        (dict(outcome_b0=1.5), r"outcome_b0=1.5 must be a number in \[0, 1\]"),
        (
            dict(
                advantage_estimator="ucb_con",
                dynamic_sampling=True,
                overlong_buffer_len=4,
                max_completion_length=8,
            ),
            "needs binary rewards",
        ),
        (
            dict(
                advantage_estimator="passk_mix",
                dynamic_sampling=True,
                overlong_buffer_len=4,
                max_completion_length=8,
            ),
            "needs binary rewards",
        ),
        (
            dict(advantage_estimator="darling", dynamic_sampling=True, max_num_gen_batches=3),
            "reads the completions' text",
        ),
    ],
)
def test_bad_settings_fail_at_config_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        SAGEConfig(**{**BASE, **overrides})


def test_a_format_reward_is_refused_for_the_binary_methods(tmp_path):
    for preset in ("ucb-con", "passk-mix", "passk"):
        with pytest.raises(ConfigError, match="needs binary rewards .* set format_reward_weight=0"):
            build_trainer_config(resolve_config(preset, {"format_reward_weight": 0.5}), tmp_path)
    build_trainer_config(resolve_config("rs-grpo", {"format_reward_weight": 0.5}), tmp_path)  # any rewards


def _train(tiny_model, out, max_steps, resume=None):
    args = SAGEConfig(
        output_dir=str(out),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_completion_length=8,
        learning_rate=1e-3,
        lr_scheduler_type="constant",  # the same learning rate whatever max_steps, as sagerl train's
        beta=0.05,
        report_to="none",
        seed=3,
        max_steps=max_steps,
        save_steps=1,
        bf16=False,
        use_cpu=True,
        advantage_estimator="ucb_con",
        disable_tqdm=True,
    )
    # 8 prompts, 4 steps an epoch: the run is resumed inside an epoch, as sagerl train's resume test
    dataset = Dataset.from_dict(
        {
            "prompt": [f"What is {a} + {a + 1}?" for a in range(8)],
            "answer": [str(2 * a + 1) for a in range(8)],
        }
    )
    trainer = SAGETrainer(
        model=str(tiny_model),
        reward_funcs=[TextRecordingReward()],
        args=args,
        train_dataset=dataset,
        final_answer=first_character,
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_outcome_counts_are_saved_and_resumed_exactly(tiny_model, tmp_path):
    """A run stopped after step 2 and resumed from its checkpoint ends with the counts and the weights of a run
    that was never interrupted."""
    import json

    from sagerl.train.trainer import OUTCOME_COUNTS_FILE

    straight = _train(tiny_model, tmp_path / "straight", 3)
    _train(tiny_model, tmp_path / "split", 2)
    saved = json.loads((tmp_path / "split" / "checkpoint-2" / OUTCOME_COUNTS_FILE).read_text())
    assert saved == json.loads((tmp_path / "straight" / "checkpoint-2" / OUTCOME_COUNTS_FILE).read_text())
    assert saved["counts"], "the run counted no answers"
    resumed = _train(tiny_model, tmp_path / "split", 3, resume=str(tmp_path / "split" / "checkpoint-2"))
    assert resumed._outcome_counts.counts == straight._outcome_counts.counts
    calls = straight.reward_funcs[0].calls
    assert len(calls) == 3  # one rollout per step
    answered = sum(1 for _, texts, _ in calls for t in texts if first_character(t, {}) is not None)
    assert sum(straight._outcome_counts.counts.values()) == answered  # each completion counted once
    for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), name
    # a checkpoint without the counts cannot be resumed silently with empty ones
    (tmp_path / "split" / "checkpoint-2" / OUTCOME_COUNTS_FILE).unlink()
    with pytest.raises(ConfigError, match="has no sage_outcome_counts.json"):
        _train(tiny_model, tmp_path / "split", 3, resume=str(tmp_path / "split" / "checkpoint-2"))


@pytest.mark.parametrize(
    "partition, expected",
    [("strategy", [0, 0, 1, -1, 0, 1, 0, 1]), ("answer", [0, 0, 1, -1, 0, 1, 1, 1])],
)
def test_the_planted_partitions_read_the_strategy_label_or_the_answer(
    partition, expected, tiny_model, tmp_path
):
    """On planted completions: the oracle groups by the stated strategy, the answer partition by the boxed digit
    (``head 9.`` boxes the last digit with the head marker: wrong, and in the tail's answer cluster)."""
    problems = ["[b] 3 8 5 9 = ", "[g] 3 8 5 9 = "]
    dataset = Dataset.from_dict(
        {"prompt": problems, "answer": ["3", "9"], "kind": ["planted"] * 2, "problem": problems}
    )
    args = SAGEConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2 * GROUP, num_generations=GROUP,
        report_to="none", use_cpu=True, advantage_estimator="darling", partition=partition,
    )  # fmt: skip
    trainer = SAGETrainer(
        model=str(tiny_model), reward_funcs=[TextRecordingReward()], args=args, train_dataset=dataset
    )
    texts = ["head 3. \\boxed{3}", "first 3. \\boxed{3}", "tail 9! \\boxed{9}", "no trace"]
    texts += ["lead 3. \\boxed{3}", "end 9; \\boxed{9}", "head 9. \\boxed{9}", "back 9: \\boxed{9}"]
    rows = [
        {"prompt": p, "answer": a, "kind": "planted", "problem": p}
        for p, a in zip(problems, "39", strict=True)
    ]
    rows = [rows[0]] * GROUP + [rows[1]] * GROUP
    stub = {"completion_ids": torch.ones(8, 3, dtype=torch.long), "completion_mask": torch.ones(8, 3)}
    out = trainer._text_inputs(stub, texts, rows, GROUP, "train", ("clusters",), "cpu")
    assert out["clusters"].tolist() == expected
