"""Registry: every variant of the objective by name, so that a trainer picks them from its config.

``GUIDES``, ``ADVANTAGES``, ``DIVERGENCES``, ``LOSS_AGG_MODES`` and ``SCHEDULES`` list the names;
:func:`compute_guide` and :func:`compute_advantages` dispatch on them; :func:`get` returns the callable. Each
advantage estimator is registered once, in :data:`ESTIMATORS` (its function, the settings its module declares, the
other parameters it reads, whether it needs 0/1 rewards, and the per-completion inputs beyond the rewards an engine
must give it); the name lists are read off that table.

A method's settings (:class:`~sagerl.objective._checks.Setting`: keyword, config field, default, range, help) are
declared once, in the method's module; :data:`METHOD_SETTINGS` collects those of every estimator, policy term
(:data:`sagerl.objective.policy_loss.POLICY_LOSS_SETTINGS`) and loss option, and the engines derive their config
fields, range checks, keyword mappings and verl keys from it (tests/objective/test_method_settings.py).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from sagerl.objective import guides as _guides
from sagerl.objective._checks import NONNEGATIVE, UNIT, Setting, check_number
from sagerl.objective.advantages import bnpo_advantages, dr_grpo_advantages, grpo_advantages
from sagerl.objective.aggregation import LOSS_AGG_MODES, aggregate_loss
from sagerl.objective.divergences import forward_kl, shaped_kl
from sagerl.objective.entropy_advantage import SETTINGS as ENTROPY_ADV_SETTINGS
from sagerl.objective.maxpo import SETTINGS as MAXPO_SETTINGS
from sagerl.objective.maxpo import maxpo_advantages
from sagerl.objective.mixture import SETTINGS as MIX_SETTINGS
from sagerl.objective.mixture import passk_mix_advantages
from sagerl.objective.outcome_exploration import B0, COEF, outcome_advantages
from sagerl.objective.partition_diversity import darling_advantages
from sagerl.objective.passk_advantages import PKPO_BASELINE, K, passk_advantages, pkpo_advantages
from sagerl.objective.risk_seeking import RISK_BETA, rs_grpo_advantages
from sagerl.objective.schedules import SCHEDULES, make_schedule
from sagerl.objective.signed_advantages import LAM, w_reinforce_advantages
from sagerl.objective.unlikeliness import BETA_RANK, unlikeliness_advantages

GUIDES = ("none", "branch", "token", "random", "branch_token", "teacher")


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator of :func:`compute_advantages`."""

    function: Callable[..., torch.Tensor]
    """``function(rewards, group_size, **params) -> (N,) advantages``."""
    params: tuple[str, ...] = ()
    """The keyword parameters it reads (others are ignored)."""
    required: tuple[str, ...] = ()
    """Those of ``params`` without a default."""
    binary: bool = False
    """Defined on 0/1 rewards only (refuses others)."""
    inputs: tuple[str, ...] = ()
    """Per-completion inputs beyond the rewards that an engine must compute and pass (a subset of ``params``):
    ``sequence_logp`` (mean log π_old per token), ``clusters`` (the group's partition), ``answers`` (final-answer
    cluster ids), ``counts`` (N(x, a) across steps)."""
    fixed: dict = field(default_factory=dict)
    """Keyword arguments always passed (a shared function's variant)."""
    settings: tuple[Setting, ...] = ()
    """The settings its module declares: their keywords are read too (added to :attr:`params`), and the engines
    expose each as a config field (:attr:`Setting.field`)."""
    signal_on_equal_rewards: bool = False
    """Its advantages need not vanish on a group whose rewards are all equal (an exploration or diversity term
    lives there: DARLING's all-correct groups of one answer or many, the outcome bonuses of all-wrong groups), so
    DAPO's dynamic sampling must not drop such a group for its equal rewards; it drops the groups whose advantages
    are all zero instead (:func:`sagerl.objective.zero_advantage_mask`)."""

    def __post_init__(self) -> None:
        """Tie the declared parameters to the function's signature.

        Raises:
            TypeError: a parameter, required parameter, input or fixed argument that the function does not take
                by keyword, a required parameter or input not among ``params``, a parameter also fixed, or a
                parameter of the function without a default that is neither required nor fixed.
        """
        object.__setattr__(
            self, "params", tuple(dict.fromkeys([*(s.name for s in self.settings), *self.params]))
        )
        taken = _keywords(self.function)
        name = getattr(self.function, "__name__", repr(self.function))
        for label, names in (("params", self.params), ("fixed", tuple(self.fixed))):
            unknown = [n for n in names if n not in taken]
            if unknown:
                raise TypeError(f"Estimator of {name}: {label} {unknown} are not keyword parameters of it")
        for label, names in (("required", self.required), ("inputs", self.inputs)):
            if not set(names) <= set(self.params):
                raise TypeError(f"Estimator of {name}: {label} {list(names)} must be among params")
        if set(self.params) & set(self.fixed):
            raise TypeError(
                f"Estimator of {name}: {sorted(set(self.params) & set(self.fixed))} both read and fixed"
            )
        without_default = [n for n, has_default in taken.items() if not has_default]
        unset = [n for n in without_default if n not in self.required and n not in self.fixed]
        if unset:
            raise TypeError(f"Estimator of {name}: {unset} have no default; list them in required or fixed")


