"""Run by tests/integrations/vllm/test_train_vllm.py in its own process (vLLM's colocated engine lives in the trainer's
process): SAGETrainer with use_vllm=True, vllm_mode="colocate" trains the embedded SmolLM2 on vLLM's CPU
engine, then checks the loss with TRL's importance-sampling correction. Writes what it measured as JSON.

    python tests/integrations/vllm/train_colocate.py OUT.json
"""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer
    from vllm import SamplingParams

    from sagerl.models import resolve_model
    from sagerl.train import SAGEConfig, SAGETrainer

    out_path = sys.argv[1]
    ds = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"What is {i} + {i + 1}?"}], "answer": str(2 * i + 1)}
            for i in range(8)
        ]
    )

    def reward(completions, completion_ids, **kwargs):  # spread within groups, so advantages are not 0
        return [float(sum(ids) % 3 == 0) + 0.1 * (len(ids) % 2) for ids in completion_ids]

    args = SAGEConfig(
        output_dir=sys.argv[2] if len(sys.argv) > 2 else "/tmp/sagerl-vllm-train",
        use_vllm=True,
        vllm_mode="colocate",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        learning_rate=2e-5,
        beta=0.05,
        guide="branch",
        tau=0.5,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,  # TRL's default bf16 autocasts the policy; here both sides are float32
        seed=0,
        logging_steps=1,
    )
    trainer = SAGETrainer(model=resolve_model(None), reward_funcs=[reward], args=args, train_dataset=ds)
    gen = trainer.vllm_generation
    tok = trainer.processing_class
    prompt = list(
        tok.apply_chat_template(
            [{"role": "user", "content": "What is 3 + 4?"}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
    )
    fixed = list(tok("3 + 4 = 7. The answer is \\boxed{7}.", add_special_tokens=False)["input_ids"])

    def policy_logps() -> list[float]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + fixed])).logits[0, len(prompt) - 1 : -1].float()
        return logits.log_softmax(-1).gather(-1, torch.tensor(fixed)[:, None])[:, 0].tolist()

    def vllm_logps() -> list[float]:
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        out = gen.llm.generate([{"prompt_token_ids": prompt + fixed}], params, use_tqdm=False)[0]
        return [out.prompt_logprobs[len(prompt) + i][t].logprob for i, t in enumerate(fixed)]

    records = []
    real_generate = gen.generate

    def generate(*a, **kw):  # TRL syncs the weights right before this call when the step changed
        result = real_generate(*a, **kw)
        records.append({"step": trainer.state.global_step, "vllm": vllm_logps(), "policy": policy_logps()})
        return result

    gen.generate = generate
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    # after training: TRL's next sync, then the fixed completion once more
    gen.sync_weights()
    records.append({"step": trainer.state.global_step, "vllm": vllm_logps(), "policy": policy_logps()})

    # TRL's vllm_importance_sampling_correction with the SAGE loss, on one vLLM rollout batch
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    rows = [{"prompt": r["prompt"], "answer": r["answer"]} for r in [ds[0]] * 4 + [ds[1]] * 4]
    inputs = trainer._generate_and_score_completions(rows)
    ratio = inputs["importance_sampling_ratio"]
    g = torch.Generator().manual_seed(0)
    inputs["importance_sampling_ratio"] = ratio * (0.5 + torch.rand(ratio.shape, generator=g))  # away from 1
    sage = trainer._compute_loss(trainer.model, inputs).item()
    args.guide = "none"  # plain GRPO through SAGE's loss, against TRL's own loss on the same batch
    sage_plain = trainer._compute_loss(trainer.model, inputs).item()
    trl_plain = GRPOTrainer._compute_loss(trainer, trainer.model, inputs).item()
    no_weights = dict(inputs, importance_sampling_ratio=torch.ones_like(ratio))
    sage_plain_unweighted = trainer._compute_loss(trainer.model, no_weights).item()
    json.dump(
        {
            "records": records,
            "losses": losses,
            "ratio_shape": list(ratio.shape),
            "ratio_min_max": [ratio.min().item(), ratio.max().item()],
            "sage": sage,
            "sage_plain": sage_plain,
            "trl_plain": trl_plain,
            "sage_plain_unweighted": sage_plain_unweighted,
            "vllm_dtype": str(gen.llm.llm_engine.model_config.dtype),
            "vllm_enforce_eager": bool(gen.llm.llm_engine.model_config.enforce_eager),
        },
        open(out_path, "w"),
    )
