"""One registration per method (issue 38, item 3 of the issue): a method's settings are declared once, in its module
(sagerl.objective._checks.Setting), and everything else is read off them. These tests fail when a method's keyword
has no declaration, or when an engine lacks a declared setting. verl's side is checked in verl's environment:
tests/integrations/verl/test_verl_method_settings.py."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
import yaml

from sagerl.objective import ESTIMATORS, POLICY_LOSSES, Range, sage_loss
from sagerl.objective._checks import Setting
from sagerl.objective.policy_loss import POLICY_LOSS_INPUTS, POLICY_LOSS_SETTINGS
from sagerl.objective.registry import ADVANTAGE_SETTINGS, LOSS_SETTINGS, METHOD_SETTINGS

ROOT = Path(__file__).resolve().parents[2]

ENGINE_PARAMS = {
    "scale": "TRL's scale_rewards (group, batch, none), passed by the trainer",
    "eps": "GRPO's std epsilon, TRL's 1e-4 (not a method's choice)",
    "max_inverse_pdf": "BNPO's cap on 1/Beta_pdf, a numerical guard",
    "floor": "DARLING's diversity floor, the authors' 0.1",
    "drop_equal_groups": "the unlikeliness reward's refill, which dynamic_sampling does in the engines",
}
"""Estimator keywords that are not a method's settings, each with the reason."""
TRL_POLICY_PARAMS = {
    "ratio_max": "CISPO: TRL's epsilon_high",
    "temperature_pos": "SAPO: TRL's sapo_temperature_pos",
    "temperature_neg": "SAPO: TRL's sapo_temperature_neg",
    "k_pos": "VESPO: TRL's vespo_k_pos",
    "lambda_pos": "VESPO: TRL's vespo_lambda_pos",
    "k_neg": "VESPO: TRL's vespo_k_neg",
    "lambda_neg": "VESPO: TRL's vespo_lambda_neg",
    "importance_sampling_level": "TRL's importance_sampling_level",
    "importance_sampling_ratio": "the vLLM correction, from the rollout",
    "generator": "the random choice's generator (Clip-Cov), not a setting",
    "log_ratio_clip": "KL-Cov's clamp of the log-ratio, a numerical guard",
}
"""Policy-term keywords that TRL's own fields set, or that are not settings, each with the reason."""
POLICY_COMMON = {"logp", "old_logp", "advantages", "mask", "epsilon_low", "epsilon_high", "delta"}


def _keywords(function, skip: int) -> dict[str, object]:
    """The keyword parameters after the first ``skip``, with their defaults (``inspect.Parameter.empty``: none)."""
    params = list(inspect.signature(function).parameters.values())[skip:]
    return {p.name: p.default for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}


def test_every_estimator_keyword_is_a_setting_an_input_or_an_engine_parameter():
    """Per function (PSR and NSR are W-REINFORCE's function without its λ): every keyword some variant can set."""
    by_function: dict[object, tuple[set[str], set[str]]] = {}
    for estimator in ESTIMATORS.values():
        known, fixed = by_function.setdefault(estimator.function, (set(), set()))
        known |= {s.name for s in estimator.settings} | set(estimator.inputs)
        fixed |= set(estimator.fixed)
    for function, (known, fixed) in by_function.items():
        for keyword in sorted(set(_keywords(function, 2)) - fixed):
            assert keyword in known | set(ENGINE_PARAMS), (
                f"the keyword {keyword!r} of {function.__name__} is read by no setting: declare a "
                "sagerl.objective._checks.Setting in its module and list it in the estimator's settings"
            )


def test_every_policy_term_keyword_is_a_setting_or_trls():
    for name, function in POLICY_LOSSES.items():
        declared = {s.name for s in POLICY_LOSS_SETTINGS.get(name, ())}
        own = set(_keywords(function, 0)) - POLICY_COMMON
        missing = own - declared - set(TRL_POLICY_PARAMS) - set(POLICY_LOSS_INPUTS.get(name, ()))
        assert not missing, f"policy term {name!r}: {sorted(missing)} have no setting (POLICY_LOSS_SETTINGS)"


def test_settings_agree_with_their_functions_defaults():
    functions = [(e.function, 2, e.settings) for e in ESTIMATORS.values()]
    functions += [(POLICY_LOSSES[n], 0, s) for n, s in POLICY_LOSS_SETTINGS.items()]
    functions.append((sage_loss, 0, tuple(LOSS_SETTINGS.values())))
    checked = 0
    for function, skip, settings in functions:
        keywords = _keywords(function, skip)
        for s in settings:
            assert s.name in keywords, (function.__name__, s.name)
            if keywords[s.name] is not inspect.Parameter.empty:
                assert keywords[s.name] == s.default, (function.__name__, s.name, keywords[s.name], s.default)
                checked += 1
    assert checked >= 12


