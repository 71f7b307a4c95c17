"""An SB3 callback that measures goal-directedness while an agent learns: :class:`MEGCallback`.

Every ``eval_freq`` calls (as SB3's ``EvalCallback``: one call per step of the vectorised
environment, so ``n_envs`` timesteps each) it builds the exact policy table of the model being
trained (:func:`imitation_meg.adapters.policy_table`, through the model's ``VecNormalize`` when
it has one) and records to SB3's logger, so TensorBoard, CSV, stdout and W&B see them:

- ``meg/known``: known-utility MEG for the MDP's utility (the environment reward);
- ``meg/normalized``: ``meg/known`` divided by ``H log|A|``;
- ``meg/beta``: the fitted rationality;
- ``meg/expected_return``: the policy's exact expected return in the MDP;
- ``meg/unknown``: unknown-utility MEG over every utility of the state (``unknown=True``);
- ``meg/converged``: 1 when every solver converged, else 0.

In an environment that is not tabular (CartPole and the other classic-control tasks the library
simulates) it scores through the environment's soft-value curve
(:mod:`imitation_meg.approx.curve`): known-utility MEG is ``sup_beta beta J - Lambda(beta)``, so
the curve ``Lambda`` is computed once when training starts (or read from ``curve=FILE``, written
by ``imitation-meg curve``) and each evaluation costs only ``n_eval_episodes`` episodes of the
current policy (on the simulator). It then also records ``meg/low`` and ``meg/high`` (the
interval) and ``meg/converged`` is whether the curve was reliable at the policy's optimum.

With ``history=PATH`` each evaluation is also appended to a JSON-lines file that
``imitation-meg plot`` reads. Usable from RL Baselines3 Zoo through its callback import path::

    seals/CliffWorld7x4-v0:
      callback:
        - imitation_meg.callbacks.MEGCallback:
            env: seals/CliffWorld7x4-v0
            eval_freq: 500

This module imports stable-baselines3 (extra ``sb3``); ``import imitation_meg`` does not import it.
"""

from __future__ import annotations

import json
import pathlib
import time
import warnings
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from imitation_meg.core.env_tables import make_env
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.results import meg_record
from imitation_meg.type_aliases import PathLike

__all__ = ["MEGCallback"]


def _has_tables(env: Any) -> bool:
    """Whether a gymnasium environment exposes tables for an exact MDP (seals' matrices,
    toy-text's ``P``: what :meth:`TabularMDP.from_env` reads)."""
    u = env.unwrapped
    return (hasattr(u, "transition_matrix") and hasattr(u, "reward_matrix")) or isinstance(
        getattr(u, "P", None), dict
    )


def _writable(path: PathLike) -> pathlib.Path:
    """``path`` as a Path whose folder exists (created) and which can be appended to.

    Raises:
        ValueError: the folder cannot be created or the file cannot be written.
    """
    p = pathlib.Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a"):
            pass
    except OSError as e:
        raise ValueError(
            f"history={str(path)!r} cannot be written ({e.strerror or e}); pass a path in a "
            "folder you can write to."
        ) from None
    return p


