"""SAGE's verl config: the documented overrides (docs/scale.md) compose from verl's ppo_trainer.yaml; bad input fails at start-up
with one line (in the driver, or in the actor worker's init_model); the verl version is checked."""

import logging
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import verl
from hydra.errors import InstantiationException
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker, ppo_loss
from verl_cpu import command_overrides, compose

import sagerl.integrations.verl as plugin
from sagerl.errors import ConfigError
from sagerl.integrations.verl import SAGEPolicyLossConfig, check_actor_config, check_verl_version
from sagerl.integrations.verl.loss import sage_ppo_loss
from sagerl.integrations.verl.worker import SAGETrainingWorker, sage_loss_fn

SCALE_PAGE = Path(__file__).resolve().parents[3] / "docs" / "scale.md"
ACTOR = "actor_rollout_ref.actor"
BASE = [  # what every verl command sets besides the model and data (the docs leave them to the user)
    f"{ACTOR}.strategy=fsdp2",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "data.train_batch_size=256",
    "algorithm.adv_estimator=grpo",
]
SAGE = f"++{ACTOR}.policy_loss={{_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,loss_mode:sage"
GRPO_KL = [f"{ACTOR}.use_kl_loss=True", f"{ACTOR}.kl_loss_coef=0.05", f"{ACTOR}.kl_loss_type=low_var_kl"]


def readme_overrides() -> list[str]:
    """The overrides of the verl command in the '## verl' section of docs/scale.md (moved from the README)."""
    section = SCALE_PAGE.read_text().split("## verl", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return command_overrides(block)


def actor(overrides: list[str]):
    """The actor's config as verl's driver builds it at start-up (validate_config), then as a dataclass."""
    cfg = compose(BASE + overrides)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def startup_error(overrides: list[str]) -> str:
    """The one-line message with which the driver's start-up refuses ``overrides``."""
    with pytest.raises(InstantiationException) as info:
        actor(overrides)
    cause = info.value.__cause__
    assert isinstance(cause, ConfigError), repr(info.value)
    assert "\n" not in str(cause)
    return str(cause)


def test_readme_overrides_compose_into_sage():
    overrides = readme_overrides()
    assert overrides[-1] == f"{ACTOR}.calculate_entropy=True" and overrides[-2].startswith(SAGE)
    config = actor(overrides)
    settings = config.policy_loss
    assert isinstance(settings, SAGEPolicyLossConfig)
    assert (settings.guide, settings.gamma, settings.tau, settings.q_min, settings.q_max) == (
        "branch",
        0.3,
        1.2,
        0.6,
        1.4,
    )
    assert check_actor_config(config) == "k3"
    # and the loss the actor worker sets up is SAGE's
    loss_fn = sage_loss_fn(partial(ppo_loss, config=config))
    assert loss_fn.func is sage_ppo_loss and loss_fn.keywords["config"] is config


def test_plain_grpo_is_untouched():
    config = actor(GRPO_KL)
    loss_fn = partial(ppo_loss, config=config)
    assert sage_loss_fn(loss_fn) is loss_fn


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("guide:teacher", "reads teacher_logp, which verl does not compute"),
        ("guide:branch,guide_entropy_source:reference", "reads the reference policy's entropies"),
        ("guide:branch_tokens", "guide='branch_tokens' is not one of"),
        ("q_min:1.2", "actor.policy_loss.q_min=1.2 must be a number in (0, 1]"),
        ("kl_placement:reward_to_go", "kl_placement='reward_to_go' is not one of"),
        # issue 38: SimKO's settings are checked against the ranges its module declares
        ("policy_term:simko,simko_mix:1.5", "actor.policy_loss.simko_mix=1.5 must be a number in [0, 1]"),
        ("policy_term:simko,simko_top_k:0", "actor.policy_loss.simko_top_k=0 must be"),
        ("policy_term:simko,simko_neg_scale:0", "actor.policy_loss.simko_neg_scale=0 must be"),
        ("policy_term:flowrl,flowrl_beta:0", "actor.policy_loss.flowrl_beta=0 must be"),
        ("policy_term:apo,apo_top_k:0", "actor.policy_loss.apo_top_k=0 must be"),
        ("policy_term:apo,apo_lambda:0", "actor.policy_loss.apo_lambda=0 must be"),
        ("policy_term:apo,apo_beta:-0.1", "actor.policy_loss.apo_beta=-0.1 must be"),
    ],
)
def test_bad_sage_fields_fail_in_the_driver(fields, message):
    assert message in startup_error([f"{SAGE},{fields}}}", *GRPO_KL, f"{ACTOR}.calculate_entropy=True"])


