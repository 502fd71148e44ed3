#!/usr/bin/env bash
# SAGE with TRL (accelerate + DeepSpeed + vLLM): the paper's setting (Qwen2.5-Math-7B, one node of 8 GPUs)
# and its 1.5B/3B variants.
#
#   bash recipes/trl/run.sh VARIANT [SIZE] [MODE] [more `sagerl train` options...]
#     VARIANT  grpo | grpo+branch | bnpo | bnpo+branch | dapo | dapo+branch   (sagerl's presets)
#     SIZE     7b (default: Qwen2.5-Math-7B, ZeRO-3) | 3b (Qwen2.5-3B, ZeRO-2) | 1.5b (Qwen2.5-Math-1.5B, ZeRO-2)
#     MODE     colocate (default: the 8 GPUs train and generate) | server (GPUs 4-7 run `trl vllm-serve`,
#              started here in the background; GPUs 0-3 train)
#
# Environment: DRY_RUN=1 prints the commands instead of running them; MODEL replaces the size's model;
# OUT (default runs/trl/VARIANT-SIZE) is the run folder: rerun the same command to resume.
# The settings are in paper.yaml (and vllm-server.yaml); `sagerl train ... --dry-run` checks them.
#
# Runs on GPUs only (DeepSpeed, vLLM); it was not run on sagerl's CPU machine. What CI checks
# (tests/train/test_trl_recipes.py): every command builds a valid SAGEConfig with a tiny model (on CPU),
# the accelerate configs parse, and the batch sizes fit 8 GPUs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
variant=${1:?usage: run.sh VARIANT [SIZE] [MODE] [sagerl train options...]}
shift
size=${1:-7b}
[ $# -gt 0 ] && shift
mode=${1:-colocate}
[ $# -gt 0 ] && shift

case $size in
  7b)   model=Qwen/Qwen2.5-Math-7B;   zero=zero3 ;;
  3b)   model=Qwen/Qwen2.5-3B;        zero=zero2 ;;
  1.5b) model=Qwen/Qwen2.5-Math-1.5B; zero=zero2 ;;
  *) echo "unknown size '$size' (7b, 3b, 1.5b)" >&2; exit 2 ;;
esac
model=${MODEL:-$model}
case $variant in
  grpo|grpo+branch|bnpo|bnpo+branch|dapo|dapo+branch) ;;
  *) echo "unknown variant '$variant' (grpo, grpo+branch, bnpo, bnpo+branch, dapo, dapo+branch)" >&2; exit 2 ;;
esac

train=(accelerate launch --config_file "$here/accelerate/$zero.yaml")
configs=(--config "$here/paper.yaml")
case $mode in
  colocate) ;;
  server)
    server=(env CUDA_VISIBLE_DEVICES=4,5,6,7 trl vllm-serve --model "$model" --data-parallel-size 4
            --max-model-len 4096 --host 127.0.0.1 --port 8000)
    train=(env CUDA_VISIBLE_DEVICES=0,1,2,3 "${train[@]}" --num_processes 4)
    configs+=(--config "$here/vllm-server.yaml") ;;
  *) echo "unknown mode '$mode' (colocate, server)" >&2; exit 2 ;;
esac
train+=(-m sagerl.cli train --preset "$variant" --model "$model" "${configs[@]}"
        --output-dir "${OUT:-runs/trl/$variant-$size}" "$@")

if [ -n "${DRY_RUN:-}" ]; then
  [ "$mode" = server ] && { printf '%q ' "${server[@]}"; echo; }
  printf '%q ' "${train[@]}"
  echo
  exit 0
fi
if [ "$mode" = server ]; then
  "${server[@]}" &
  trap 'kill $!' EXIT   # the trainer waits for the server (vllm_server_timeout)
fi
"${train[@]}"