def _keywords(function: Callable) -> dict[str, bool]:
    """The parameters of an estimator function after ``(rewards, group_size)`` that can be passed by keyword,
    each with whether it has a default."""
    parameters = list(inspect.signature(function).parameters.values())[2:]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default is not inspect.Parameter.empty for p in parameters if p.kind in kinds}


ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(grpo_advantages, ("scale", "eps")),
    "dr_grpo": Estimator(dr_grpo_advantages),
    "bnpo": Estimator(bnpo_advantages, ("max_inverse_pdf",)),
    "passk": Estimator(passk_advantages, (), ("k",), binary=True, settings=(K,)),
    "pkpo": Estimator(pkpo_advantages, (), ("k",), settings=(K, PKPO_BASELINE)),
    "maxpo": Estimator(maxpo_advantages, (), ("k",), settings=MAXPO_SETTINGS),
    "w_reinforce": Estimator(
        w_reinforce_advantages, binary=True, fixed={"kind": "w_reinforce"}, settings=(LAM,)
    ),
    "psr": Estimator(w_reinforce_advantages, binary=True, fixed={"kind": "psr"}),
    "nsr": Estimator(w_reinforce_advantages, binary=True, fixed={"kind": "nsr"}),
    "unlikely": Estimator(
        unlikeliness_advantages,
        ("sequence_logp", "drop_equal_groups", "scale"),
        ("sequence_logp",),
        inputs=("sequence_logp",),
        settings=(BETA_RANK,),
    ),
    "rs_grpo": Estimator(rs_grpo_advantages, settings=(RISK_BETA,)),
    "passk_mix": Estimator(passk_mix_advantages, (), ("k",), binary=True, settings=MIX_SETTINGS),
    "darling": Estimator(
        darling_advantages,
        ("clusters", "floor", "scale"),
        ("clusters",),
        inputs=("clusters",),
        signal_on_equal_rewards=True,
    ),
    "ucb_mean": Estimator(
        outcome_advantages,
        ("answers", "counts", "scale"),
        ("answers", "counts"),
        binary=True,
        inputs=("answers", "counts"),
        fixed={"kind": "ucb_mean"},
        signal_on_equal_rewards=True,
        settings=(COEF,),
    ),
    "ucb_con": Estimator(
        outcome_advantages,
        ("answers", "counts", "scale"),
        ("answers", "counts"),
        binary=True,
        inputs=("answers", "counts"),
        fixed={"kind": "ucb_con"},
        signal_on_equal_rewards=True,
        settings=(COEF, B0),
    ),
    "outcome_batch": Estimator(
        outcome_advantages,
        ("answers", "scale"),
        ("answers",),
        binary=True,
        inputs=("answers",),
        fixed={"kind": "outcome_batch"},
        signal_on_equal_rewards=True,
        settings=(COEF,),
    ),
}
"""Every advantage estimator, registered once."""
ADVANTAGES = tuple(ESTIMATORS)
ADVANTAGE_PARAMS: dict[str, tuple[str, ...]] = {name: e.params for name, e in ESTIMATORS.items()}
"""The keyword parameters each estimator of :func:`compute_advantages` reads (others are ignored)."""
BINARY_ADVANTAGES = tuple(name for name, e in ESTIMATORS.items() if e.binary)
"""Estimators defined on binary (0/1) rewards only; they refuse other rewards."""
ADVANTAGE_INPUTS: dict[str, tuple[str, ...]] = {name: e.inputs for name, e in ESTIMATORS.items()}
"""Per-completion inputs beyond the rewards each estimator needs from its engine (see :class:`Estimator`)."""
SIGNAL_ON_EQUAL_REWARDS = tuple(name for name, e in ESTIMATORS.items() if e.signal_on_equal_rewards)
"""Estimators whose advantages can be nonzero on a group of equal rewards: DAPO's dynamic sampling filters them
on their advantages, not on the rewards (:attr:`Estimator.signal_on_equal_rewards`)."""
ESTIMATOR_PARAMS = frozenset(p for e in ESTIMATORS.values() for p in e.params)
"""Every keyword that some estimator of :func:`compute_advantages` reads."""


