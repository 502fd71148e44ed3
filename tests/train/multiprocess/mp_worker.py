"""Worker of the multi-process tests: ``torchrun --nproc_per_node N mp_worker.py --model M --out DIR``.

With ``ACCELERATE_USE_CPU=true`` accelerate runs the N processes as MULTI_CPU over gloo (DDP). For each
case (a preset plus overrides, resolved as ``sagerl train`` resolves them) it trains 2 optimizer steps of
:class:`SAGETrainer` on a fixed global batch of 12 completions per step (3 prompts x 4 rollouts), SGD, no
gradient clipping, and writes ``DIR/<case>/rank<R>.pt``: the micro-batch losses, the parameter gradients
at each optimizer step (after DDP's all-reduce), this rank's global rows with their advantages and
keep-mask, the logged metrics, and the layout (processes x rows x accumulation steps).

Layouts: 1 process holds the 12 rows in one micro-batch. N processes split them into N x 12/N rows, or,
for the cases in :data:`ACCUMULATED`, into N x 12/(2N) rows x 2 accumulation steps (so that steps per
generation, the shuffle of the generation batch and the per-micro-batch normalisers are exercised too).

The completions come from TRL's ``rollout_func`` hook: global row r (r = process_index x local rows + i)
always gets the same tokens, whatever the number of processes, so every layout sees the same global batch.
Their lengths vary (padding differs between layouts), and the reward of a completion is the parity of its
first token, so the groups are fixed: a mixed group, a mixed group split across processes, and a constant
group that dynamic sampling drops.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

GROUP = 4
GLOBAL_ROWS = 12
REWARDS = [1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1]  # per global row: mixed, mixed, constant groups
MAX_LEN = 12
PROMPTS = ["What is 2 + 3?", "Compute 17 - 4, then add 9 to the result.", "What is 6 * 7?"]

# name -> (preset, overrides); run.py's TRAINER_DEFAULTS and the preset fill in the rest.
CASES: dict[str, tuple[str, dict]] = {
    "grpo": ("grpo", {}),
    "grpo-nokl": ("grpo-nokl", {}),
    "grpo-fkl": ("grpo-fkl", {}),
    "grpo+branch": ("grpo+branch", {}),
    "grpo+branch-reference-entropy": ("grpo+branch", {"guide_entropy_source": "reference"}),
    "grpo+branch-dynamic-sampling": ("grpo+branch", {"dynamic_sampling": True}),  # seq-mean-token-mean
    "grpo+token": ("grpo+token", {}),
    "grpo+token-noisy": ("grpo+token", {"token_sigma": 0.3}),
    "grpo+random": ("grpo+random", {}),
    "grpo+random-gaussian": ("grpo+random", {"random_kind": "gaussian", "random_eps": 0.5}),
    "bnpo": ("bnpo", {}),
    "bnpo+branch": ("bnpo+branch", {}),
    # the keep-mask and the loss normalisers; a process's rollout batch here holds half-groups, where DAPO's
    # refill (whole groups per process) is refused, so these cases filter only
    "dapo": ("dapo", {"max_num_gen_batches": 1}),
    "dapo+branch": ("dapo+branch", {"max_num_gen_batches": 1}),
}
ACCUMULATED = {
    "grpo+branch-dynamic-sampling",
    "grpo+random",
    "grpo+token-noisy",
    "bnpo+branch",
    "dapo+branch",
}
# Shared by every case: the branch threshold sits inside the tiny model's entropies so q varies.
COMMON = {
    "num_generations": GROUP,
    "max_completion_length": MAX_LEN,
    "max_steps": 2,  # the second step starts from a policy that differs from the reference
    "optim": "sgd",  # linear in the gradient: float noise in step 1 stays float noise in step 2
    "learning_rate": 1e-3,
    "max_grad_norm": 0.0,  # no clipping: compare the raw gradients
    "gamma": 0.5,
    "tau": 2.8,
    "save_strategy": "no",
    "disable_tqdm": True,
    "seed": 0,
}


def completion_ids(row: int, step: int, eos: int) -> list[int]:
    """The completion of global row ``row`` at optimizer step ``step``: 3 to MAX_LEN tokens, the first
    one's parity is the reward, every third row ends with EOS."""
    g = torch.Generator().manual_seed(1000 * step + row)
    length = int(torch.randint(3, MAX_LEN + 1, (1,), generator=g))
    ids = torch.randint(1000, 20000, (length,), generator=g).tolist()
    ids[0] = ids[0] - ids[0] % 2 + REWARDS[row % GLOBAL_ROWS]
    if row % 3 == 0:
        ids[-1] = eos
    return ids


def fixed_rollout(prompts, trainer) -> dict:
    """TRL ``rollout_func``: the fixed completions of this process's global rows."""
    tokenizer = trainer.processing_class
    start = trainer.accelerator.process_index * len(prompts)
    step = trainer.state.global_step
    return {
        "prompt_ids": [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts],
        "completion_ids": [
            completion_ids(start + i, step, tokenizer.eos_token_id) for i in range(len(prompts))
        ],
        "logprobs": None,
    }


def parity_reward(completions, completion_ids, **kwargs) -> list[float]:
    return [float(ids[0] % 2) for ids in completion_ids]


parity_reward.__name__ = "correctness"


def run(model: str, out: Path, names: list[str]) -> None:
    from datasets import Dataset
    from transformers import TrainerCallback

    from sagerl.train.run import build_trainer_config, resolve_config
    from sagerl.train.trainer import SAGETrainer

    class Recorder(SAGETrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.record = {"losses": [], "rows": [], "advantages": [], "keep": []}

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            local = output["completion_ids"].shape[0]
            start = self.accelerator.process_index * local
            self.record["rows"] += list(range(start, start + local))
            self.record["advantages"] += output["advantages"].tolist()
            self.record["keep"] += output["sage_keep"].tolist()
            return output

        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            self.record["losses"].append(loss.item())
            return loss

    class GradCapture(TrainerCallback):
        def __init__(self):
            self.grads: list[dict[str, torch.Tensor]] = []

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            grads = {n.removeprefix("module."): p.grad.detach().clone() for n, p in model.named_parameters()}
            self.grads.append(grads)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dataset = Dataset.from_dict({"prompt": PROMPTS, "answer": ["5", "22", "42"]})
    for name in names:
        preset, overrides = CASES[name]
        accumulation = 2 if world > 1 and name in ACCUMULATED else 1
        values = {
            **COMMON,
            **overrides,
            "per_device_train_batch_size": GLOBAL_ROWS // world // accumulation,
            "gradient_accumulation_steps": accumulation,
        }
        case_dir = out / name
        capture = GradCapture()
        trainer = Recorder(
            model=model,
            reward_funcs=[parity_reward],
            args=build_trainer_config(resolve_config(preset, values), case_dir / "run"),
            train_dataset=dataset,
            rollout_func=fixed_rollout,
            callbacks=[capture],
        )
        assert trainer.accelerator.num_processes == world
        trainer.train()
        logs = [
            {k: v for k, v in row.items() if isinstance(v, int | float)}
            for row in trainer.state.log_history
            if "train_runtime" not in row
        ]
        case_dir.mkdir(parents=True, exist_ok=True)
        record = {**trainer.record, "grads": capture.grads, "logs": logs, "layout": (world, accumulation)}
        torch.save(record, case_dir / f"rank{trainer.accelerator.process_index}.pt")
        trainer.accelerator.wait_for_everyone()


def main() -> None:
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = parser.parse_args()
    run(args.model, Path(args.out), args.cases.split(","))


if __name__ == "__main__":
    main()
