"""One registration per method, verl's side (issue 38): the plugin's estimators read every setting their method
declares, and SAGE's policy-loss config has a field of the declared default and range for every setting of the loss
options and of each policy term it offers (the rest are refused with a reason). In verl's environment: the main
suite, without verl, cannot import the plugin."""

from __future__ import annotations

import dataclasses

from sagerl.objective import ESTIMATORS
from sagerl.objective.policy_loss import POLICY_LOSS_SETTINGS
from sagerl.objective.registry import LOSS_SETTINGS


def test_verl_reads_every_setting_of_the_estimators_it_registers():
    from sagerl.integrations.verl.advantages import CONFIG_KEYS, VERL_ESTIMATORS

    for name in VERL_ESTIMATORS:
        for s in ESTIMATORS[name].settings:
            assert CONFIG_KEYS[s.name] == (s.field, s.default), (name, s.name)


def test_verl_policy_loss_config_has_every_loss_setting():
    from sagerl.integrations.verl.config import (
        NUMERIC_RANGES,
        POLICY_TERMS,
        VERL_REFUSED_TERMS,
        SAGEPolicyLossConfig,
    )

    fields = {f.name: f for f in dataclasses.fields(SAGEPolicyLossConfig)}
    for name, s in LOSS_SETTINGS.items():
        assert fields[name].default == s.default and NUMERIC_RANGES[name] == s.allowed, name
    for (
        term,
        settings,
    ) in POLICY_LOSS_SETTINGS.items():  # a policy term verl offers reads every setting it declares
        assert (term in POLICY_TERMS) != (term in VERL_REFUSED_TERMS), term
        if term in POLICY_TERMS and term not in ("clip_cov", "kl_cov"):  # those two are verl's own fields
            for s in settings:
                assert fields[s.field].default == s.default and NUMERIC_RANGES[s.field] == s.allowed, s.field
            assert set(SAGEPolicyLossConfig(policy_term=term).policy_loss_params) == {
                s.name for s in settings
            }
