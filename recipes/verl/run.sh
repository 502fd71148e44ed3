#!/usr/bin/env bash
# SAGE with verl 0.9: the paper's setting (Qwen2.5-Math-7B, one node of 8 GPUs) and its 1.5B/3B variants.
#
#   bash recipes/verl/run.sh VARIANT [SIZE] [more hydra overrides...]
#     VARIANT  grpo | grpo+branch | bnpo | bnpo+branch | dapo | dapo+branch
#     SIZE     7b (default, Qwen2.5-Math-7B) | 3b (Qwen2.5-3B) | 1.5b (Qwen2.5-Math-1.5B)
#
# Environment: DRY_RUN=1 prints the command instead of running it; MODEL replaces the size's model;
# DATA_DIR (default ~/data/sage) holds the parquet files that this writes once:
#   python -m sagerl.integrations.verl.data --out ~/data/sage math_lvl3to5 math500 aime24 amc23
#
# Runs on GPUs only (vLLM rollouts, FSDP2 actor); it was not run on sagerl's CPU machine. What CI checks is
# that every variant's command composes into a valid verl config (tests/integrations/verl/test_verl_recipes.py).
#
# From the paper (as sagerl's presets, sagerl/train/presets): G = 8 rollouts, temperature 1, ε = 0.2,
# β = 0.05 (k3 in the loss), γ = 0.3, τ = 1.2 nats, q ∈ [0.6, 1.4]; GRPO/BNPO average tokens per sequence;
# DAPO: ε_high = 0.28, dynamic sampling, token-mean, overlong buffer 0.25·L with factor 1; BNPO and DAPO
# without Branch have no KL (β = 0). sagerl's choices for one 8-GPU node (not from the paper): learning
# rate 1e-6, 128 prompts per step in 2 mini-batches, prompts ≤ 1024 and responses ≤ 3072 tokens, 4 epochs,
# vLLM tensor parallelism and token budgets per size. Baselines run through the same sagerl objective with
# guide none (equal to verl's own GRPO loss but for verl's clamp of the k3 value at 10 nats), so a variant
# and its +branch differ by the guide only.
set -euo pipefail

variant=${1:?usage: run.sh VARIANT [SIZE] [overrides...]}
shift
size=${1:-7b}
[ $# -gt 0 ] && shift
data=${DATA_DIR:-$HOME/data/sage}
# sagerl's grader as verl's reward function (found without importing verl)
reward=$(python -c 'import importlib.util as u; print(u.find_spec("sagerl").submodule_search_locations[0])')
reward=$reward/integrations/verl/reward.py

case $size in
  7b)   model=Qwen/Qwen2.5-Math-7B;   tp=2; tokens=16384 ;;
  3b)   model=Qwen/Qwen2.5-3B;        tp=1; tokens=24576 ;;
  1.5b) model=Qwen/Qwen2.5-Math-1.5B; tp=1; tokens=32768 ;;
  *) echo "unknown size '$size' (7b, 3b, 1.5b)" >&2; exit 2 ;;
esac
model=${MODEL:-$model}

case $variant in
  grpo|grpo+branch) adv=grpo; agg=seq-mean-token-mean; clip_high=0.2 ;;
  bnpo|bnpo+branch) adv=bnpo; agg=seq-mean-token-mean; clip_high=0.2 ;;
  dapo|dapo+branch) adv=grpo; agg=token-mean; clip_high=0.28 ;;
  *) echo "unknown variant '$variant' (grpo, grpo+branch, bnpo, bnpo+branch, dapo, dapo+branch)" >&2; exit 2 ;;
esac
case $variant in
  *+branch) guide=branch; use_kl=True ;;
  grpo)     guide=none;   use_kl=True ;;   # GRPO keeps the reverse-KL anchor (β = 0.05)
  *)        guide=none;   use_kl=False ;;  # BNPO and DAPO baselines: no KL
esac

args=(
  algorithm.adv_estimator=$adv
  algorithm.use_kl_in_reward=False
  data.train_files=$data/math_lvl3to5.parquet
  "data.val_files=[$data/math500.parquet,$data/aime24.parquet,$data/amc23.parquet]"
  data.train_batch_size=128
  data.max_prompt_length=1024
  data.max_response_length=3072
  data.filter_overlong_prompts=True
  actor_rollout_ref.model.path=$model
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=64
  actor_rollout_ref.actor.use_dynamic_bsz=True
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$tokens
  actor_rollout_ref.actor.clip_ratio_low=0.2
  actor_rollout_ref.actor.clip_ratio_high=$clip_high
  actor_rollout_ref.actor.loss_agg_mode=$agg
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.use_kl_loss=$use_kl
  actor_rollout_ref.actor.kl_loss_coef=0.05
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  # SAGE: the plugin's loss (sagerl.objective.sage_loss) and the guide's entropies from the same forward pass
  "++actor_rollout_ref.actor.policy_loss={_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,loss_mode:sage,guide:$guide,gamma:0.3,tau:1.2,q_min:0.6,q_max:1.4}"
  actor_rollout_ref.actor.calculate_entropy=True
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n=8
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.tensor_model_parallel_size=$tp
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
  actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$tokens
  actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
  actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$tokens
  reward.custom_reward_function.path=$reward
  reward.custom_reward_function.name=compute_score
  trainer.n_gpus_per_node=8
  trainer.nnodes=1
  "trainer.logger=[console]"
  trainer.project_name=sage
  trainer.experiment_name=$variant-$size
  trainer.total_epochs=4
  trainer.save_freq=50
  trainer.test_freq=25
)
case $variant in
  dapo*) args+=(
    algorithm.filter_groups.enable=True
    algorithm.filter_groups.metric=acc
    algorithm.filter_groups.max_num_gen_batches=10
    reward.reward_manager.name=dapo
    "+reward.reward_kwargs.overlong_buffer_cfg={enable:True,len:768,penalty_factor:1.0,log:False}"
    +reward.reward_kwargs.max_resp_len=3072
  ) ;;
esac

command=(python -m verl.trainer.main_ppo "${args[@]}" "$@")
if [ -n "${DRY_RUN:-}" ]; then
  printf '%q ' "${command[@]}"
  echo
else
  exec "${command[@]}"
fi
