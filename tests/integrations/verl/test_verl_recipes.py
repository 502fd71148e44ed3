"""Every verl recipe (recipes/verl/run.sh) composes into a valid verl config, with a tiny model substituted.

This is the start-up verl's ``main_ppo`` runs before Ray: hydra composes ``ppo_trainer.yaml`` with the
recipe's overrides, ``validate_config`` turns the actor's config into dataclasses (SAGE's settings checked
there), and the actor worker's check runs on the result. Nothing here needs a GPU; the training itself does
and is not run.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl_cpu import command_overrides, compose, tiny_model

from sagerl.integrations.verl import SAGEPolicyLossConfig, check_actor_config

RUN = Path(__file__).resolve().parents[3] / "recipes" / "verl" / "run.sh"
VARIANTS = ("grpo", "grpo+branch", "bnpo", "bnpo+branch", "dapo", "dapo+branch")
SIZES = ("7b", "3b", "1.5b")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny_qwen2"))


def recipe_command(variant: str, size: str, model: Path, data_dir: Path) -> str:
    env = dict(os.environ, DRY_RUN="1", MODEL=str(model), DATA_DIR=str(data_dir))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", str(RUN), variant, size], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_recipe_composes(variant, size, model_dir, tmp_path):
    overrides = command_overrides(recipe_command(variant, size, model_dir, tmp_path))
    cfg = compose(overrides)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    settings = actor.policy_loss
    assert isinstance(settings, SAGEPolicyLossConfig)
    assert settings.guide == ("branch" if variant.endswith("+branch") else "none")
    assert (settings.gamma, settings.tau, settings.q_min, settings.q_max) == (0.3, 1.2, 0.6, 1.4)
    assert check_actor_config(actor) == "k3"
    assert actor.calculate_entropy and actor.entropy_coeff == 0
    with_kl = variant.endswith("+branch") or variant == "grpo"
    assert actor.use_kl_loss is with_kl and need_reference_policy(cfg) is with_kl
    assert actor.kl_loss_coef == 0.05
    assert actor.clip_ratio_high == (0.28 if variant.startswith("dapo") else 0.2)
    assert actor.loss_agg_mode == ("token-mean" if variant.startswith("dapo") else "seq-mean-token-mean")

    assert get_adv_estimator_fn(cfg.algorithm.adv_estimator)  # bnpo is the plugin's
    assert cfg.algorithm.adv_estimator == ("bnpo" if variant.startswith("bnpo") else "grpo")
    assert cfg.algorithm.filter_groups.enable is variant.startswith("dapo")
    if variant.startswith("dapo"):  # DAPO as DAPO: verl's own refill, up to 10 generation rounds per step
        assert cfg.algorithm.filter_groups.max_num_gen_batches == 10
        # the filter reads the accuracy: verl's DAPO reward manager stores sagerl's compute_score (a float) as
        # `acc` before it adds the overlong penalty; the TRL adapter reads its correctness reward the same way
        assert cfg.algorithm.filter_groups.metric == "acc"
        assert cfg.reward.reward_manager.name == "dapo"
        assert cfg.reward.reward_kwargs.overlong_buffer_cfg.len == 0.25 * cfg.data.max_response_length
    assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.actor_rollout_ref.rollout.temperature == 1.0
    assert cfg.actor_rollout_ref.model.path == str(model_dir)
    assert cfg.trainer.n_gpus_per_node == 8 and cfg.trainer.nnodes == 1
    reward = Path(cfg.reward.custom_reward_function.path)
    assert reward.name == "reward.py" and "def compute_score" in reward.read_text()
    assert cfg.data.train_files == str(tmp_path / "math_lvl3to5.parquet")


def test_unknown_variant_or_size_is_refused(model_dir, tmp_path):
    for args in (["grpo+tokens"], ["grpo", "70b"]):
        env = dict(os.environ, DRY_RUN="1", MODEL=str(model_dir), DATA_DIR=str(tmp_path))
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        done = subprocess.run(["bash", str(RUN), *args], env=env, capture_output=True, text=True)
        assert done.returncode == 2 and "unknown" in done.stderr


def test_data_command_writes_every_file_the_recipe_reads(model_dir, tmp_path):
    """The command in run.sh's header, run on the shared data sets (first 2 problems of each), writes the
    train and validation parquet files every variant's config names (a set's name and its file differ:
    ``math_lvl3to5`` is ``math_train_lvl3to5.jsonl``)."""
    from sagerl.integrations.verl.data import main

    (line,) = [ln for ln in RUN.read_text().splitlines() if "-m sagerl.integrations.verl.data" in ln]
    sets = line.split("--out", 1)[1].split()[1:]
    assert main([*sets, "--out", str(tmp_path), "--limit", "2"]) == 0
    for variant in VARIANTS:
        cfg = compose(command_overrides(recipe_command(variant, "7b", model_dir, tmp_path)))
        files = [cfg.data.train_files, *cfg.data.val_files]
        assert [Path(f).exists() for f in files] == [True] * len(files), files