def test_every_setting_is_a_sage_config_field_with_its_default_help_and_range():
    from sagerl.errors import ConfigError
    from sagerl.train import SAGEConfig
    from sagerl.train.config import NUMERIC_RANGES

    fields = {f.name: f for f in dataclasses.fields(SAGEConfig)}
    hints = typing.get_type_hints(SAGEConfig)
    assert len(METHOD_SETTINGS) >= 15
    base = dict(output_dir="/tmp/unused", use_cpu=True)
    for name, s in METHOD_SETTINGS.items():
        f = fields[name]
        # compared as resolved types: transformers' HfArgumentParser replaces a dataclass field's string
        # annotation by the type it names (f.type is 'int' before any parser is built, int after)
        declared = typing.get_type_hints(type("Declared", (), {"__annotations__": {"x": s.type}}))["x"]
        assert (hints[name], f.default, f.metadata["help"]) == (declared, s.default, s.help), name
        if isinstance(s.allowed, Range):
            assert NUMERIC_RANGES[name] == s.allowed, name
            for bad in s.allowed.just_outside():
                bad = int(bad) if s.allowed.integer else bad
                with pytest.raises(ConfigError, match=rf"^{name}={bad!r} must be "):
                    SAGEConfig(**base, **{name: bad})
        else:
            with pytest.raises(ConfigError, match=rf"^{name}='nonsense' is not one of "):
                SAGEConfig(**base, **{name: "nonsense"})


def test_the_engines_map_every_setting_to_its_keyword():
    from sagerl.train import SAGEConfig

    args = SAGEConfig(output_dir="/tmp/unused", use_cpu=True, risk_beta=3.0, passk_k=2, outcome_b0=0.25)
    assert args.advantage_params == {s.name: getattr(args, f) for f, s in ADVANTAGE_SETTINGS.items()}
    assert args.advantage_params["risk_beta"] == 3.0 and args.advantage_params["b0"] == 0.25
    assert set(args.loss_params) == {"entropy_adv_alpha", "entropy_adv_kappa"}
    for name, settings in POLICY_LOSS_SETTINGS.items():
        reuse = {"kl_cov": 2}.get(name, 1)  # KL-Cov needs an off-policy step, SimKO an on-policy one
        args = SAGEConfig(
            output_dir="/tmp/unused",
            use_cpu=True,
            policy_loss=name,
            steps_per_generation=reuse,
            beta=0.05,
            loss_type="grpo",
        )
        assert args.resolved_policy_loss_params == {s.name: s.default for s in settings}


def test_a_second_declaration_of_a_setting_is_refused():
    from sagerl.train.config import with_method_settings

    with pytest.raises(TypeError, match=r"Twice\.risk_beta is declared by its method module"):

        @dataclass
        @with_method_settings
        class Twice:
            risk_beta: float = 2.0


def test_a_setting_refuses_a_value_outside_what_it_allows():
    s = Setting("w", "mix", None, "help", Range(0.0, 1.0), "float | None")
    s.check(None)
    s.check(0.5)
    with pytest.raises(ValueError, match=r"^mix=2 must be a number in \[0, 1\]$"):
        s.check(2)
    choice = Setting("b", "base", "x", "help", ("x", "y"), "str")
    with pytest.raises(ValueError, match=r"^base='z' is not one of x, y$"):
        choice.check("z")


def _presets() -> dict[str, dict]:
    folder = resources.files("sagerl.train").joinpath("presets")
    return {
        p.name[: -len(".yaml")]: yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        for p in folder.iterdir()
        if p.name.endswith(".yaml")
    }


def test_every_method_has_a_preset_and_a_row_in_the_docs():
    presets = list(_presets().values())
    docs = "".join((ROOT / "docs" / page).read_text(encoding="utf-8") for page in ("methods.md", "train.md"))
    for name in ESTIMATORS:
        if name in ("grpo", "dr_grpo"):  # TRL's, chosen by scale_rewards (docs/train.md)
            continue
        assert any(p.get("advantage_estimator") == name for p in presets), f"no preset trains {name!r}"
        spelled = (f"`{name}`", f"`{name.replace('_', '-')}`")
        assert any(s in docs for s in spelled), f"docs/methods.md and docs/train.md name no {name!r}"
    for name in POLICY_LOSS_SETTINGS:
        assert any(p.get("policy_loss") == name for p in presets), f"no preset uses the {name!r} policy term"
