"""SAGETrainer with issue 23's methods: the advantages of a rollout equal sagerl.objective's on inputs recomputed
independently of TRL (texts, answers, partitions, counts, the scheduled k), and bad settings fail at config time."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from datasets import Dataset
from test_trainer_loss import GROUP, rollout

from sagerl.errors import ConfigError
from sagerl.objective import (
    ADVANTAGE_INPUTS,
    compute_advantages,
    lexical_partition,
    partition_from_keys,
    zero_advantage_mask,
)
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
    "maxpo": dict(advantage_estimator="maxpo", passk_k=2),
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
    # max_steps = 5, a rollout per step: the last one at step 4, where k = passk_k_end
    for step, k in ((0, 4), (3, 2), (4, 1)):  # round(4 − 3·s/4)
        trainer.state.global_step = step
        inputs = rollout(trainer)
        rewards = torch.tensor(reward.calls[-1][0])
        torch.testing.assert_close(inputs["advantages"], compute_advantages("pkpo", rewards, GROUP, k=k))
        assert trainer._metrics["train"]["passk_k"][-1] == k


def rollout_steps(max_steps: int, steps_per_generation: int, accumulation: int, iterations: int) -> list[int]:
    """The optimizer steps at which TRL's loop rolls out, by running its counter: a rollout at every micro-batch
    whose index is a multiple of steps_per_generation × num_iterations (GRPOTrainer._prepare_inputs)."""
    return [
        m // accumulation
        for m in range(max_steps * accumulation)
        if m % (steps_per_generation * iterations) == 0
    ]


@pytest.mark.parametrize("accumulation, iterations", [(1, 1), (2, 1), (1, 2), (4, 1)])
def test_the_last_rollout_step_is_the_loops(accumulation, iterations):
    from sagerl.train.trainer import last_rollout_step

    for max_steps in range(1, 13):
        for spg in range(1, 6):
            expected = rollout_steps(max_steps, spg, accumulation, iterations)[-1]
            assert last_rollout_step(max_steps, spg, accumulation, iterations) == expected
    assert (
        last_rollout_step(4, 1, 1) == 3
        and last_rollout_step(4, 2, 1) == 2
        and last_rollout_step(5, 2, 1) == 4
    )


def test_every_schedule_reaches_its_end_at_the_last_rollout(tiny_model, tmp_path):
    """For every kind and every steps_per_generation, k is passk_k at the first rollout and passk_k_end at the last;
    the guide's strength is 1 at step 0 and guide_schedule_min at the last optimizer step."""
    trainer, _ = make(
        tiny_model, tmp_path, advantage_estimator="pkpo", passk_k=4, passk_k_schedule="linear", passk_k_end=1
    )
    args = trainer.args
    for kind in ("linear", "cosine", "step"):
        for spg in (1, 2, 3, 4):
            for max_steps in range(2, 10):
                steps = rollout_steps(max_steps, spg, 1, 1)
                trainer.state.max_steps = max_steps
                args.passk_k_schedule, args.steps_per_generation = kind, spg
                args.guide_schedule, args.guide_schedule_min = kind, 0.25
                trainer._k_schedule = trainer._guide_schedule = None
                ks = []
                for step in steps:
                    trainer.state.global_step = step
                    ks.append(trainer._passk_k())
                assert ks[0] == 4 and (len(steps) == 1 or ks[-1] == 1), (kind, spg, max_steps, ks)
                assert all(1 <= k <= 4 for k in ks)
                trainer.state.global_step = 0
                assert trainer._guide_strength() == 1.0
                trainer.state.global_step = max_steps - 1
                assert trainer._guide_strength() == pytest.approx(0.25), (kind, spg, max_steps)


@pytest.mark.parametrize("spg, expected", [(1, {1: 4, 2: 3, 3: 2, 4: 1}), (2, {1: 4, 3: 1})])
def test_a_four_step_run_ends_at_passk_k_end(spg, expected, tiny_model, tmp_path):
    """Four optimizer steps of linear k 4 -> 1 and a linear guide 1 -> 0, read back from metrics.jsonl: k is 1 at the
    last rollout (step 4 with a rollout per step; step 3 with one per two steps) and the guide's strength 0 at the
    last step (before: k ended at 2 and 3, the strength at 0.25)."""
    import json

    from sagerl.train.metrics import MetricsJSONLCallback

    out = tmp_path / "run"
    args = SAGEConfig(
        output_dir=str(out),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        steps_per_generation=spg,
        max_completion_length=6,
        learning_rate=1e-3,
        beta=0.05,
        guide="branch",
        guide_schedule="linear",
        guide_schedule_min=0.0,
        report_to="none",
        seed=3,
        max_steps=4,
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        use_cpu=True,
        disable_tqdm=True,
        advantage_estimator="pkpo",
        passk_k=4,
        passk_k_schedule="linear",
        passk_k_end=1,
    )
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
        callbacks=[MetricsJSONLCallback(out / "metrics.jsonl")],
    )
    trainer.train()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert {r["step"]: r["passk_k"] for r in rows if "passk_k" in r} == expected
    assert [r["guide/strength"] for r in rows] == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])


