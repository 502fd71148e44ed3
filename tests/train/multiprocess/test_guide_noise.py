"""The stochastic guides draw their noise per global rollout row and step (``SAGETrainer._guide``).

So a row's q does not depend on the process or micro-batch that holds it, on its padding, or on the
other rows; processes do not repeat each other's noise; and a resumed run draws what an uninterrupted one
would. (Before, one generator seeded alike on every process gave the rows of process 1 the noise of the
rows of process 0.) In-process, on synthetic tensors.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from datasets import Dataset

from sagerl.objective import compute_guide
from sagerl.train import SAGEConfig, SAGETrainer

STOCHASTIC = {
    "random permutation": dict(guide="random", random_kind="permutation"),
    "random gaussian": dict(guide="random", random_kind="gaussian", random_eps=0.5),
    "token with noise": dict(guide="token", sigma=0.3),
}
LENGTHS = [7, 3, 5, 7, 1, 4]


def constant_reward(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def trainer(tiny_model, tmp_path_factory):
    args = SAGEConfig(
        output_dir=str(tmp_path_factory.mktemp("noise")),
        guide="branch",
        beta=0.05,
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=10,
        report_to="none",
        seed=3,
        bf16=False,
    )
    dataset = Dataset.from_dict({"prompt": ["What is 2 + 3?"]})
    return SAGETrainer(
        model=str(tiny_model), reward_funcs=[constant_reward], args=args, train_dataset=dataset
    )


def use_guide(trainer, guide: str, **params) -> None:
    trainer.args.guide = guide
    trainer._guide_params = replace(trainer.args.guide_params, tau=0.5, **params)


def batch(seed: int = 0):
    """(6, 7) mask with the row lengths LENGTHS, and entropies and log-probs that vary per token."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(7) < torch.tensor(LENGTHS).unsqueeze(1)).long()
    entropy = torch.rand(6, 7, generator=g) * 3
    logp = -torch.rand(6, 7, generator=g) * 5
    return mask, entropy, logp


@pytest.mark.parametrize("kind", list(STOCHASTIC))
def test_row_noise_does_not_depend_on_the_batch_layout(trainer, kind):
    params = dict(STOCHASTIC[kind])
    use_guide(trainer, params.pop("guide"), **params)
    trainer.state.global_step = 4
    mask, entropy, logp = batch()
    rows = torch.arange(6) + 10
    q = trainer._guide(mask, rows, entropy=entropy, logp=logp)
    assert (q[mask.bool()] != 1.0).any()
    # the same rows in another order, in a micro-batch of their own padded to its longest row (5 tokens)
    pick = torch.tensor([2, 5, 1])
    part = trainer._guide(mask[pick, :5], rows[pick], entropy=entropy[pick, :5], logp=logp[pick, :5])
    torch.testing.assert_close(part, q[pick, :5], rtol=0, atol=0)
    # deterministic: the same rows at the same step draw the same noise
    torch.testing.assert_close(trainer._guide(mask, rows, entropy=entropy, logp=logp), q, rtol=0, atol=0)


@pytest.mark.parametrize("kind", list(STOCHASTIC))
def test_rows_and_steps_draw_different_noise(trainer, kind):
    params = dict(STOCHASTIC[kind])
    use_guide(trainer, params.pop("guide"), **params)
    trainer.state.global_step = 0
    mask, entropy, logp = batch()
    same = torch.zeros(6, dtype=torch.long)  # row 0's inputs in every row
    mask, entropy, logp = mask[same], entropy[same], logp[same]
    q = trainer._guide(mask, torch.arange(6), entropy=entropy, logp=logp)
    # rows 0..2 and 3..5 as process 0 and process 1 would hold them: no process repeats the other's noise
    assert not torch.equal(q[:3], q[3:])
    assert len({tuple(row.tolist()) for row in q}) == 6
    trainer.state.global_step = 1
    assert not torch.equal(trainer._guide(mask, torch.arange(6), entropy=entropy, logp=logp), q)


def test_deterministic_guides_are_computed_on_the_whole_batch(trainer):
    use_guide(trainer, "branch")
    mask, entropy, logp = batch()
    q = trainer._guide(mask, torch.arange(6), entropy=entropy, logp=logp)
    expected = compute_guide("branch", mask, trainer._guide_params, entropy=entropy, logp=logp)
    torch.testing.assert_close(q, expected, rtol=0, atol=0)
    assert (q[mask.bool()] > 1.0).any()
