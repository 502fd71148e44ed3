"""Issue 23's derived claim, checked exactly: with 0/1 rewards PKPO and Pass@k Training give every correct
sample of a group the same advantage, and a group zero gradient once more than n − k of its n samples are correct.

It holds for Pass@k Training as stated. For PKPO's default estimator (loo_minus_one, the paper's Eq. 33) it holds
one sample later: at c = n − k + 1 correct, the k − 1 wrong samples and any one correct sample form a k-subset in
which that correct sample is the only success, so it keeps the advantage k/C(n − 1, k − 1); the group goes silent
from c = n − k + 2 on. PKPO's other baselines give the group one constant advantage for c > n − k (zero expected
update given the group, but not zero per sample).
"""

from __future__ import annotations

import math

import pytest
import torch

from sagerl.objective import passk_advantages, pkpo_advantages

N = 8


def group(c: int) -> torch.Tensor:
    return torch.tensor([1.0] * c + [0.0] * (N - c), dtype=torch.float64)


@pytest.mark.parametrize("k", [1, 2, 4, 6, 8])
def test_pass_at_k_training_goes_silent_once_more_than_n_minus_k_are_correct(k):
    for c in range(N + 1):
        adv = passk_advantages(group(c), N, k=k)
        assert len(set(adv[:c].tolist())) <= 1  # every correct sample the same advantage
        assert len(set(adv[c:].tolist())) <= 1
        silent = bool((adv == 0).all())
        assert silent == (c == 0 or c > N - k), (k, c, adv)


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_pkpo_goes_silent_one_sample_later(k):
    for c in range(N + 1):
        adv = pkpo_advantages(group(c), N, k=k)
        assert len(set(adv[:c].tolist())) <= 1 and len(set(adv[c:].tolist())) <= 1
        silent = bool((adv == 0).all())
        assert silent == (c == 0 or c >= N - k + 2), (k, c, adv)
    # the statement, "zero once more than n − k are correct", fails for PKPO at c = n − k + 1:
    at = pkpo_advantages(group(N - k + 1), N, k=k)
    torch.testing.assert_close(
        at[: N - k + 1], torch.full((N - k + 1,), k / math.comb(N - 1, k - 1), dtype=torch.float64)
    )
    assert (at[N - k + 1 :] == 0).all()


@pytest.mark.parametrize("baseline", ["none", "loo"])
def test_pkpo_other_baselines_give_one_constant_advantage(baseline):
    k = 3
    for c in range(N - k + 1, N + 1):
        adv = pkpo_advantages(group(c), N, k=k, baseline=baseline)
        assert len(set(adv.tolist())) == 1, (c, adv)
    mixed = pkpo_advantages(group(N - k), N, k=k, baseline=baseline)
    assert len(set(mixed.tolist())) == 2  # at c = n − k the subsets of all wrong samples still fail
