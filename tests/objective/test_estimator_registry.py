"""The advantage estimators' registry: ``get`` binds a variant's fixed arguments, a keyword that no estimator reads is
an error naming it, and every estimator's declared parameters are its function's (issue 34, item 6)."""

from __future__ import annotations

import inspect

import pytest
import torch

from sagerl.objective import ADVANTAGES, ESTIMATORS, Estimator, compute_advantages, get
from sagerl.objective.signed_advantages import w_reinforce_advantages

GROUP = 4
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
INPUTS = {  # the inputs each estimator needs, beyond the rewards
    "k": 2,
    "sequence_logp": torch.tensor([-0.5, -1.0, -2.0, -0.1, -0.3, -0.7, -1.2, -0.9], dtype=torch.float64),
    "clusters": torch.tensor([0, 0, 1, 2, 0, 1, 1, 1]),
    "answers": torch.tensor([0, 1, 1, -1, 0, 0, 1, 2]),
    "counts": torch.tensor([1.0, 2.0, 2.0, 0.0, 3.0, 3.0, 1.0, 1.0], dtype=torch.float64),
}


def _keywords(function) -> dict[str, bool]:
    """Parameters after (rewards, group_size), each with whether it has a default."""
    params = list(inspect.signature(function).parameters.values())[2:]
    return {p.name: p.default is not inspect.Parameter.empty for p in params}


def test_get_binds_the_fixed_arguments_of_each_variant():
    # PSR: +1 correct, 0 wrong; NSR: 0 correct, -1 wrong; W-REINFORCE: λ = 0.1 correct, -1 wrong (Zhu et al. 2025)
    psr = get("advantage", "psr")(REWARDS, GROUP)
    nsr = get("advantage", "nsr")(REWARDS, GROUP)
    w = get("advantage", "w_reinforce")(REWARDS, GROUP)
    assert psr.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert nsr.tolist() == [0.0, -1.0, -1.0, 0.0, -1.0, -1.0, -1.0, 0.0]
    torch.testing.assert_close(w, torch.where(REWARDS == 1, 0.1, -1.0).double())
    assert get("advantage", "psr").__name__ == w_reinforce_advantages.__name__
    for name in ADVANTAGES:  # get(...) and compute_advantages agree on every estimator
        params = {key: INPUTS[key] for key in ESTIMATORS[name].required}
        torch.testing.assert_close(
            get("advantage", name)(REWARDS, GROUP, **params),
            compute_advantages(name, REWARDS, GROUP, **params),
        )


def test_a_keyword_no_estimator_reads_is_an_error_naming_it_and_the_nearest():
    with pytest.raises(ValueError) as error:
        compute_advantages("passk", REWARDS, GROUP, k=2, kk=3)
    message = str(error.value)
    assert message == (
        "no advantage estimator takes the parameter 'kk' (did you mean 'k'?); the passk estimator reads k"
    )
    assert "\n" not in message
    with pytest.raises(
        ValueError, match=r"'lamda' \(did you mean 'lam'\?\); the w_reinforce estimator reads lam"
    ):
        compute_advantages("w_reinforce", REWARDS, GROUP, lamda=0.5)
    with pytest.raises(ValueError, match=r"parameter 'xyz'; the dr_grpo estimator reads no parameter"):
        compute_advantages("dr_grpo", REWARDS, GROUP, xyz=1)


def test_a_parameter_of_another_estimator_is_ignored():
    """An engine passes its whole configuration: GRPO ignores k and λ, W-REINFORCE reads λ."""
    config = {"k": 3, "lam": 0.5, "scale": "group", "coef": 2.0}
    torch.testing.assert_close(
        compute_advantages("grpo", REWARDS, GROUP, **config), compute_advantages("grpo", REWARDS, GROUP)
    )
    w = compute_advantages("w_reinforce", REWARDS, GROUP, **config)
    torch.testing.assert_close(w, torch.where(REWARDS == 1, 0.5, -1.0).double())


def test_every_estimators_params_are_its_functions_keywords():
    by_function: dict[object, set[str]] = {}
    for name, estimator in ESTIMATORS.items():
        keywords = _keywords(estimator.function)
        settable = set(keywords) - set(estimator.fixed)
        assert set(estimator.params) <= settable, name
        assert set(estimator.fixed) <= set(keywords), name
        assert set(estimator.required) <= set(estimator.params), name
        assert set(estimator.inputs) <= set(estimator.params), name
        assert {k for k, has_default in keywords.items() if not has_default} <= (
            set(estimator.required) | set(estimator.fixed)
        ), name
        by_function.setdefault(estimator.function, set()).update(estimator.params)
    # the variants of a function together read every parameter it has (none is unreachable from the registry)
    for function, params in by_function.items():
        fixed = {k for e in ESTIMATORS.values() if e.function is function for k in e.fixed}
        assert params == set(_keywords(function)) - fixed, function.__name__
    from sagerl.objective.registry import ESTIMATOR_PARAMS

    assert ESTIMATOR_PARAMS == {p for e in ESTIMATORS.values() for p in e.params}


def test_an_estimator_declared_against_its_signature_is_refused():
    with pytest.raises(TypeError, match=r"params \['kk'\] are not keyword parameters"):
        Estimator(w_reinforce_advantages, ("kk",))
    with pytest.raises(TypeError, match=r"required \['k'\] must be among params"):
        Estimator(w_reinforce_advantages, ("lam",), ("k",))
    from sagerl.objective.passk_advantages import passk_advantages

    with pytest.raises(TypeError, match=r"\['k'\] have no default"):
        Estimator(passk_advantages, ("k",))
