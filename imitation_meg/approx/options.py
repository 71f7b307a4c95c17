"""The settings of the approximate estimators: one record for both of them.

:func:`~imitation_meg.approx.meg_approx` and :func:`~imitation_meg.approx.meg_approx_unknown`
fit, evaluate and report with the same machinery (:mod:`imitation_meg.approx.core`), so they take
the same settings, :class:`ApproxOptions`, with the same defaults and the same meaning (``lr`` is
the soft Q-fits' step in both; the unknown-utility bound's own step is its ``utility_lr``), for
``Discrete`` actions and bounded boxes alike (a few defaults of the soft Q-fits depend on the
kind: :data:`FIT_DEFAULTS`, :data:`BOX_FIT_DEFAULTS`). Pass a record (``options=``), keyword
arguments of the same names, or both (keywords win)::

    fast = ApproxOptions(n_models=2, refine=1)
    meg_approx(policy, "CartPole-v1", options=fast, seed=3)

The defaults themselves, and the rules of those that depend on the problem, are in
:mod:`~imitation_meg.approx.defaults` (importable from here too). The defaults are the setting
validated against exact answers (``configs/approx_validation.yaml``,
the cases they were tuned on) and then frozen for environment families no tuning saw
(``configs/approx_heldout.yaml``); a test records them, so a change of default is a deliberate
act that needs new held-out families (docs/approx.md).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from imitation_meg.approx.defaults import (
    _BOX_EXTRA_ITERATIONS,
    APPLIES,
    AVERAGE,
    BOX_DATA_STEPS,
    BOX_FIT_DEFAULTS,
    BOX_STEP_BUDGET,
    DATA_STEPS,
    FIT_DEFAULTS,
    LAST_STEPS,
    LR,
    MAX_STATES,
    METHODS,
    N_EVAL_EPISODES,
    N_FEATURES,
    N_PARTICLES,
    N_STARTS,
    REFIT_LR,
    SMC_STARTS,
    STEP_BUDGET,
    data_bytes,
    default_data_steps,
    default_schedule,
)
from imitation_meg.approx.evaluate import ApproxMEGWarning
from imitation_meg.approx.option_checks import checked_fields
from imitation_meg.approx.soft_q import check_device

if TYPE_CHECKING:  # pragma: no cover - typing only
    from imitation_meg.approx.rollouts import EnvSource

__all__ = [
    "APPLIES",
    "AVERAGE",
    "BOX_DATA_STEPS",
    "BOX_FIT_DEFAULTS",
    "BOX_STEP_BUDGET",
    "DATA_STEPS",
    "FIT_DEFAULTS",
    "LAST_STEPS",
    "LR",
    "MAX_STATES",
    "METHODS",
    "N_EVAL_EPISODES",
    "N_FEATURES",
    "N_PARTICLES",
    "N_STARTS",
    "REFIT_LR",
    "SMC_STARTS",
    "STEP_BUDGET",
    "ApproxOptions",
    "ResolvedOptions",
    "check_config",
    "check_device",
    "data_bytes",
    "default_data_steps",
    "default_schedule",
]


@dataclasses.dataclass(frozen=True)
class ApproxOptions:
    """How the approximate estimators fit, evaluate and report.

    Every field is checked when the record is made (a ``ValueError`` / ``TypeError`` naming the
    field and what it accepts). ``None`` means "the default for this problem" (it depends on the
    horizon, the observation size, or the kind of action: the Box soft Q-fits have defaults of
    their own, :data:`BOX_FIT_DEFAULTS`); :meth:`resolved` fills those in.

    Attributes:
        n_data_steps: off-policy environment steps per model (whole episodes), split evenly
            between the scored policy, the scored policy mixed half-and-half with uniform
            actions, and the uniform policy (plus a third as many steps of the model's
            soft-optimal policy per refit). The fits' cost hardly depends on it (a fixed number
            of Adam steps); their noise does: on a sparse, stochastic goal too few steps bias
            the estimate low. Default :data:`DATA_STEPS` (180 000; Box fits
            :data:`BOX_DATA_STEPS`, 30 000), lowered with a warning when the stored transitions
            would take more than ``data_memory_gib`` (wide observations, e.g. images); an
            explicit value is used as given.
        n_eval_episodes: fresh episodes of the scored policy on which ``L(beta)`` is averaged
            (fewer make the maximum over beta noisier). Default 1000 (Box fits 100). Rollouts
            are cheap next to the fits on short horizons; on long ones pass fewer
            (``imitation-meg score`` uses 60 for ``H >= 200``, 30 for Box fits).
        n_models: soft Q-networks fitted on independent data with different seeds (at least 2
            for their spread to enter the interval; with 1 the interval covers the evaluation
            episodes only).
        hidden: hidden layer sizes of the soft Q-networks.
        iterations: soft Q-iterations (target refreshes); default ``H + 20`` (Box fits
            ``H + 10``): values propagate one decision per iteration, so fewer than ``H``
            iterations give a truncated lookahead.
        steps_per_iteration: Adam steps per iteration; default
            ``max(20, STEP_BUDGET // iterations)`` (48 000 steps per stage, Box fits 12 000:
            fewer leave the fits short of their targets, a bias that the interval does not
            cover).
        refine: refit each model with the rationality prior focused on the optimum and with
            episodes of its soft-optimal policy there, then re-evaluate, ``refine`` times
            (``True`` is 1, ``False`` 0; the estimate after each stage is in ``stages``, the
            largest move from an earlier stage enters the interval, and ``stage_intervals``
            holds what every smaller ``refine`` reports). Each refit costs about as much CPU as
            the first fit. Default 3 (Box fits 1).
        n_boot: bootstrap replicates over evaluation episodes. Default 500 (Box fits 300).
        confidence: the interval's nominal coverage.
        seed: the seed of everything random (same seed, same result).
        n_envs: environment copies stepped in lockstep. Default 16 (Box fits 8).
        progress: show a progress bar (its rate gives the time estimate).
        data_memory_gib: memory the default ``n_data_steps`` may fill with stored transitions
            (all models together, float32 observations and next observations: about
            ``n_data_steps x n_models x (1 + refine / 3) x 8 x obs_dim`` bytes, more for the
            unknown-utility bound, which keeps its ascent's data beside them).
        average: the share of each soft Q-iteration's last Adam steps whose weights are
            averaged into the iteration's result (Polyak-Ruppert averaging; ``0``: the last
            step's weights). It damps the optimisation noise that decides near-tied actions at
            large beta.
        lr: Adam's learning rate of the soft Q-fits' first stage (cosine-decayed to a tenth over
            each stage); the refits use ``0.3 lr``.
        last_steps: give the networks an indicator input for each of the last ``last_steps``
            decisions (``0``: none, the smooth time features only). The soft-optimal values
            change most from one of the last decisions to the next; smooth features let a fit
            blur that change.
        method: ``None`` (the default): ``"paths"`` where it applies, else ``"soft_q"``.
            ``"paths"``: in a deterministic environment the library simulates (gymnasium's
            CartPole), the exact identity ``sum_t (log pi_beta + log|A|) = beta R -
            log Z_beta(s0)`` with ``Z`` estimated by splitting random action sequences
            (:mod:`imitation_meg.approx.paths`: seconds, validated against exact values in
            docs/approx.md; only ``n_eval_episodes``, ``n_particles``, ``n_starts``,
            ``n_boot``, ``confidence``, ``seed`` and ``progress`` apply), or a ``ValueError``
            saying why not. ``"soft_q"`` (the validated setting elsewhere): soft Q-fits
            whatever the observations; ``"empirical"``: the exact MEG of the empirical MDP of
            the data's distinct observations (:mod:`imitation_meg.approx.empirical`: seconds
            where the observations take few values, with its own validation in
            docs/approx.md), or a ``ValueError`` saying why it cannot be built; ``"auto"``: the
            paths where they apply, else the empirical MDP when the data show at most
            ``max_states`` distinct observations (each met 5 times on average), else soft
            Q-fits. :func:`~imitation_meg.approx.meg_approx_unknown` fits for its ``"mlp"`` and
            ``"agent"`` classes (it refuses ``"empirical"``, ``"linear"`` and ``"paths"``
            there) and takes the empirical MDP for ``utility="observation"``. ``"linear"``: linear soft Q-functions of random Fourier features of
            the observation, computed by backward induction on data that double in rounds until
            the estimate settles (:mod:`imitation_meg.approx.linear`: seconds to a minute on
            small tabular cases, about a third of the soft Q-fits' time on CartPole; with its
            own validation, misses included, in docs/approx.md; ``n_data_steps`` is its data
            budget per fit, and ``hidden``, ``iterations``, ``steps_per_iteration``,
            ``refine``, ``average``, ``lr``, ``last_steps`` and ``device`` do not apply). A
            bounded box: the paths where the library simulates the environment, else the Box
            soft Q-fits (``"soft_q"``, or ``"auto"``); ``"empirical"`` and ``"linear"`` have no
            Box form.
        max_states: the most distinct observations the empirical MDP may have.
        n_particles: ``"paths"``: random action sequences followed from each start (in two
            independent populations, whose disagreement measures the noise); with the twisted
            SMC (environments other than CartPole), from each start at each rung. Default
            1024 (splitting), or for the twisted SMC about 2 million look-ahead steps per rung
            shared by the starts (8 to 64 particles).
        n_starts: ``"paths"``: start states at which ``Z_beta`` is estimated. Default 32
            (splitting) or 64 (twisted SMC).
        n_features: random Fourier features of the observation in ``"linear"``'s soft
            Q-functions (besides a constant and the observation itself).
        device: where the soft Q-networks are trained: ``"cpu"`` (the default) or a torch
            device such as ``"cuda"`` / ``"cuda:1"``. Only the fits move; the environment
            steps, the policy's actions and the evaluation stay on the CPU, and the draws are
            the same on every device, so two devices agree up to floating-point rounding (not
            bit for bit). Where to run is not a setting of the estimate: the validated
            defaults are the same on every device. (Box fits: the CPU only.)
        grid_points: Box fits: points per dimension of the action grid over which the soft
            values' means are taken (default 16 in 1-D, 10 in 2-D; scrambled Sobol points
            beyond, default 256 in all); refused for ``Discrete`` actions.
    """

    n_data_steps: int | None = None
    n_eval_episodes: int | None = None
    n_models: int = 3
    hidden: tuple[int, ...] = (64, 64)
    iterations: int | None = None
    steps_per_iteration: int | None = None
    refine: int | None = None
    n_boot: int | None = None
    confidence: float = 0.95
    seed: int = 0
    n_envs: int | None = None
    progress: bool = False
    data_memory_gib: float = 4.0
    average: float = AVERAGE
    lr: float = LR
    last_steps: int = LAST_STEPS
    device: str = "cpu"
    method: str | None = None
    max_states: int = MAX_STATES
    n_features: int = N_FEATURES
    n_particles: int | None = None
    n_starts: int | None = None
    grid_points: int | None = None

    def __post_init__(self) -> None:
        for name, value in checked_fields(self).items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, options: ApproxOptions | None = None, **overrides: Any) -> ApproxOptions:
        """``options`` (default: the defaults) with ``overrides`` replacing its fields.

        Raises:
            TypeError: ``options`` that is not an :class:`ApproxOptions`, or an override that
                names no field (the message lists them).
        """
        if options is None:
            options = cls()
        elif not isinstance(options, cls):
            raise TypeError(
                f"options must be an ApproxOptions (imitation_meg.approx.ApproxOptions), got "
                f"{type(options).__name__}."
            )
        _refuse_unknown(overrides)
        return dataclasses.replace(options, **overrides) if overrides else options

    @classmethod
    def from_fields(cls, source: Any, **overrides: Any) -> ApproxOptions:
        """The record made of ``source``'s attributes named as its fields (a study's config
        carries the estimator's settings under the same names), then ``overrides``; fields
        ``source`` lacks keep their defaults."""
        names = [f.name for f in dataclasses.fields(cls)]
        found = {n: getattr(source, n) for n in names if hasattr(source, n)}
        return cls.of(None, **{**found, **overrides})

    def schedule(self, horizon: int, *, box: bool = False) -> tuple[int, int]:
        """Soft Q-iterations and Adam steps per iteration for ``horizon`` decisions (``box``:
        the Box fits' defaults)."""
        if box:
            return default_schedule(
                horizon,
                self.iterations,
                self.steps_per_iteration,
                budget=BOX_STEP_BUDGET,
                extra=_BOX_EXTRA_ITERATIONS,
            )
        return default_schedule(horizon, self.iterations, self.steps_per_iteration)

    def with_defaults(self, *, box_fits: bool = False) -> ApproxOptions:
        """The record with the fields whose default depends on the estimator filled where they
        are ``None``: those of :data:`BOX_FIT_DEFAULTS` for the Box soft Q-fits, else
        :data:`FIT_DEFAULTS`."""
        table = BOX_FIT_DEFAULTS if box_fits else FIT_DEFAULTS
        filled: dict[str, Any] = {k: v for k, v in table.items() if getattr(self, k) is None}
        return dataclasses.replace(self, **filled) if filled else self

    def resolved(
        self,
        source: EnvSource,
        *,
        extra_copies: float = 0.0,
        simulated: str | None = None,
        starts: int | None = None,
    ) -> ResolvedOptions:
        """The record with every ``None`` filled in for ``source``: ``method`` (``"paths"``
        where the caller has a simulator of the environment, ``simulated`` naming how its curve
        is computed, ``"paths"`` (splitting) or ``"smc"``; else ``"soft_q"``, which ``"auto"``
        also is for a box), the defaults of that method and kind of action
        (:meth:`with_defaults`), ``n_particles`` and ``n_starts`` for that curve,
        ``iterations`` and ``steps_per_iteration`` from the horizon, ``n_data_steps`` from
        :data:`DATA_STEPS` (Box fits :data:`BOX_DATA_STEPS`) capped to ``data_memory_gib``
        (with an :class:`ApproxMEGWarning` when the cap bites; ``extra_copies`` further data
        sets are stored beside the models'; none for a simulated method, which stores no data);
        ``starts``: the simulator's own default number of starts for its curve, if any."""
        box = bool(getattr(getattr(source, "actions", None), "is_box", False))
        method = self._method_for(box, simulated)
        box_fits = box and method == "soft_q"
        opts = self.with_defaults(box_fits=box_fits)
        n_particles, n_starts = self._curve_sizes(simulated, starts)
        n_iter, n_steps = opts.schedule(source.horizon, box=box_fits)
        n_data = self.n_data_steps
        if n_data is None and method == "paths":
            n_data = DATA_STEPS  # unused: the paths store no data, and warn of no cap
        elif n_data is None:
            n_data = opts._default_data(source, extra_copies, box_fits)
        return ResolvedOptions.of_record(
            opts,
            method=method,
            iterations=n_iter,
            steps_per_iteration=n_steps,
            n_data_steps=int(n_data),
            n_particles=n_particles,
            n_starts=n_starts,
        )

    def _method_for(self, box: bool, simulated: str | None) -> str:
        """The method a score uses: the one asked for, or where that is ``None`` (or ``"auto"``
        for a box without a simulator) ``"paths"`` with a simulator, else ``"soft_q"``."""
        method = self.method
        if method is None or (box and method == "auto" and not simulated):
            method = "paths" if simulated else "soft_q"
        return method

    def _curve_sizes(self, simulated: str | None, starts: int | None) -> tuple[int | None, int]:
        """Particles per start and starts of the curve (``simulated``: ``"smc"`` for the
        twisted SMC, whose particles follow a budget; ``starts``: the simulator's own default
        number of starts, if any)."""
        split = simulated != "smc"
        n_particles = self.n_particles or (N_PARTICLES if split else None)
        return n_particles, self.n_starts or starts or (N_STARTS if split else SMC_STARTS)

    def _default_data(self, source: EnvSource, extra_copies: float, box_fits: bool) -> int:
        """The default data steps per model, capped to ``data_memory_gib`` (warned)."""
        default = BOX_DATA_STEPS if box_fits else DATA_STEPS
        assert self.refine is not None
        sizes = (source.obs_dim, self.n_models, self.refine)
        n_data = default_data_steps(
            *sizes, self.data_memory_gib, default=default, extra_copies=extra_copies
        )
        if n_data < default:
            need = data_bytes(default, *sizes, extra_copies=extra_copies) / 2**30
            warnings.warn(
                f"{source.name}'s observations have {source.obs_dim} entries: the default "
                f"{default} data steps per model would store about {need:.1f} GiB, more "
                f"than data_memory_gib={self.data_memory_gib:g}, so {n_data} are used. Less "
                "data leaves the fits noisier (on a sparse goal, biased low; "
                "docs/approx.md): raise data_memory_gib= if the memory is there, or pass "
                "n_data_steps= to choose.",
                ApproxMEGWarning,
                stacklevel=5,
            )
        return n_data

    def for_curve(self) -> ResolvedOptions:
        """The record for a score from a given curve: the policy's episodes and the bootstrap
        only (the other fields are filled so the record is complete, and unused)."""
        return ResolvedOptions.of_record(
            self.with_defaults(),
            method="paths",
            iterations=1,
            steps_per_iteration=1,
            n_data_steps=3,
            n_particles=self.n_particles or N_PARTICLES,
            n_starts=self.n_starts or N_STARTS,
        )

    def check_applies(
        self,
        settings: Mapping[str, object],
        options: ApproxOptions | None,
        *,
        allowed: tuple[str, ...] | None = None,
        box: bool = False,
    ) -> None:
        """Refuse settings the resolved method does not use (``allowed``: the caller's list
        instead of the method's; ``box``: the action space is a box, whose soft Q-fits take
        ``grid_points`` and no ``device``): those named in ``settings`` and those of
        ``options`` that differ from the defaults.

        Raises:
            ValueError: the settings that do not apply, the method, and the ones that do.
        """
        method = self.method or "soft_q"
        key = "soft_q_box" if box and method == "soft_q" else method
        used = set(APPLIES.get(key, APPLIES["curve"]) if allowed is None else allowed)
        used.add("method")
        unused = sorted(_given(settings, options) - used)
        if unused:
            what = f"method={method!r}" + (" with Box actions" if key == "soft_q_box" else "")
            raise ValueError(
                f"the setting(s) {unused} do not apply to {what}, which uses "
                f"{sorted(used - {'method'})}; drop them (or choose the method that uses them "
                "with method=...)."
            )
        _check_replicates(self.n_boot, method)


@dataclasses.dataclass(frozen=True)
class ResolvedOptions(ApproxOptions):
    """An :class:`ApproxOptions` with the defaults of one environment, kind of action and
    method filled in (:meth:`ApproxOptions.resolved`, :meth:`ApproxOptions.for_curve`): the
    fields below are numbers, never ``None``."""

    n_data_steps: int = DATA_STEPS
    n_eval_episodes: int = N_EVAL_EPISODES
    iterations: int = 1
    steps_per_iteration: int = 1
    refine: int = 3
    n_boot: int = 500
    n_envs: int = 16

    @classmethod
    def of_record(cls, options: ApproxOptions, **changes: Any) -> ResolvedOptions:
        """``options``' fields, ``changes`` replacing some, as a resolved record.

        Raises:
            ValueError: a field above left ``None``.
        """
        values = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        values.update(changes)
        unset = sorted(n for n in _RESOLVED if values[n] is None)
        if unset:
            raise ValueError(f"a resolved record needs {unset}, got None.")
        return cls(**values)


#: The fields :class:`ResolvedOptions` fills.
_RESOLVED = (
    "n_data_steps",
    "n_eval_episodes",
    "iterations",
    "steps_per_iteration",
    "refine",
    "n_boot",
    "n_envs",
)


def _given(settings: Mapping[str, object], options: ApproxOptions | None) -> set[str]:
    """The settings named in ``settings`` and those of ``options`` that differ from the
    defaults."""
    given = set(settings)
    if options is not None:
        default = ApproxOptions()
        given |= {
            f.name
            for f in dataclasses.fields(options)
            if getattr(options, f.name) != getattr(default, f.name)
        }
    return given


def _check_replicates(n_boot: int | None, method: str) -> None:
    """Raise ``ValueError`` for fewer than 2 bootstrap replicates where ``method`` reports an
    interval."""
    if n_boot is not None and n_boot < 2 and method in ("paths", "soft_q"):
        raise ValueError(
            f"n_boot={n_boot}: method={method!r} reports an interval, which needs at "
            "least 2 bootstrap replicates (500 by default). (The empirical MDP and the linear "
            "soft Q-functions take fewer, and then report no interval.)"
        )


def _refuse_unknown(given: Any) -> None:
    """Raise ``TypeError`` for names in ``given`` that are no field of :class:`ApproxOptions`
    (the message lists the fields)."""
    names = {f.name for f in dataclasses.fields(ApproxOptions)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise TypeError(
            f"unknown setting(s) {unknown} of the approximate estimator; the settings are "
            f"{sorted(names)}."
        )


def _init_naming_unknown_settings() -> None:
    """Make ``ApproxOptions(name=...)`` with a name that is no field a ``TypeError`` that lists
    the fields (the dataclass's own message names only the argument)."""
    made = ApproxOptions.__init__

    @functools.wraps(made)
    def init(self: ApproxOptions, *args: Any, **kwargs: Any) -> None:
        _refuse_unknown(kwargs)
        made(self, *args, **kwargs)

    ApproxOptions.__init__ = init  # type: ignore[method-assign]


_init_naming_unknown_settings()


def check_config(config: Any) -> None:
    """Refuse a study config whose estimator settings (its fields named as
    :class:`ApproxOptions`' own) :func:`~imitation_meg.approx.meg_approx` would refuse: the
    record's own checks, run when the config is read, before any unit.

    Raises:
        ValueError / TypeError: the record's message, with where to fix it.
    """
    try:
        ApproxOptions.from_fields(config)
    except (TypeError, ValueError) as e:
        raise type(e)(
            f"{e} (an estimator setting of the config: fix it in the config file or with "
            "--set NAME=...)"
        ) from e