def _collect(groups) -> dict[str, Setting]:
    """config field -> setting over ``groups`` of settings; one setting per field and one field per keyword.

    Raises:
        TypeError: two settings with one field, or one keyword set by two fields.
    """
    out: dict[str, Setting] = {}
    for settings in groups:
        for s in settings:
            if out.setdefault(s.field, s) != s:
                raise TypeError(f"two settings declare the config field {s.field!r}: {out[s.field]} and {s}")
    fields_of: dict[str, set[str]] = {}
    for s in out.values():
        fields_of.setdefault(s.name, set()).add(s.field)
    shared = {name: sorted(fields) for name, fields in fields_of.items() if len(fields) > 1}
    if shared and set(shared) & {s.name for e in ESTIMATORS.values() for s in e.settings}:
        raise TypeError(f"one estimator keyword set by several config fields: {shared}")
    return out


ADVANTAGE_SETTINGS: dict[str, Setting] = _collect(e.settings for e in ESTIMATORS.values())
"""config field -> :class:`~sagerl.objective._checks.Setting` of every estimator's settings: an engine passes
``{s.name: config[s.field]}`` to :func:`compute_advantages` (estimators ignore the others' keywords)."""
LOSS_SETTINGS: dict[str, Setting] = _collect([ENTROPY_ADV_SETTINGS])
"""The settings of :func:`sagerl.objective.sage_loss`'s own per-token options (the entropy advantage)."""


def _method_settings() -> dict[str, Setting]:
    from sagerl.objective.policy_loss import POLICY_LOSS_SETTINGS

    return _collect([ADVANTAGE_SETTINGS.values(), *POLICY_LOSS_SETTINGS.values(), LOSS_SETTINGS.values()])


METHOD_SETTINGS: dict[str, Setting] = _method_settings()
"""config field -> setting, of every method: the estimators', the policy terms' and the loss options'. The TRL
adapter's ``SAGEConfig`` has a field for each (name, type, default, help, range: all read from here)."""


def _bound(estimator: Estimator) -> Callable[..., torch.Tensor]:
    """The estimator's function with its fixed arguments bound (the function itself when it has none)."""
    if not estimator.fixed:
        return estimator.function
    return functools.update_wrapper(
        functools.partial(estimator.function, **estimator.fixed), estimator.function
    )


_REGISTRY: dict[str, dict[str, Callable]] = {
    "guide": {
        "branch": _guides.branch_guide,
        "token": _guides.token_guide,
        "random": _guides.random_guide,
        "branch_token": _guides.branch_token_guide,
        "teacher": _guides.teacher_guide,
    },
    "advantage": {name: _bound(e) for name, e in ESTIMATORS.items()},
    "divergence": {"reverse": shaped_kl, "forward": forward_kl},
    "aggregation": {mode: aggregate_loss for mode in LOSS_AGG_MODES},
    "schedule": {kind: make_schedule for kind in SCHEDULES},
}


def get(kind: str, name: str) -> Callable:
    """The callable registered under ``kind`` (guide, advantage, divergence, aggregation, schedule) and ``name``.

    An advantage estimator comes with its fixed arguments bound (``get("advantage", "psr")`` is
    ``w_reinforce_advantages`` with ``kind="psr"``): ``get("advantage", name)(rewards, group_size, **params)``
    is ``compute_advantages(name, rewards, group_size, **params)`` for the parameters it reads.

    Raises:
        KeyError: unknown kind or name (the message lists the known ones).
    """
    if kind not in _REGISTRY:
        raise KeyError(f"unknown registry {kind!r}; expected one of {sorted(_REGISTRY)}")
    table = _REGISTRY[kind]
    if name not in table:
        raise KeyError(f"unknown {kind} {name!r}; expected one of {sorted(table)}")
    return table[name]