class MEGCallback(BaseCallback):
    """Log exact MEG of the policy being trained to SB3's logger every ``eval_freq`` calls.

    Args:
        env: the tabular MDP to score in: a :class:`TabularMDP`, a gymnasium environment or a
            registered id (made with ``env_kwargs``); None takes the training environment
            (its first sub-environment, or its id for subprocess vector environments).
        eval_freq: evaluate every ``eval_freq`` calls of the callback (``n_envs`` timesteps
            each, as ``EvalCallback``).
        horizon: horizon of the MDP built from an environment (default the environment's).
        env_kwargs: keyword arguments for ``gym.make`` when ``env`` is an id.
        unknown: also log unknown-utility MEG over every utility of the state (slower: a convex
            problem per evaluation instead of a 1-D one).
        epsilon: for DQN / QR-DQN (epsilon-greedy over their action values). Default: the
            model's current ``exploration_rate``, i.e. the policy it acts with at that moment.
        noise_std: Box actions (a :class:`~imitation_meg.continuous.ContinuousMDP`, or an
            environment built on one, whose MEG is exact): score TD3 / DDPG smoothed by this
            Gaussian noise (see :mod:`imitation_meg.continuous.densities`). There
            ``meg/normalized`` is MEG over the policy's certificate (no ``H log|A|``).
        history: a JSON-lines file to append one record per evaluation to (its folder is
            created, and the file checked writable, here).
        eval_at_start: also evaluate before the first step (timestep 0).
        verbose: 1 prints each evaluation.
        curve: an environment that is not tabular: its soft-value curve (a
            :class:`~imitation_meg.approx.curve.SoftValueCurve` or the path of its file);
            default computed when training starts (seconds on CartPole).
        n_eval_episodes: an environment that is not tabular: episodes of the current policy
            per evaluation (default 200).
        seed: an environment that is not tabular: the seed of the curve and the episodes.

    Raises:
        ValueError: ``eval_freq < 1``, an environment id gymnasium cannot make (checked here,
            not at ``learn()``), an MDP without a utility, an environment that is neither
            tabular nor one a soft-value curve can be computed for, a curve computed for
            another environment, or a history file that cannot be written.
    """

    def __init__(
        self,
        env: Any = None,
        *,
        eval_freq: int = 1_000,
        horizon: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        unknown: bool = False,
        epsilon: float | None = None,
        noise_std: float | None = None,
        history: PathLike | None = None,
        eval_at_start: bool = False,
        verbose: int = 0,
        curve: Any = None,
        n_eval_episodes: int = 200,
        seed: int = 0,
    ) -> None:
        super().__init__(verbose=verbose)
        if isinstance(eval_freq, bool) or not isinstance(eval_freq, int) or eval_freq < 1:
            raise ValueError(f"eval_freq must be a positive integer, got {eval_freq!r}.")
        self.eval_freq = eval_freq
        self.horizon = horizon
        self.env_kwargs = dict(env_kwargs or {})
        self.unknown = bool(unknown)
        self.epsilon = epsilon
        self.noise_std = noise_std
        self.history = None if history is None else _writable(history)
        self.eval_at_start = bool(eval_at_start)
        self.mdp: Any = None  # a TabularMDP, or a ContinuousMDP (Box actions)
        self._env: Any = None  # the gymnasium env the MDP came from (MaskablePPO's masks)
        #: The soft-value curve of an environment that is not tabular (None: tabular).
        self.curve: Any = curve
        self._curve_env: Any = None
        if isinstance(n_eval_episodes, bool) or not isinstance(n_eval_episodes, int):
            raise TypeError(f"n_eval_episodes must be an integer, got {n_eval_episodes!r}.")
        if n_eval_episodes < 2:
            raise ValueError(f"n_eval_episodes must be at least 2, got {n_eval_episodes}.")
        self.n_eval_episodes, self.seed = n_eval_episodes, int(seed)
        #: One dict per evaluation (what is logged), in order.
        self.records: list[dict[str, Any]] = []
        #: Seconds the callback took in all: the curve (when computed here) and every
        #: evaluation.
        self.eval_seconds = 0.0
        #: Seconds of the curve computed when training started (0 when given or tabular).
        self.curve_seconds = 0.0
        if env is not None:
            self.mdp = self._build_mdp(env)
        elif curve is not None:
            raise ValueError("curve= needs env= (the environment the curve was computed for).")

    # ------------------------------------------------------------------ set-up
    def _build_mdp(self, env: Any) -> Any:
        from imitation_meg.continuous.score import as_mdp, is_continuous

        if is_continuous(env):
            mdp, self._env = as_mdp(env)  # the observations of its states
            return mdp
        if isinstance(env, TabularMDP):
            mdp = env if self.horizon is None else env.with_horizon(self.horizon)
        else:
            made = make_env(env, self.env_kwargs)  # an id gymnasium cannot make: refused here
            if not _has_tables(made):
                self._prepare_curve(env, made)
                return None
            self._env = made
            mdp = TabularMDP.from_env(made, horizon=self.horizon)
        if mdp.utility is None:
            raise ValueError(f"{mdp.name} has no utility to measure MEG against.")
        return mdp

    def _prepare_curve(self, env: Any, made: Any) -> None:
        """An environment that is not tabular: check now that a curve can serve it (a given
        one for this environment, or a simulator to compute one when training starts)."""
        from imitation_meg.approx.known import as_curve
        from imitation_meg.approx.rollouts import EnvSource
        from imitation_meg.approx.simulators import dynamics_for

        if self.unknown:
            raise ValueError(
                "unknown=True needs a tabular environment; an environment that is not tabular is "
                "scored with its known utility through its soft-value curve."
            )
        key = env if isinstance(env, str) else made.spec.id if made.spec is not None else None
        if key is None:
            raise ValueError(
                "MEGCallback scores an environment that is not tabular by its registered id: "
                "pass env='CartPole-v1' (or the id of yours)."
            )
        source = EnvSource(key, horizon=self.horizon, env_kwargs=self.env_kwargs)
        self.curve = as_curve(self.curve)
        if self.curve is not None:
            self.curve.check_for(
                env=source.name,
                horizon=source.horizon,
                actions=source.actions.to_dict(),
                env_kwargs=source.env_kwargs,
            )
        else:
            dyn, why = dynamics_for(made)
            if dyn is None:
                raise ValueError(
                    f"MEGCallback scores {source.name}, which is not tabular, through its "
                    f"soft-value curve, and none can be computed for it: {why}. Pass curve=FILE "
                    "(imitation-meg curve), or score saved checkpoints with imitation-meg score."
                )
        made.close()
        self._curve_env = source

    def _training_env_source(self) -> Any:
        from stable_baselines3.common.vec_env import VecEnvWrapper

        venv = self.training_env
        while isinstance(venv, VecEnvWrapper):
            venv = venv.venv
        envs = getattr(venv, "envs", None)
        if envs:
            return envs[0]
        spec = venv.get_attr("spec", indices=[0])[0]
        if spec is None:
            raise ValueError(
                "MEGCallback(env=None) needs the training environment's id, but it has no spec; "
                "pass env= (an id, a gymnasium env or a TabularMDP)."
            )
        return spec.id

    def _init_callback(self) -> None:
        if self.mdp is None and self._curve_env is None:
            self.mdp = self._build_mdp(self._training_env_source())
        if self._curve_env is not None and self.curve is None:
            from imitation_meg.approx.known import soft_value_curve

            src = self._curve_env
            t0 = time.perf_counter()
            self.curve = soft_value_curve(
                src.name, horizon=src.horizon, env_kwargs=src.env_kwargs, seed=self.seed
            )
            self.curve_seconds = time.perf_counter() - t0
            self.eval_seconds += self.curve_seconds

    def _on_training_start(self) -> None:
        if self.eval_at_start:
            self.evaluate()

    def _on_step(self) -> bool:
        if self.n_calls % self.eval_freq == 0:
            self.evaluate()
        return True

    # ------------------------------------------------------------------ evaluation
    def _epsilon(self) -> float | None:
        policy = self.model.policy
        if hasattr(policy, "get_distribution") or not (
            hasattr(policy, "q_net") or hasattr(policy, "quantile_net")
        ):
            return None
        if self.epsilon is not None:
            return float(self.epsilon)
        schedule = getattr(self.model, "exploration_schedule", None)
        if self.num_timesteps == 0 and schedule is not None:
            # SB3 sets exploration_rate at the first step (0 until then); the first actions
            # explore with the schedule's start
            return float(schedule(1.0))
        return float(getattr(self.model, "exploration_rate", 0.0))

    def evaluate(self) -> dict[str, Any]:
        """Score the current policy, record it to the logger (and the history), return it."""
        import imitation_meg as im
        from imitation_meg.adapters import policy_table

        assert self.mdp is not None or self.curve is not None, (
            "MEGCallback is not initialised (call model.learn)."
        )
        t0 = time.perf_counter()
        if self.mdp is None:
            return self._log(self._curve_record(), t0)
        if not isinstance(self.mdp, TabularMDP):  # Box actions: exact continuous MEG
            from imitation_meg.continuous.score import exact_record

            box = exact_record(
                self.model, self.mdp, self._env, noise_std=self.noise_std, unknown=self.unknown
            )
            return self._log({"timesteps": int(self.num_timesteps), **box}, t0)
        with warnings.catch_warnings():
            if self.records:  # a RecurrentPPO's warning once, not at every evaluation
                from imitation_meg.adapters.contrib import RecurrentPolicyWarning

                warnings.simplefilter("ignore", RecurrentPolicyWarning)
            epsilon = self._epsilon()
            pi = policy_table(self.model, self.mdp, epsilon=epsilon, env=self._env)
        known = im.meg(pi, self.mdp)
        record = self._record(
            known, epsilon, known.expected_utility, known.upper_bound, converged=known.converged
        )
        if self.unknown:
            res = im.meg_unknown(pi, self.mdp)
            record["unknown"] = res.meg
            record["converged"] = record["converged"] and bool(res.converged)
        return self._log(record, t0)

    def _curve_record(self) -> dict[str, Any]:
        """MEG of the current policy from its episodes and the environment's curve."""
        from imitation_meg.approx.known import meg_approx

        src = self._curve_env
        epsilon = self._epsilon()
        res = meg_approx(
            self.model,
            src.name,
            horizon=src.horizon,
            env_kwargs=src.env_kwargs or None,
            epsilon=epsilon,
            curve=self.curve,
            n_eval_episodes=self.n_eval_episodes,
            seed=self.seed + len(self.records),
        )
        if res.curve is not None:  # extended to this policy's return: keep the longer ladder
            self.curve = res.curve
        return self._record(
            res,
            epsilon,
            res.expected_return,
            res.upper_bound,
            converged=res.settled,
            low=res.low,
            high=res.high,
        ) | {"timings": dict(res.timings)}

    def _record(
        self,
        result: Any,
        epsilon: float | None,
        expected_return: float,
        upper_bound: float | None,
        **fields: Any,
    ) -> dict[str, Any]:
        """The record of one evaluation: the time step, :func:`~imitation_meg.results.meg_record`
        of ``result`` and the ``epsilon`` the policy was read with (when one was)."""
        record: dict[str, Any] = {
            "timesteps": int(self.num_timesteps),
            **meg_record(
                result, expected_return=expected_return, upper_bound=upper_bound, **fields
            ),
        }
        if epsilon is not None:
            record["epsilon"] = epsilon
        return record

    def _log(self, record: dict[str, Any], t0: float) -> dict[str, Any]:
        """Record an evaluation to the logger (and the history), and return it."""
        seconds = time.perf_counter() - t0
        self.eval_seconds += seconds
        record["eval_seconds"] = seconds

        self.logger.record("meg/known", record["meg"])
        if "low" in record:  # an estimate: its interval
            self.logger.record("meg/low", record["low"])
            self.logger.record("meg/high", record["high"])
        self.logger.record("meg/normalized", record["normalized"])
        self.logger.record("meg/beta", record["beta"])
        self.logger.record("meg/expected_return", record["expected_return"])
        if self.unknown:
            self.logger.record("meg/unknown", record["unknown"])
        self.logger.record("meg/converged", int(record["converged"]))
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(self.num_timesteps)
        if self.verbose >= 1:
            extra = f", unknown {record['unknown']:.4f}" if self.unknown else ""
            print(
                f"MEG at {self.num_timesteps} steps: known {record['meg']:.4f} (normalized "
                f"{record['normalized']:.4f}{extra}), expected return "
                f"{record['expected_return']:.4f}"
            )
        self.records.append(record)
        if self.history is not None:
            from imitation_meg.results import to_jsonable

            with self.history.open("a") as f:
                f.write(json.dumps(to_jsonable(record), allow_nan=False) + "\n")
        return record
