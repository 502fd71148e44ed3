"""SAGEConfig validation and the presets: every paper row resolves to the documented settings."""

import math

import pytest

from sagerl.errors import ConfigError
from sagerl.train import SAGEConfig
from sagerl.train.config import NUMERIC_RANGES, numeric_fields
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
        (dict(max_steps=-3), "max_steps=-3 must be an integer in"),
        (dict(max_steps=0), "max_steps=0: give a positive number"),
    ],
)
def test_unsupported_or_inconsistent_options_raise(bad, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SAGEConfig(**COMMON, **bad)


NUMERIC = sorted(numeric_fields(SAGEConfig))


def test_every_numeric_field_has_a_declared_range():
    # a numeric field added to SAGEConfig (or by a TRL upgrade) without a range in NUMERIC_RANGES fails here
    missing = [name for name in NUMERIC if name not in NUMERIC_RANGES]
    assert missing == [], f"declare the range of {missing} in sagerl/train/config.py NUMERIC_RANGES"
    assert sorted(set(NUMERIC_RANGES) - set(NUMERIC)) == []  # and no range for a field that is gone
    assert len(NUMERIC) > 90


def _outside(name: str) -> list:
    return [math.nan, math.inf, -math.inf, *NUMERIC_RANGES.get(name, ()).just_outside()]


@pytest.mark.parametrize("name", NUMERIC)
def test_nan_inf_and_values_just_outside_fail_naming_field_value_and_range(name):
    allowed = NUMERIC_RANGES.get(name)
    assert allowed is not None, f"no declared range for {name}"
    for value in _outside(name):
        with pytest.raises(ConfigError) as info:
            SAGEConfig(**COMMON, **{name: value})
        assert str(info.value) == f"{name}={value!r} must be {allowed}"
    if allowed.integer:  # an integer field refuses a float, even a whole one
        with pytest.raises(ConfigError, match=f"^{name}=.* must be an integer"):
            SAGEConfig(**COMMON, **{name: float(max(allowed.low, 0) + 1)})


def test_the_issue_cases():
    with pytest.raises(ConfigError, match=r"^w_reinforce_lambda=inf must be a number in \(0, inf\)$"):
        SAGEConfig(**COMMON, w_reinforce_lambda=math.inf)
    with pytest.raises(ConfigError, match=r"^passk_k=9 must be an integer in \[1, 8\]$"):
        SAGEConfig(**COMMON, advantage_estimator="pkpo", passk_k=9)
    with pytest.raises(ConfigError, match=r"^gamma='0.3' must be a number in \[0, inf\)$"):
        SAGEConfig(**COMMON, gamma="0.3")
    SAGEConfig(**COMMON, pad_to_multiple_of="auto")  # int | str: the string is TRL's to read


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
    # the exploration methods: the grpo preset with one change each (the method's own keys below)
    "passk": ("none", 0.05, "reverse", "passk", "seq-mean-token-mean", 0.2, False, 0),
    "pkpo": ("none", 0.05, "reverse", "pkpo", "seq-mean-token-mean", 0.2, False, 0),
    "w-reinforce": ("none", 0.05, "reverse", "w_reinforce", "seq-mean-token-mean", 0.2, False, 0),
    "psr": ("none", 0.05, "reverse", "psr", "seq-mean-token-mean", 0.2, False, 0),
    "nsr": ("none", 0.05, "reverse", "nsr", "seq-mean-token-mean", 0.2, False, 0),
    "unlikely": ("none", 0.05, "reverse", "unlikely", "seq-mean-token-mean", 0.2, True, 0),
    "clip-cov": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 1.0, False, 0),
    "kl-cov": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "entropy-adv": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    # issue 23's methods
    "rs-grpo": ("none", 0.05, "reverse", "rs_grpo", "seq-mean-token-mean", 0.2, False, 0),
    "pkpo-anneal": ("none", 0.05, "reverse", "pkpo", "seq-mean-token-mean", 0.2, False, 0),
    "passk-two-stage": ("none", 0.05, "reverse", "passk", "seq-mean-token-mean", 0.2, False, 0),
    "passk-mix": ("none", 0.05, "reverse", "passk_mix", "seq-mean-token-mean", 0.2, False, 0),
    "darling": ("none", 0.05, "reverse", "darling", "seq-mean-token-mean", 0.2, False, 0),
    "ucb-mean": ("none", 0.05, "reverse", "ucb_mean", "seq-mean-token-mean", 0.2, False, 0),
    "ucb-con": ("none", 0.05, "reverse", "ucb_con", "seq-mean-token-mean", 0.2, False, 0),
    "outcome-batch": ("none", 0.05, "reverse", "outcome_batch", "seq-mean-token-mean", 0.2, False, 0),
    # issue 38's methods
    "maxpo": ("none", 0.05, "reverse", "maxpo", "seq-mean-token-mean", 0.2, False, 0),
    "maxpo-anneal": ("none", 0.05, "reverse", "maxpo", "seq-mean-token-mean", 0.2, False, 0),
    "simko": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "flowrl": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
    "apo": ("none", 0.05, "reverse", "grpo", "seq-mean-token-mean", 0.2, False, 0),
}
METHOD_KEYS = {
    # the papers' settings (sagerl's where a paper leaves a choice: passk_k), and DAPO's refill rounds
    "passk": {"passk_k": 4},
    "pkpo": {"passk_k": 4, "pkpo_baseline": "loo_minus_one"},
    "w-reinforce": {"w_reinforce_lambda": 0.1},
    "unlikely": {"unlikeliness_beta": 0.25, "max_num_gen_batches": 10},  # the authors' refill of equal groups
    "clip-cov": {  # the authors' recipe: PPO's clip at ε_low = ε_high = 1
        "policy_loss": "clip_cov",
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "epsilon": 1.0,
    },
    "psr": {"signed_samples_only": False},  # sagerl's per-sample mean (docs/methods.md says why)
    "nsr": {"signed_samples_only": False},
    "kl-cov": {"policy_loss": "kl_cov", "kl_cov_ratio": 2e-3, "kl_cov_coef": 1.0, "num_iterations": 2},
    "entropy-adv": {"entropy_adv_alpha": 0.4, "entropy_adv_kappa": 2.0},
    "rs-grpo": {"risk_beta": 2.0},
    "pkpo-anneal": {
        "passk_k": 8,
        "passk_k_schedule": "linear",
        "passk_k_end": 1,
        "pkpo_baseline": "loo_minus_one",
    },
    "passk-two-stage": {"passk_k": 4, "passk_k_schedule": "step", "passk_k_end": 1, "passk_k_switch": 0.5},
    "passk-mix": {"passk_k": 4, "passk_mix_weight": None},
    "darling": {"partition": "answer", "scale_rewards": "none"},
    "ucb-mean": {"outcome_coef": 1.0},
    "ucb-con": {"outcome_coef": 1.0, "outcome_b0": 0.5},
    "outcome-batch": {"outcome_coef": 1.0},
    "maxpo": {"passk_k": 4, "passk_k_schedule": "constant"},
    "maxpo-anneal": {"passk_k": 7, "passk_k_schedule": "linear", "passk_k_end": 1},
    "simko": {
        "policy_loss": "simko",
        "simko_top_k": 3,
        "simko_mix": 0.01,
        "simko_tau": 0.8,
        "simko_neg_scale": 1.1,
    },
    "flowrl": {"policy_loss": "flowrl", "flowrl_beta": 15.0},
    "apo": {"policy_loss": "apo", "apo_lambda": 1.0, "apo_beta": 0.1, "apo_top_k": 5},  # sagerl's choices
    "dapo": {"max_num_gen_batches": 10},
    "dapo+branch": {"max_num_gen_batches": 10},
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
    assert {key: getattr(args, key) for key in METHOD_KEYS.get(preset, {})} == METHOD_KEYS.get(preset, {})
    # the authors' shared defaults
    assert (args.num_generations, args.temperature) == (8, 1.0)
    assert args.epsilon == (1.0 if preset == "clip-cov" else 0.2)
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


@pytest.mark.parametrize(
    "method",
    [
        "passk",
        "pkpo",
        "w-reinforce",
        "psr",
        "nsr",
        "unlikely",
        "clip-cov",
        "kl-cov",
        "entropy-adv",
        "rs-grpo",
        "pkpo-anneal",
        "passk-two-stage",
        "passk-mix",
        "darling",
        "ucb-mean",
        "ucb-con",
        "outcome-batch",
        "maxpo",
        "maxpo-anneal",
        "simko",
        "apo",
    ],
)
def test_every_method_composes_with_the_branch_guide(method, tmp_path):
    args = build_trainer_config(resolve_config(f"{method}+branch", {"kl_placement": "reward"}), tmp_path)
    plain = build_trainer_config(resolve_config(method, {}), tmp_path)
    assert (args.guide, args.kl_placement, args.beta) == ("branch", "reward", 0.05)
    assert args.resolved_advantage_estimator == plain.resolved_advantage_estimator
    assert args.policy_loss == plain.policy_loss and args.entropy_adv_alpha == plain.entropy_adv_alpha


def test_a_guide_needs_an_anchor_to_shape():
    from sagerl.train.presets import load_preset

    with pytest.raises(ConfigError, match="'bnpo' has no KL anchor"):
        load_preset("bnpo+token")
    with pytest.raises(ConfigError, match="or METHOD\\+GUIDE"):
        load_preset("pkpo+teacher")