def test_sage_config_with_another_loss_mode_fails_in_the_driver():
    line = startup_error(
        [f"++{ACTOR}.policy_loss={{_target_:sagerl.integrations.verl.SAGEPolicyLossConfig}}"]
    )
    assert "loss_mode='vanilla'" in line and "loss_mode=sage" in line


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([f"{SAGE}}}", *GRPO_KL], "set actor_rollout_ref.actor.calculate_entropy=True"),
        ([f"{SAGE}}}", f"{ACTOR}.calculate_entropy=True"], "needs β > 0"),
        ([f"{SAGE}}}", *GRPO_KL[:2], f"{ACTOR}.kl_loss_type=k3+", f"{ACTOR}.calculate_entropy=True"], "k3+"),
        (
            [f"{SAGE}}}", *GRPO_KL, f"{ACTOR}.calculate_entropy=True", f"{ACTOR}.entropy_coeff=0.01"],
            "entropy bonus",
        ),
        ([f"{ACTOR}.policy_loss.loss_mode=sage", *GRPO_KL], "needs SAGE's settings"),
        (
            [
                f"{SAGE},policy_term:simko}}",
                *GRPO_KL,
                f"{ACTOR}.calculate_entropy=True",
                f"++{ACTOR}.use_fused_kernels=True",
            ],
            "which verl's fused kernels skip: set actor_rollout_ref.actor.use_fused_kernels=False",
        ),
        (
            [
                f"{SAGE},policy_term:apo}}",
                *GRPO_KL,
                f"{ACTOR}.calculate_entropy=True",
                f"++{ACTOR}.use_fused_kernels=True",
            ],
            "policy_term=apo reads the top-K",
        ),
    ],
)
def test_bad_actor_settings_fail_when_the_worker_sets_up_its_loss(overrides, message):
    config = actor(overrides)
    with pytest.raises(ConfigError, match=re.escape(message)):
        SAGETrainingWorker.set_loss_fn(_bare_worker(), partial(ppo_loss, config=config))


def test_token_guide_needs_no_entropy():
    config = actor([f"{SAGE},guide:token}}", *GRPO_KL])
    assert not config.calculate_entropy and check_actor_config(config) == "k3"


def _bare_worker():
    """A SAGETrainingWorker without an engine: only its loss-function bookkeeping is used."""
    return object.__new__(SAGETrainingWorker)


def test_a_loss_that_would_bypass_sage_is_refused():
    config = actor([*readme_overrides()])
    distillation = partial(lambda **kw: None, config=config, distillation_config=None)
    with pytest.raises(ConfigError, match="would bypass it"):
        sage_loss_fn(distillation)
    worker = _bare_worker()
    worker.set_loss_fn(partial(ppo_loss, config=config))
    assert worker.loss_fn.func is sage_ppo_loss
    with pytest.raises(ConfigError, match="trains with SAGE"):
        worker.set_loss_fn(lambda **kw: None)  # e.g. a trainer's set_loss_fn with another loss


def test_version_outside_the_tested_range_is_one_line():
    assert check_verl_version() == verl.__version__ == "0.9.1"
    for version in ("0.8.2", "0.10.0", "1.0.0", "dev"):
        with pytest.raises(ConfigError) as info:
            check_verl_version(version)
        line = str(info.value)
        assert "\n" not in line and f"found verl {version}" in line and ">=0.9.1,<0.10" in line


def test_wrong_verl_version_fails_at_startup_and_leaves_verl_alone(monkeypatch, caplog):
    monkeypatch.setattr(verl, "__version__", "0.8.2")
    assert "found verl 0.8.2" in startup_error([*readme_overrides()])
    monkeypatch.setattr(ActorRolloutRefWorker, "actor_worker_cls", TrainingWorker)
    monkeypatch.setattr(ActorRolloutRefWorker, "ref_worker_cls", TrainingWorker)
    with caplog.at_level(logging.WARNING):
        assert plugin.install() is False
    assert ActorRolloutRefWorker.actor_worker_cls is TrainingWorker
    assert ActorRolloutRefWorker.ref_worker_cls is TrainingWorker
    assert "found verl 0.8.2" in caplog.text


def test_the_entry_point_installs_the_plugin_in_a_fresh_process():
    code = (
        "import verl, verl.workers.engine_workers as w; "
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as a; "
        "print(w.ActorRolloutRefWorker.actor_worker_cls.__name__, 'bnpo' in a)"
    )
    for policy, expected in (("auto", "SAGETrainingWorker True"), ("none", "TrainingWorker False")):
        env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS=policy)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.stdout.strip().splitlines()[-1] == expected, done.stderr[-2000:]


def test_every_numeric_sage_field_is_checked():
    """Every numeric field SAGE adds to verl's PolicyLossConfig has a range; NaN, ±inf and the values just outside
    fail at construction (so in the driver) in one line naming the field, the value and the range."""
    import dataclasses
    import math

    from verl.workers.config import PolicyLossConfig

    from sagerl.integrations.verl.config import NUMERIC_RANGES

    own = {f.name for f in dataclasses.fields(SAGEPolicyLossConfig)} - {
        f.name for f in dataclasses.fields(PolicyLossConfig)
    }
    numeric = {n for n in own if isinstance(getattr(SAGEPolicyLossConfig(), n), float | int)}
    assert numeric == set(NUMERIC_RANGES)
    for name, allowed in NUMERIC_RANGES.items():
        for value in (math.nan, math.inf, -math.inf, *allowed.just_outside()):
            with pytest.raises(ConfigError) as info:
                SAGEPolicyLossConfig(**{name: value})
            assert str(info.value) == f"actor.policy_loss.{name}={value!r} must be {allowed}"