@dataclass(frozen=True)
class GuideParams:
    """Parameters of every guide (each guide reads its own). Units: entropies in nats."""

    gamma: float = 0.3
    """branch (and permutation) guide strength γ."""
    tau: float = 1.2
    """branch guide entropy threshold τ, nats."""
    q_min: float = 0.6
    """lower clamp of q (0 < q_min <= 1)."""
    q_max: float = 1.4
    """upper clamp of q (q_max >= 1)."""
    alpha: float = 0.4
    """token guide strength α."""
    sigma: float = 0.0
    """token guide noise σ."""
    normalization: str = "minmax"
    """token guide per-sequence normalisation, one of :data:`sagerl.objective.guides.TOKEN_NORMALIZATIONS`."""
    random_kind: str = "permutation"
    """random guide: permutation (the paper's baseline) or gaussian (the authors' code)."""
    random_eps: float = 0.1
    """gaussian random guide: probability of perturbing a token."""
    random_sigma: float = 0.2
    """gaussian random guide: σ."""
    teacher_lambda: float = 1.0
    """teacher guide exponent λ."""

    def __post_init__(self) -> None:
        """Raise ValueError (one line: the field, the value, the range) for a field out of its range."""
        for name, allowed in GUIDE_PARAM_RANGES.items():
            check_number(name, getattr(self, name), allowed)

    @classmethod
    def from_config(cls, config: object) -> GuideParams:
        """The guide parameters of an engine's config, whose fields carry the names the TRL adapter and the
        verl plugin give them (``gamma``, ``tau``, ``q_min``, ``q_max``, ``token_alpha``, ``token_sigma``,
        ``token_normalization``, ``random_kind``, ``random_eps``, ``random_sigma``, ``teacher_lambda``); a
        field the config lacks keeps its default."""
        values = {
            name: getattr(config, field) for name, field in CONFIG_FIELDS.items() if hasattr(config, field)
        }
        return cls(**values)


GUIDE_PARAM_RANGES = {
    "gamma": NONNEGATIVE,
    "tau": NONNEGATIVE,
    "q_min": _guides.Q_MIN,
    "q_max": _guides.Q_MAX,
    "alpha": NONNEGATIVE,
    "sigma": NONNEGATIVE,
    "random_eps": UNIT,
    "random_sigma": NONNEGATIVE,
    "teacher_lambda": NONNEGATIVE,
}
"""The range of each numeric field of :class:`GuideParams` (those of the guide functions' arguments)."""

CONFIG_FIELDS = {
    "gamma": "gamma",
    "tau": "tau",
    "q_min": "q_min",
    "q_max": "q_max",
    "alpha": "token_alpha",
    "sigma": "token_sigma",
    "normalization": "token_normalization",
    "random_kind": "random_kind",
    "random_eps": "random_eps",
    "random_sigma": "random_sigma",
    "teacher_lambda": "teacher_lambda",
}
""":class:`GuideParams` field -> the name of the engine config field that sets it."""


def guide_inputs(name: str, params: GuideParams = GuideParams()) -> tuple[str, ...]:
    """The per-token inputs guide ``name`` reads, as keyword names of :func:`compute_guide`.

    ``"entropy"`` (H_t, nats), ``"logp"`` (sampled-token log-probs), ``"ref_logp"`` and ``"teacher_logp"``.
    An engine that cannot provide one of them must refuse the guide at start-up.

    Raises:
        ValueError: unknown guide.
    """
    needs = {
        "none": (),
        "branch": ("entropy",),
        "token": ("logp",),
        "random": ("entropy",) if params.random_kind == "permutation" else (),
        "branch_token": ("entropy", "logp"),
        "teacher": ("teacher_logp", "ref_logp"),
    }
    if name not in needs:
        raise ValueError(f"unknown guide {name!r}; expected one of {GUIDES}")
    return needs[name]


