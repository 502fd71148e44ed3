"""The plugin's unbiased pass@k in verl's validation metrics (sagerl.integrations.verl.validation), through verl's own
``_val_metrics_update`` of both trainers (v0 ``RayPPOTrainer``, v1 ``PPOTrainer``): installed by ``import verl``,
closed-form values beside verl's ``best@N``, and the verl internals the wrapper relies on."""

import inspect
import math

import numpy as np
import pytest
import verl  # noqa: F401  (the plugin installs on import)
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from sagerl.integrations.verl.validation import validation_passk


def _comb(n, k):
    return math.comb(n, k) if 0 <= k <= n else 0


def _passk(n, c, k):
    return 1 - _comb(n - c, k) / _comb(n, k)


# two data sources, n = 4 samples per prompt: gsm8k's prompts have 1, 0 and 3 correct samples, math's 4 and 2
OUTCOMES = {("gsm8k", "a"): [1, 0, 0, 0], ("gsm8k", "b"): [0, 0, 0, 0], ("gsm8k", "c"): [1, 1, 0, 1],
            ("math", "d"): [1, 1, 1, 1], ("math", "e"): [0, 1, 0, 1]}  # fmt: skip


def _batch():
    sources, uids, rewards = [], [], []
    for (source, uid), row in OUTCOMES.items():
        for value in row:
            sources.append(source)
            uids.append(uid)
            rewards.append(float(value))
    return np.array(sources, dtype=object), uids, {"reward": rewards}


def _expected(source, k):
    rows = [row for (s, _), row in OUTCOMES.items() if s == source]
    return sum(_passk(4, sum(r), k) for r in rows) / len(rows)


def test_import_verl_installs_the_wrapper_on_both_trainers():
    for cls in (RayPPOTrainer, PPOTrainer):
        assert getattr(cls._val_metrics_update, "__sagerl_passk__", False), cls
    from sagerl.integrations.verl.validation import install

    before = RayPPOTrainer._val_metrics_update
    install()  # idempotent
    assert RayPPOTrainer._val_metrics_update is before


@pytest.mark.parametrize("trainer", [RayPPOTrainer, PPOTrainerSync], ids=["v0", "v1-sync"])
def test_validation_logs_passk_beside_verls_best_at_n(trainer):
    sources, uids, infos = _batch()
    metrics = object.__new__(trainer)._val_metrics_update(sources, uids, infos, [])  # no state is read
    for source in ("gsm8k", "math"):
        for k in (1, 2, 4):
            assert metrics[f"val-core/{source}/reward/pass@{k}"] == pytest.approx(
                _expected(source, k), abs=1e-12
            )
        assert f"val-core/{source}/reward/best@4/mean" in metrics  # verl's own, still there
    assert metrics["val-core/gsm8k/reward/pass@4"] == pytest.approx(2 / 3)
    assert metrics["val-core/gsm8k/reward/pass@1"] == pytest.approx(metrics["val-core/gsm8k/reward/mean@4"])


def test_one_correct_of_four_is_pass_at_4_one_where_best_at_4_is_lower():
    """The issue's example: verl's bootstrap best@4 of [1, 0, 0, 0] is about 0.68; pass@4 is 1."""
    metrics = RayPPOTrainer._val_metrics_update(
        object.__new__(RayPPOTrainer),
        np.array(["s"] * 4, dtype=object),
        ["u"] * 4,
        {"reward": [1.0, 0, 0, 0]},
        [],
    )
    assert metrics["val-core/s/reward/pass@4"] == 1.0
    assert 0.6 < metrics["val-core/s/reward/best@4/mean"] < 0.75
    assert metrics["val-core/s/reward/pass@2"] == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)


def test_acc_is_the_core_variable_and_failed_sessions_count_as_wrong():
    sources = np.array(["s"] * 3, dtype=object)
    infos = {"reward": [0.3, 0.9, 0.1], "acc": [1.0, 0.0, 1.0]}  # rewards shaped, acc the verdict
    expected = {("s", "u"): 4}  # v1: a fourth session failed
    metrics = object.__new__(PPOTrainerSync)._val_metrics_update(
        sources, ["u"] * 3, infos, [], expected_acc_counts=expected
    )
    assert metrics["val-core/s/acc/pass@1"] == pytest.approx(2 / 4)
    assert metrics["val-core/s/acc/pass@2"] == pytest.approx(1 - _comb(2, 2) / _comb(4, 2))
    assert not any(key.startswith("val-core/s/reward/pass@") for key in metrics)


def test_non_binary_scores_get_no_passk_and_one_warning(caplog):
    with caplog.at_level("WARNING"):
        out = validation_passk(["s", "s"], ["u", "u"], {"reward": [0.5, 1.0]})
    assert out == {}
    assert "no pass@k for data source 's'" in caplog.text and "0.5" in caplog.text


def test_prompts_with_different_n_use_k_up_to_the_smallest():
    out = validation_passk(["s"] * 6, ["a", "a", "b", "b", "b", "b"], {"reward": [1, 0, 0, 0, 1, 1]})
    assert sorted(out) == ["val-core/s/reward/pass@1", "val-core/s/reward/pass@2"]
    assert out["val-core/s/reward/pass@2"] == pytest.approx((1.0 + _passk(4, 2, 2)) / 2)


def test_the_verl_contract_the_wrapper_relies_on():
    """verl 0.9.1: both trainers compute validation metrics in _val_metrics_update from these arguments, and
    _validate calls it; the wrapper keeps verl's own method (wrapped) and its signature."""
    v0 = inspect.signature(RayPPOTrainer._val_metrics_update.__wrapped__)
    assert list(v0.parameters) == [
        "self",
        "data_sources",
        "sample_uids",
        "reward_extra_infos_dict",
        "sample_turns",
    ]
    v1 = inspect.signature(PPOTrainer._val_metrics_update.__wrapped__)
    assert list(v1.parameters)[:5] == list(v0.parameters) and "expected_acc_counts" in v1.parameters
    for cls in (RayPPOTrainer, PPOTrainer):
        source = inspect.getsource(cls._validate)
        assert "self._val_metrics_update(" in source
        assert 'reward_extra_infos_dict["reward"].extend(scores)' in source
    body = inspect.getsource(RayPPOTrainer._val_metrics_update.__wrapped__)
    assert 'core_var = "acc" if "acc" in var2metric2val else "reward"' in body
    assert 'pfx = f"{metric_sec}/{data_source}/{var_name}/{metric_name}"' in body
