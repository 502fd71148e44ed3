"""Overhead of SAGE's verl loss over verl's own GRPO loss, on one CPU actor step through verl's worker.

Run in .venv-verl (``make setup-verl``): ``.venv-verl/bin/python benchmarks/verl_overhead.py``.

Three actors, built side by side in one process from verl's ``ppo_trainer.yaml`` (FSDP2 in a one-process gloo
group, a random Qwen2 model, verl's CPU shim from tests/integrations/verl/verl_cpu.py), train on the same batch:

- ``sage``: SAGE with the branch guide (the overrides of docs/scale.md), ``calculate_entropy=True``;
- ``grpo``: verl's own loss (``loss_mode=vanilla``, k3 KL, β = 0.05), ``calculate_entropy=True``;
- ``grpo_no_entropy``: the same, ``calculate_entropy=False``.

Each timed step is one ``update_actor`` call (forward with log-probs and, when on, entropies; the loss;
backward; optimizer step). Rounds alternate the order of the actors; the first step of each is a warm-up.
Reported: median step time per actor and the ratios

- sage / grpo (both with entropies): the plugin's overhead, target <= 1.03;
- grpo / grpo_no_entropy: what turning entropies on costs verl's GRPO by itself (no target; SAGE's branch
  guide needs them, and verl computes them in the same forward pass).

Numbers are only meaningful on an idle machine (other processes on the same cores skew them by far more than
the differences measured).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests" / "integrations" / "verl"
ACTORS = ("sage", "grpo", "grpo_no_entropy")
TARGET = 1.03


def actor_overrides(name: str) -> list[str]:
    actor = "actor_rollout_ref.actor"
    kl = [f"{actor}.use_kl_loss=True", f"{actor}.kl_loss_coef=0.05", f"{actor}.kl_loss_type=low_var_kl"]
    if name == "sage":
        return [
            *kl,
            f"++{actor}.policy_loss={{_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,loss_mode:sage,guide:branch}}",
            f"{actor}.calculate_entropy=True",
        ]
    return [*kl, f"{actor}.calculate_entropy={name == 'grpo'}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=5, help="timed steps per actor per round (after a warm-up)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8, help="responses per step")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--response", type=int, default=256, help="response tokens")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"  # verl registers its FSDP engine for cuda/npu; it runs on CPU
    sys.path.insert(0, str(TESTS))
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, Qwen2Config
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.utils.model import compute_position_id_with_mask
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding
    from verl_cpu import compose, cpu_overrides, use_cpu_platform

    use_cpu_platform()
    dist.init_process_group("gloo", rank=0, world_size=1)
    model_dir = Path(tempfile.mkdtemp(prefix="verl_overhead_"))
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=args.prompt + args.response,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)

    B, length = args.batch, args.prompt + args.response
    workers = {}
    for name in ACTORS:
        cfg = compose(cpu_overrides(model_dir, batch_size=B, micro_batch_size=B) + actor_overrides(name))
        workers[name] = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
        workers[name].init_model()
    loss_fns = {name: w.actor.loss_fn.func.__name__ for name, w in workers.items()}
    assert loss_fns == {"sage": "sage_ppo_loss", "grpo": "ppo_loss", "grpo_no_entropy": "ppo_loss"}, loss_fns

    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, args.vocab, (B, length), generator=g)
    mask = torch.ones(B, length, dtype=torch.int64)
    data = DataProto.from_single_dict(
        {
            "input_ids": input_ids,
            "prompts": input_ids[:, : args.prompt],
            "responses": input_ids[:, args.prompt :],
            "attention_mask": mask,
            "position_ids": compute_position_id_with_mask(mask),
            "response_mask": mask[:, args.prompt :],
        },
        meta_info={"temperature": 1.0},
    )
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False, temperature=1.0)
    old = no_padding_2_padding(tu.get(workers["grpo"].compute_log_prob(td), "log_probs"), td).float()
    data.batch["old_log_probs"] = old
    data.batch["ref_log_prob"] = old + 0.1 * torch.randn(old.shape, generator=g)
    data.batch["advantages"] = torch.randn(B, 1, generator=g).expand_as(old).contiguous()

    def step(name: str) -> float:
        batch = left_right_2_no_padding(data.to_tensordict())
        tu.assign_non_tensor(
            batch,
            calculate_entropy=name != "grpo_no_entropy",
            global_batch_size=B,
            mini_batch_size=B,
            epochs=1,
            seed=0,
            dataloader_kwargs={"shuffle": False},
            compute_loss=True,
            temperature=1.0,
        )
        start = time.perf_counter()
        workers[name].update_actor(batch)
        return time.perf_counter() - start

    times: dict[str, list[float]] = {name: [] for name in ACTORS}
    for round_index in range(args.rounds):
        order = ACTORS if round_index % 2 == 0 else ACTORS[::-1]
        for name in order:
            step(name)  # warm-up
            times[name] += [step(name) for _ in range(args.steps)]
    dist.destroy_process_group()

    median = {name: statistics.median(t) for name, t in times.items()}
    ratios = {
        "sage/grpo step time": median["sage"] / median["grpo"],
        "grpo/grpo_no_entropy step time": median["grpo"] / median["grpo_no_entropy"],
    }
    report = {
        "settings": vars(args),
        "median_step_s": median,
        "ratios": ratios,
        "target": {"sage/grpo step time": TARGET},
        "met": ratios["sage/grpo step time"] <= TARGET,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
