"""SAGEConfig validation and the presets: every paper row resolves to the documented settings."""

import pytest

from sagerl.errors import ConfigError
from sagerl.train import SAGEConfig
from sagerl.train.run import build_trainer_config, parse_overrides, resolve_config

COMMON = dict(output_dir="/tmp/unused", bf16=False, report_to="none")


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(kl_placement="reward", beta=0.05, top_entropy_quantile=0.2), "top_entropy_quantile=0.2 is not"),
        (dict(kl_placement="reward", beta=0.05, off_policy_mask_threshold=0.5), "off_policy_mask_threshold"),
        (
            dict(multi_objective_aggregation="normalize_then_sum", advantage_estimator="bnpo"),
            "defines the advantages itself",
        ),
        (dict(policy_loss="ppo"), "policy_loss='ppo' is not one of"),
        (dict(guide="branchy", beta=0.05), "guide='branchy' is not one of"),
        (dict(guide="branch", beta=0.0), "needs beta > 0"),
        (dict(divergence="forward", guide="branch", beta=0.05), "takes no guide"),
        (dict(kl_placement="reward", divergence="forward", beta=0.05), "needs divergence='reverse'"),
        (dict(q_min=1.1), "q_min"),
        (dict(overlong_buffer_len=5000, max_completion_length=256), "overlong_buffer_len"),
        (dict(max_steps=-3), "max_steps=-3: give a positive number of optimizer steps"),
        (dict(max_steps=0), "max_steps=0: give a positive number"),
    ],
)
def test_unsupported_or_inconsistent_options_raise(bad, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SAGEConfig(**COMMON, **bad)


def test_max_steps_minus_one_or_positive():
    assert SAGEConfig(**COMMON, max_steps=-1).max_steps == -1  # num_train_epochs decides (HF's default)
    assert SAGEConfig(**COMMON, max_steps=7).max_steps == 7


EXPECTED = {
    # preset: (guide, beta, divergence, advantages, aggregation, epsilon_high, dynamic sampling, overlong tokens)
    "grpo": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "grpo-nokl": ("none", 0.0, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "grpo-fkl": ("none", 0.05, "forward", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "grpo+random": ("random", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "grpo+token": ("token", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "grpo+branch": ("branch", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "grpo+branch_token": ("branch_token", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "bnpo": ("none", 0.0, "reverse", "bnpo", "seq-mean-token-mean", 0.2, False, 0),
    "bnpo+branch": ("branch", 0.05, "reverse", "bnpo", "seq-mean-token-mean", 0.2, False, 0),
    "dapo": ("none", 0.0, "reverse", "grpo", "token-mean", 0.28, True, 64),
    "dapo+branch": ("branch", 0.05, "reverse", "grpo", "token-mean", 0.28, True, 64),
}


def test_every_preset_is_checked():
    from sagerl.train.presets import list_presets

    assert list(list_presets()) == list(EXPECTED)


@pytest.mark.parametrize("preset", list(EXPECTED))
def test_presets_resolve_to_the_paper_rows(preset, tmp_path):
    args = build_trainer_config(resolve_config(preset, {}), tmp_path)
    got = (
        args.guide,
        args.beta,
        args.divergence,
        args.resolved_advantage_estimator,
        args.resolved_loss_agg_mode,
        args.epsilon if args.epsilon_high is None else args.epsilon_high,
        args.dynamic_sampling,
        args.resolved_overlong_buffer_len,
    )
    assert got == EXPECTED[preset]
    # the authors' shared defaults
    assert (args.num_generations, args.temperature, args.epsilon) == (8, 1.0, 0.2)
    assert (args.gamma, args.tau, args.q_min, args.q_max) == (0.3, 1.2, 0.6, 1.4)


def test_overrides_are_parsed_and_typed(tmp_path):
    values = parse_overrides(["learning_rate=1e-6", "beta=0", "dynamic_sampling=true", "gamma=0.5", "seed=7"])
    assert values == {"learning_rate": 1e-6, "beta": 0, "dynamic_sampling": True, "gamma": 0.5, "seed": 7}
    args = build_trainer_config(resolve_config("grpo", values), tmp_path)
    assert args.learning_rate == 1e-6 and args.beta == 0.0 and isinstance(args.beta, float)
    with pytest.raises(ConfigError, match="unknown config key 'gama'.*gamma"):
        parse_overrides(["gama=0.5"])
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_overrides(["gamma"])