def compute_guide(
    name: str,
    mask: torch.Tensor,
    params: GuideParams = GuideParams(),
    *,
    entropy: torch.Tensor | None = None,
    logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    teacher_logp: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor | None:
    """The guide q, (B, T) and detached, or None for ``"none"`` (q ≡ 1).

    Args:
        name: one of :data:`GUIDES`; the inputs each needs are :func:`guide_inputs`.
        mask: (B, T) completion mask.
        params: :class:`GuideParams`.
        entropy: (B, T) token entropies, nats. logp: (B, T) sampled-token log-probs, nats (from the policy
            or the reference, whichever the trainer's ``guide_entropy_source`` says).
        ref_logp: (B, T) reference log-probs. teacher_logp: (B, T) teacher log-probs (teacher guide).
        generator: RNG for the stochastic guides.

    Raises:
        ValueError: unknown guide, or a needed input missing.
    """
    given = {"entropy": entropy, "logp": logp, "ref_logp": ref_logp, "teacher_logp": teacher_logp}
    missing = [key for key in guide_inputs(name, params) if given[key] is None]
    if missing:
        raise ValueError(f"the {name} guide needs {', '.join(missing)}")
    if name == "none":
        return None
    if name == "branch":
        return _guides.branch_guide(entropy, mask, params.gamma, params.tau, params.q_min, params.q_max)
    if name == "branch_token":
        return _guides.branch_token_guide(
            entropy, logp, mask, params.gamma, params.tau, params.normalization, params.q_min, params.q_max
        )
    if name == "teacher":
        return _guides.teacher_guide(
            teacher_logp, ref_logp, mask, params.teacher_lambda, params.q_min, params.q_max
        )
    if name == "token":
        return _guides.token_guide(
            logp,
            mask,
            params.alpha,
            params.sigma,
            params.normalization,
            params.q_min,
            params.q_max,
            generator,
        )
    if name == "random":
        return _guides.random_guide(
            mask,
            params.random_kind,
            entropy=entropy,
            gamma=params.gamma,
            tau=params.tau,
            eps=params.random_eps,
            sigma=params.random_sigma,
            q_min=params.q_min,
            q_max=params.q_max,
            generator=generator,
        )
    raise ValueError(f"unknown guide {name!r}; expected one of {GUIDES}")


def compute_advantages(name: str, rewards: torch.Tensor, group_size: int, **params) -> torch.Tensor:
    """(N,) advantages by estimator name, in the order of ``rewards`` (groups of ``group_size`` contiguous).

    - ``"grpo"`` (``scale="group" | "batch" | "none"``), ``"dr_grpo"``, ``"bnpo"``:
      :mod:`sagerl.objective.advantages`;
    - ``"passk"`` (``k``) and ``"pkpo"`` (``k``, ``baseline``): :mod:`sagerl.objective.passk_advantages`;
    - ``"maxpo"`` (``k``, 1 ≤ k ≤ n − 1): :mod:`sagerl.objective.maxpo`;
    - ``"w_reinforce"`` (``lam``, default 0.1), ``"psr"``, ``"nsr"``: :mod:`sagerl.objective.signed_advantages`;
    - ``"unlikely"`` (``sequence_logp``: (N,) mean log π_old per token; ``beta_rank``, default 0.25):
      :mod:`sagerl.objective.unlikeliness`;
    - ``"rs_grpo"`` (``risk_beta``, default 2): :mod:`sagerl.objective.risk_seeking`;
    - ``"passk_mix"`` (``k``; ``mix_weight``, None: per group): :mod:`sagerl.objective.mixture`;
    - ``"darling"`` (``clusters``: (N,) cluster ids of the group's partition; ``floor``, ``scale``):
      :mod:`sagerl.objective.partition_diversity`;
    - ``"ucb_mean"``, ``"ucb_con"`` (``answers``: (N,) final-answer cluster ids; ``counts``: (N,) N(x, a);
      ``coef``, ``b0``) and ``"outcome_batch"`` (``answers``, ``coef``): :mod:`sagerl.objective.outcome_exploration`.

    A parameter of another estimator (:data:`ADVANTAGE_PARAMS`) is ignored, so an engine can pass its whole
    configuration; a keyword that no estimator reads (:data:`ESTIMATOR_PARAMS`; a typo such as ``kk=3``) is an
    error. ``None`` values mean "the estimator's default".

    Raises:
        ValueError: unknown name, a keyword no estimator reads (the message names it and the nearest valid
            ones), a missing required parameter (``k``, ``sequence_logp``, ``clusters``, ``answers``,
            ``counts``), and whatever the estimator raises (bad k, λ ≤ 0, β_rank outside [0, 1], β_r ≤ 0, w
            outside [0, 1], rewards other than 0/1 for the binary estimators).
    """
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; expected one of {ADVANTAGES}")
    estimator = ESTIMATORS[name]
    unknown = sorted(key for key in params if key not in ESTIMATOR_PARAMS)
    if unknown:
        raise ValueError(_unknown_params_message(name, unknown))
    given = {key: value for key, value in params.items() if key in estimator.params and value is not None}
    for required in estimator.required:
        if required not in given:
            raise ValueError(f"the {name} advantage estimator needs {required}")
    return estimator.function(rewards, group_size, **given, **estimator.fixed)


def _unknown_params_message(name: str, unknown: list[str]) -> str:
    """One line: the keywords no estimator reads, the nearest valid ones, and what ``name`` reads."""
    parts = []
    for key in unknown:
        near = difflib.get_close_matches(key, sorted(ESTIMATOR_PARAMS), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(repr(n) for n in near)}?)" if near else ""
        parts.append(f"{key!r}{hint}")
    reads = ", ".join(ESTIMATORS[name].params) or "no parameter"
    return (
        f"no advantage estimator takes the parameter {'; '.join(parts)}; the {name} estimator reads {reads}"
    )