class FirstGroupWrongReward(TextRecordingReward):
    """The first group all wrong, the others as TextRecordingReward."""

    def __call__(self, completions, completion_ids, **kwargs):
        rewards = super().__call__(completions, completion_ids, **kwargs)
        rewards[:GROUP] = [0.0] * GROUP
        self.calls[-1] = (rewards, *self.calls[-1][1:])
        return rewards


def test_dynamic_sampling_keeps_the_all_wrong_groups_an_outcome_bonus_acts_on(tiny_model, tmp_path):
    """UCB-Con with dynamic sampling: the all-wrong group has its bonus (advantages c·(b − b₀) ≠ 0) and stays in the
    loss; the groups whose advantages are all zero leave (before: the filter read the accuracy and dropped it)."""
    # b₀ = 0.25: after one rollout N ≤ 4 (a group of 4), and no N in 0..4 has a bonus of 0.25 (N = 16 would), so
    # every completion's term b − b₀ is nonzero
    trainer, _ = make(
        tiny_model, tmp_path, advantage_estimator="ucb_con", outcome_b0=0.25, dynamic_sampling=True
    )
    trainer.reward_funcs[0] = reward = FirstGroupWrongReward()
    inputs = rollout(trainer)
    rewards, extra = expected_inputs(trainer.args, reward, 1)
    assert rewards[:GROUP].tolist() == [0.0] * GROUP
    advantages = compute_advantages("ucb_con", rewards, GROUP, **trainer.args.advantage_params, **extra)
    assert advantages[:GROUP].abs().min() > 0  # the bonus acts on every completion of the all-wrong group
    keep = zero_advantage_mask(advantages, GROUP)
    assert inputs["sage_keep"].tolist() == keep.float().tolist()
    assert inputs["sage_keep"][:GROUP].tolist() == [1.0] * GROUP


def test_answers_are_one_cluster_when_the_grader_holds_them_equal(tiny_model, tmp_path):
    """The default final answer is the answer's value (math-verify's parse, exact rationals): 1/2, 0.5 and \\frac12
    are one answer for the outcome counts and for DARLING's answer partition (before: three)."""
    args = SAGEConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2 * GROUP, num_generations=GROUP,
        report_to="none", use_cpu=True, advantage_estimator="ucb_mean",
    )  # fmt: skip
    dataset = Dataset.from_dict({"prompt": ["p", "q"], "answer": ["1/2", "3"]})
    trainer = SAGETrainer(
        model=str(tiny_model), reward_funcs=[TextRecordingReward()], args=args, train_dataset=dataset
    )
    texts = ["\\boxed{1/2}", "so \\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{3}"]
    texts += ["\\boxed{x = 3}", "\\boxed{3}", "no answer", "\\boxed{1{,}000}"]
    rows = [{"prompt": "p", "answer": "1/2", "kind": "math"}] * GROUP
    rows += [{"prompt": "q", "answer": "3", "kind": "math"}] * GROUP
    stub = {"completion_ids": torch.ones(8, 3, dtype=torch.long), "completion_mask": torch.ones(8, 3)}
    out = trainer._text_inputs(stub, texts, rows, GROUP, "train", ("answers", "counts"), "cpu")
    assert out["answers"].tolist() == [0, 0, 0, 1, 0, 0, -1, 1]
    assert out["counts"].tolist() == [3, 3, 3, 1, 2, 2, 0, 1]
    assert trainer._outcome_counts.counts == {("p", "1/2"): 3, ("p", "3"): 1, ("q", "3"): 2, ("q", "1000"): 1}
    out = trainer._text_inputs(stub, texts, rows, GROUP, "train", ("clusters",), "cpu")
    assert out["clusters"].tolist() == [0, 0, 0, 1, 0, 0, -1, 1]


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
        (
            dict(advantage_estimator="maxpo", passk_k=4),
            r"advantage_estimator='maxpo' needs passk_k <= num_generations - 1 = 3 \(its leave-two-out",
        ),
        (
            dict(advantage_estimator="maxpo", passk_k=1, passk_k_schedule="cosine", passk_k_end=4),
            "maxpo' needs passk_k <= num_generations - 1 = 3 at every step of the schedule",
        ),
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
