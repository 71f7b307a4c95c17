"""The frozen defaults of the approximate estimators (validated against exact answers, then
frozen for held-out environment families; docs/approx.md), the settings each method uses, and
the rules that derive the defaults that depend on the problem: the soft Q-fits' schedule from
the horizon and the data steps that fit in memory. The record that carries them is
:class:`~imitation_meg.approx.options.ApproxOptions`.
"""

from __future__ import annotations

#: Adam's learning rate of the first fit (the refits, which start from its weights, use
#: ``REFIT_LR`` times it).
LR = 3e-3
REFIT_LR = 0.3
#: The share of each soft Q-iteration's last Adam steps whose weights are averaged.
AVERAGE = 0.5
#: Indicator inputs of the last decisions.
LAST_STEPS = 3
#: Evaluation episodes of the scored policy.
N_EVAL_EPISODES = 1000
#: Adam steps per fitting stage (split over the iterations, at least 20 each). Fewer leave the
#: fits short of their targets, a bias the fits share (docs/approx.md).
STEP_BUDGET = 48_000
#: The same for the Box fits, whose iterations are default ``H + 10`` (``H + 20`` otherwise).
BOX_STEP_BUDGET = 12_000
_EXTRA_ITERATIONS, _BOX_EXTRA_ITERATIONS = 20, 10
#: How a score is made: soft Q-fits, linear soft Q-functions by backward induction
#: ("linear"), the empirical MDP of the observations, the paths of a deterministic environment
#: ("paths", where the library simulates it), or the first of paths, empirical MDP and soft
#: Q-fits that applies ("auto"). The default (``None``) is paths where they apply, else soft
#: Q-fits.
METHODS = ("auto", "empirical", "linear", "paths", "soft_q")
#: Particles per start of the paths method's splitting, and its starts; the starts of its
#: twisted SMC (whose particles per start and rung follow a budget:
#: :func:`imitation_meg.approx.smc.particles_for`).
N_PARTICLES = 1024
N_STARTS = 32
SMC_STARTS = 64
#: The settings each method uses (besides ``method`` itself); a score from a given curve
#: (``"curve"``) uses only the policy's episodes and the bootstrap.
_SCORING = ("n_eval_episodes", "n_boot", "confidence", "seed", "progress", "n_envs")
_FITS = ("n_data_steps", "data_memory_gib", "n_models", "n_envs", "n_boot", "confidence", "seed")
APPLIES: dict[str, tuple[str, ...]] = {
    "curve": _SCORING,
    "paths": (*_SCORING, "n_particles", "n_starts"),
    "soft_q": (
        *_FITS,
        "n_eval_episodes",
        "progress",
        "hidden",
        "iterations",
        "steps_per_iteration",
        "refine",
        "average",
        "lr",
        "last_steps",
        "device",
    ),
    "empirical": (*_FITS, "progress", "max_states"),
    "linear": (*_FITS, "n_eval_episodes", "progress", "n_features"),
}
APPLIES["auto"] = tuple(dict.fromkeys(APPLIES["paths"] + APPLIES["empirical"] + APPLIES["soft_q"]))
#: The soft Q-fits of a box (on the CPU, with their action grid).
APPLIES["soft_q_box"] = (*(n for n in APPLIES["soft_q"] if n != "device"), "grid_points")
#: Random Fourier features of the linear soft Q-functions.
N_FEATURES = 100
#: The most distinct observations an empirical MDP may have.
MAX_STATES = 2000
#: Off-policy environment steps per model (lowered for wide observations, see
#: :func:`default_data_steps`); of the Box fits.
DATA_STEPS = 180_000
BOX_DATA_STEPS = 30_000
#: The defaults of the fields left ``None`` whose value depends on the estimator: the Box soft
#: Q-fits (their validated setting, docs/continuous.md) and every other method.
FIT_DEFAULTS: dict[str, int] = {
    "n_eval_episodes": N_EVAL_EPISODES,
    "refine": 3,
    "n_boot": 500,
    "n_envs": 16,
}
BOX_FIT_DEFAULTS: dict[str, int] = {"n_eval_episodes": 100, "refine": 1, "n_boot": 300, "n_envs": 8}


def default_schedule(
    horizon: int,
    iterations: int | None,
    steps_per_iteration: int | None,
    *,
    budget: int | None = None,
    extra: int = _EXTRA_ITERATIONS,
) -> tuple[int, int]:
    """Soft Q-iterations (default ``H + extra``, ``H + 20``) and Adam steps per iteration
    (default ``max(20, budget // iterations)``, ``budget`` by default :data:`STEP_BUDGET`)."""
    n_iter = iterations if iterations is not None else horizon + extra
    if steps_per_iteration is not None:
        return n_iter, steps_per_iteration
    return n_iter, max(20, (STEP_BUDGET if budget is None else budget) // n_iter)


def data_bytes(
    n_data_steps: int, obs_dim: int, n_models: int, refine: int, *, extra_copies: float = 0.0
) -> float:
    """Bytes the fits' stored transitions take at once: every model keeps its data (float32
    ``x`` and ``x_next``, ``obs_dim`` entries each) until its last refit, each refit adds a
    third as many steps, and ``extra_copies`` further sets of ``n_data_steps`` transitions are
    held beside them (the unknown-utility bound keeps its ascent data)."""
    return n_data_steps * (n_models * (1 + refine / 3) + extra_copies) * 2 * 4 * obs_dim


def default_data_steps(
    obs_dim: int,
    n_models: int,
    refine: int,
    memory_gib: float,
    *,
    default: int = DATA_STEPS,
    extra_copies: float = 0.0,
) -> int:
    """``default``, or fewer when the stored transitions would exceed ``memory_gib``."""
    per_step = data_bytes(1, obs_dim, n_models, refine, extra_copies=extra_copies)
    fits = memory_gib * 2**30 // per_step  # inf: no cap
    return max(3, int(min(default, fits)))
