"""``imitation-meg score`` for environments that are not tabular (or with ``--approx``).

The command line parses the arguments; :func:`score_approx` does the work for ``Discrete``
actions and bounded boxes alike: it loads the policy, runs :func:`~imitation_meg.approx.
meg_approx` with a progress bar (whose rate gives the time estimate), prints the estimate with
its interval and diagnostics, and writes JSON on request.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

__all__ = ["estimator_settings", "is_tabular", "score_approx"]

from imitation_meg.cli.approx_report import how as _how
from imitation_meg.cli.approx_report import print_result
from imitation_meg.cli.common import command_config, write_rows
from imitation_meg.core.env_tables import is_tabular  # re-exported, as before

#: Built-in policies the approximate path can score (it has no tabular MDP for the others).
APPROX_POLICIES = ("uniform",)
#: Settings that have their own flag (or none) and so no ``--approx-option``.
_OWN_FLAGS = {"seed": "--seed", "horizon": "--horizon", "progress": "(always shown)"}


def estimator_settings(items: Sequence[str] | None, allowed: Collection[str]) -> dict[str, Any]:
    """The ``--approx-option KEY=VALUE`` items as keyword arguments of an estimator.

    Values are read as YAML (``4``, ``0.5``, ``true``, ``[64, 64]``; lists become tuples); a key
    may be given once. Their values are checked by the estimator's own options.

    Raises:
        ValueError: an item without ``=``, a key given twice, a key that has its own flag, a
            key that names no setting in ``allowed`` (the message lists them), malformed YAML.
    """
    from imitation_meg.runners.config import parse_yaml_value

    out: dict[str, Any] = {}
    for item in items or ():
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(
                f"--approx-option {item!r} must be KEY=VALUE, e.g. --approx-option refine=4."
            )
        if key in _OWN_FLAGS:
            raise ValueError(
                f"--approx-option {key}=...: {key} is set by {_OWN_FLAGS[key]}, not here."
            )
        if key not in allowed:
            raise ValueError(
                f"--approx-option {key!r} is not a setting of this estimator; its settings are "
                f"{sorted(allowed)}."
            )
        if key in out:
            raise ValueError(f"--approx-option {key} is given twice; give it once.")
        value = parse_yaml_value(text, where=f"--approx-option {item!r}")
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


def _sources(args: argparse.Namespace) -> list[str]:
    """The policies named by ``--policy`` (globs expanded in natural order)."""
    from imitation_meg.scoring import expand_sources

    names = args.policy if isinstance(args.policy, list) else [args.policy]
    return expand_sources(names)


def _policy(args: argparse.Namespace, source: Any, name: str) -> tuple[Any, str, dict[str, Any]]:
    """The scored policy, its label and the keyword arguments of
    :func:`~imitation_meg.approx.meg_approx` that read it: for ``Discrete`` actions its
    probabilities (with ``--epsilon``); for a box the policy itself with ``algo`` and
    ``noise_std`` (``--noise-std`` smooths a deterministic agent), read by ``meg_approx``."""
    if source.actions.is_box:
        return _box_policy(args, name)
    if getattr(args, "noise_std", None) is not None:
        raise ValueError("--noise-std applies to deterministic agents in Box action spaces.")
    n_actions = source.n_actions
    if name in APPROX_POLICIES:
        if args.algo is not None or args.epsilon is not None:
            raise ValueError(f"--algo / --epsilon apply to a saved model, not to {name!r}.")

        def uniform(obs: Any) -> np.ndarray:
            return np.full((len(obs), n_actions), 1.0 / n_actions)

        return uniform, name, {}
    _no_tabular_policy(name, "(drop --approx)")
    from imitation_meg.approx.policy import as_policy_fn

    label = _saved_label(args, name)
    pol = as_policy_fn(name, n_actions=n_actions, algo=args.algo, epsilon=args.epsilon)
    if args.epsilon is not None:
        label += f" (epsilon {args.epsilon:g})"
    return pol, label, {}


def _box_policy(args: argparse.Namespace, name: str) -> tuple[Any, str, dict[str, Any]]:
    """A policy acting in a box: its name (or ``"uniform"``) with ``algo`` and ``noise_std``
    for :func:`~imitation_meg.approx.meg_approx`, which reads its action laws."""
    noise = getattr(args, "noise_std", None)
    if getattr(args, "epsilon", None) is not None:
        raise ValueError(
            "--epsilon applies to Discrete actions; smooth a Box agent with --noise-std."
        )
    if name in APPROX_POLICIES:
        if args.algo is not None or noise is not None:
            raise ValueError(f"--algo / --noise-std apply to a saved model, not to {name!r}.")
        return name, name, {}
    _no_tabular_policy(name, "(a deterministic policy has no density on a box)")
    label = _saved_label(args, name)
    if noise is not None:
        label += f" (noise std {noise:g})"
    return name, label, {"algo": args.algo, "noise_std": noise}


def _no_tabular_policy(name: str, why: str) -> None:
    if name in ("optimal", "epsilon-greedy"):
        raise ValueError(
            f"--policy {name!r}: the approximate estimator scores a saved SB3 model or one of "
            f"{list(APPROX_POLICIES)}; 'optimal' and 'epsilon-greedy' need a tabular environment "
            f"{why}."
        )


def _model_file(name: str) -> str:
    """The ``.zip`` of a saved model or of an RL Zoo run folder."""
    from imitation_meg.adapters.zoo import is_zoo_run, read_zoo_run

    return str(read_zoo_run(name).model) if is_zoo_run(name) else name


def _saved_label(args: argparse.Namespace, name: str) -> str:
    """``"PPO path.zip"``: the algorithm (``--algo``, else read from the file) and the name."""
    from imitation_meg.adapters.saved_models import read_model_info

    algo = args.algo or read_model_info(_model_file(name)).algo or "model"
    return f"{str(algo).upper()} {name}"


def _checked_mode(args: argparse.Namespace, settings: dict[str, Any], *, box: bool) -> bool:
    """Refuse what the approximate path does not support (named in the message); True for
    ``--mode unknown`` (every utility of the observation, through the empirical MDP; ``box``:
    the actions are a box, scored for the known utility only)."""
    from imitation_meg.approx.unknown import OBSERVATION_METHODS

    if box:
        if args.mode != "known":
            raise ValueError(f"--mode {args.mode} is not available for Box actions (known only).")
        if getattr(args, "action_masks", None):
            raise ValueError("--action-masks applies to Discrete actions.")
    if args.mode not in ("known", "unknown"):
        raise ValueError(
            f"--mode {args.mode} is not available with the approximate estimator (--mode known, "
            "or --mode unknown with --approx-option method=empirical)."
        )
    if args.mode == "unknown" and settings.get("method") not in OBSERVATION_METHODS:
        raise ValueError(
            "--mode unknown with --approx scores every utility of the observation through the "
            "empirical MDP: add --approx-option method=empirical (observations that take few "
            "values), or use imitation_meg.approx.meg_approx_unknown from Python for a lower "
            "bound from soft Q-fits."
        )
    for opt in ("signed", "rollouts", "target", "vec_normalize"):
        if getattr(args, opt, None):
            raise ValueError(f"--{opt.replace('_', '-')} is not available with --approx.")
    return args.mode == "unknown"


def _environment_curve(
    args: argparse.Namespace,
    source: Any,
    curve_file: str | None,
    curve_settings: dict[str, Any],
) -> tuple[Any, str]:
    """The environment's soft-value curve, read from ``curve_file`` (checked against the
    environment) or computed once, and how it was had, in words."""
    from imitation_meg.approx.known import as_curve, soft_value_curve
    from imitation_meg.approx.simulators import simulator

    t0 = time.perf_counter()
    if curve_file is not None:
        if curve_settings:
            raise ValueError(
                f"--approx-option {sorted(curve_settings)} set how a curve is computed; with "
                "--curve FILE the curve is read. Drop one of them."
            )
        curve = as_curve(curve_file)
        assert curve is not None
        curve.check_for(
            env=source.name,
            horizon=source.horizon,
            actions=source.actions.to_dict(),
            env_kwargs=source.env_kwargs,
        )
        how = f"read from {curve_file}"
    else:
        if simulator(source)[0] is None and not is_tabular(source.name):
            raise ValueError(
                f"several policies are scored with one soft-value curve of the environment, and "
                f"no curve can be computed for {source.name} (no simulator of it); score them "
                "one at a time with --approx."
            )
        print(f"Computing the soft-value curve of {source.name} (H={source.horizon}) once ...")
        curve = soft_value_curve(
            source.name,
            horizon=source.horizon,
            env_kwargs=source.env_kwargs or None,
            seed=args.seed,
            progress=True,
            **curve_settings,
        )
        how = f"computed in {time.perf_counter() - t0:.1f} s"
    return curve, how


def _print_curve_rows(rows: list[dict[str, Any]], seconds: float) -> None:
    """The table of a curve score's rows, and its note on unsettled rows."""
    from imitation_meg.results import format_table

    columns = ["policy", "timesteps", "meg", "low", "high", "beta", "expected_return", "settled"]
    shown = [{c: ("" if r.get(c) is None else r[c]) for c in columns} for r in rows]
    print(format_table(shown, columns))
    print(f"\n{len(rows)} policies in {seconds:.1f} s.")
    if any(r["settled"] is False for r in rows):
        print(
            "\n(settled = False: the curve is not reliable at that policy's optimum; the "
            "warning says why.)"
        )


def _write_curve_rows(
    args: argparse.Namespace, source: Any, curve: Any, rows: list[dict[str, Any]]
) -> None:
    """The rows as ``--csv`` / ``--jsonl``, and with the curve and the settings as ``--json``."""
    write_rows(args, rows, {"env": source.name, "curve": curve.info.to_dict()})


def _score_with_curve(
    args: argparse.Namespace,
    source: Any,
    sources: list[str],
    curve_file: str | None,
    kwargs: dict[str, Any],
) -> int:
    """Several policies (checkpoints) of one environment, or one with ``--curve FILE``: the
    environment's curve read or computed once, then each policy from its episodes alone; one
    row per policy (``--csv`` / ``--jsonl``)."""
    from imitation_meg.approx.known import meg_approx

    t0 = time.perf_counter()
    curve_settings: dict[str, Any] = {
        k: kwargs.pop(k) for k in ("n_particles", "n_starts") if k in kwargs
    }
    curve, how = _environment_curve(args, source, curve_file, curve_settings)
    lo, hi = curve.trusted_returns()
    print(
        f"Soft-value curve of {source.name}: {curve.info.method}, {curve.n_units} unit(s), "
        f"trusted for mean returns in [{lo:.6g}, {hi:.6g}]; {how}.\n"
    )
    kwargs.pop("n_models", None)
    rows = []
    for name in sources:
        policy, label, reading = _policy(args, source, name)
        t1 = time.perf_counter()
        res = meg_approx(
            policy,
            args.env,  # the id: the curve checks that it was computed for this environment
            horizon=source.horizon,
            env_kwargs=source.env_kwargs or None,
            seed=args.seed,
            curve=curve,
            **reading,
            **kwargs,
        )
        rows.append(_curve_row(name, label, res, time.perf_counter() - t1))
        if res.curve is not None:  # extended to this policy's return: the next ones keep it
            curve = res.curve
    _print_curve_rows(rows, time.perf_counter() - t0)
    _write_curve_rows(args, source, curve, rows)
    return 0


def _announce(
    args: argparse.Namespace, source: Any, label: str, words: tuple[str, str], *, unknown: bool
) -> None:
    """The line that says what is scored, how, and what the progress bar counts."""
    how, counts = words
    box = source.actions.is_box
    what = "every utility of the observation" if unknown else "the environment reward"
    acts = (
        f"Box of {source.action_dim} dimension(s) [{source.low.tolist()}, "
        f"{source.high.tolist()}], reference: the uniform density on it"
        if box
        else f"|A|={source.n_actions}"
    )
    print(
        f"Approximate {args.mode}-utility MEG of {label} in {source.name} "
        f"({acts}, H={source.horizon}; utility: {what}; {how})\n"
        f"The bar counts {counts}; its remaining time is the time estimate.",
        flush=True,
    )


def _write_result(args: argparse.Namespace, source: Any, label: str, res: Any) -> None:
    """The result, the settings and the library versions as ``--json``."""
    from imitation_meg.results import library_versions, write_json

    config = command_config(args)
    payload = {
        "meg": res.meg,
        "mode": f"{args.mode} (approximate)",
        "policy": label,
        "env": source.name,
        "config": config,
        "library_versions": library_versions(),
        "result": res.to_dict(),
    }
    path = write_json(args.json, payload)
    print(f"\nWrote {path}.")


def _env_source(args: argparse.Namespace) -> Any:
    """The gymnasium environment ``--env`` names, with the horizon and keyword arguments."""
    from imitation_meg.approx.rollouts import EnvSource

    if args.env is None:
        raise ValueError("--approx needs --env ENV_ID (a gymnasium id), not --cliff-world.")
    return EnvSource(
        args.env, horizon=args.horizon, env_kwargs=getattr(args, "env_kwargs", None) or None
    )


def _uses_paths(source: Any, method: str | None, *, unknown: bool) -> bool:
    """Whether the paths method scores (the default where the environment has a simulator)."""
    from imitation_meg.approx.simulators import simulator

    return not unknown and method in (None, "auto", "paths") and simulator(source)[0] is not None


def _threads_for(method: str | None) -> None:
    """One torch thread for the methods that train networks: 64-unit networks train fastest on
    one thread, more only contend on small machines (the linear method's fits and the empirical
    MDP's bootstrap solves run side by side, one per torch thread, ``_threads.parallel_map``;
    "auto" may hand over to the networks)."""
    if method not in ("linear", "empirical"):
        import torch as th

        th.set_num_threads(1)


def _estimate(
    args: argparse.Namespace,
    source: Any,
    policy: Any,
    kwargs: dict[str, Any],
    reading: dict[str, Any],
    *,
    unknown: bool,
) -> Any:
    """The approximate estimate of ``policy``: every utility of the observation (``unknown``)
    or the environment reward."""
    from imitation_meg.approx.known import meg_approx
    from imitation_meg.approx.unknown import meg_approx_unknown

    if unknown:
        return meg_approx_unknown(policy, source.make, utility="observation", **kwargs).result
    return meg_approx(policy, args.env, env_kwargs=source.env_kwargs or None, **kwargs, **reading)


def score_approx(args: argparse.Namespace) -> int:
    """Score ``args.policy`` in ``args.env`` with the approximate estimator and print the result.

    Reads ``env``, ``policy``, ``algo``, ``epsilon``, ``horizon``, ``seed``, ``mode``
    (``known``, or ``unknown`` with ``method=empirical``: every utility of the observation),
    ``json``, ``approx_options`` (``--approx-option KEY=VALUE`` items: any
    :class:`~imitation_meg.approx.ApproxOptions` field but ``seed`` and ``progress``) and the
    optional ``approx_models`` / ``approx_episodes`` / ``approx_iterations`` / ``approx_steps``
    (set from Python; not command-line flags).

    Raises:
        ValueError: options the approximate path does not support (named in the message).
    """
    settings = _command_settings(args)
    source = _env_source(args)
    unknown = _checked_mode(args, settings, box=source.actions.is_box)
    _threads_for(settings.get("method"))
    sources = _sources(args)
    curve_file = getattr(args, "curve", None)
    several = curve_file is not None or len(sources) > 1
    if several and unknown:
        raise ValueError("--mode unknown scores one policy, without --curve.")
    method = settings.get("method")
    paths = _uses_paths(source, method, unknown=unknown)
    kwargs = _run_settings(args, source, settings, paths)
    n_models = kwargs.pop("n_models", getattr(args, "approx_models", None) or 3)
    if several:
        return _score_with_curve(args, source, sources, curve_file, kwargs)
    policy, label, reading = _policy(args, source, sources[0])
    _announce(
        args, source, label, _how(method, n_models, paths=paths, unknown=unknown), unknown=unknown
    )
    t0 = time.perf_counter()
    common = {"horizon": source.horizon, "seed": args.seed, "progress": True}
    if not paths:
        common["n_models"] = n_models
    res = _estimate(args, source, policy, {**common, **kwargs}, reading, unknown=unknown)
    print_result(res, time.perf_counter() - t0, unknown=unknown, kwargs=kwargs)
    if args.json:
        _write_result(args, source, label, res)
    if not math.isfinite(res.meg):  # pragma: no cover - defensive
        raise ValueError("the approximate estimate is not finite.")
    return 0


def _command_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--approx-option`` items, checked by the options record before any work."""
    import dataclasses

    from imitation_meg.approx.options import ApproxOptions

    names = {f.name for f in dataclasses.fields(ApproxOptions)}
    settings = estimator_settings(getattr(args, "approx_options", None), names - set(_OWN_FLAGS))
    ApproxOptions.of(None, **settings)  # bad values end here, before any work
    return settings


def _run_settings(
    args: argparse.Namespace, source: Any, settings: dict[str, Any], paths: bool
) -> dict[str, Any]:
    """The estimator's keyword arguments: the command's defaults (fewer evaluation episodes on
    long horizons for the fits), the settings only Python callers set, then the
    ``--approx-option`` items, which win."""
    n_episodes = getattr(args, "approx_episodes", None)
    kwargs: dict[str, Any] = {}
    if n_episodes is not None:
        kwargs = {"n_eval_episodes": n_episodes}
        if not paths:
            kwargs["n_data_steps"] = 30 * n_episodes
    elif source.horizon >= 200 and not paths:  # long episodes: fewer carry as many steps
        kwargs = {"n_eval_episodes": 30 if source.actions.is_box else 60}
    for attr, key in (
        ("approx_iterations", "iterations"),
        ("approx_steps", "steps_per_iteration"),
        ("approx_data", "n_data_steps"),
    ):
        if getattr(args, attr, None) is not None and not paths:
            kwargs[key] = getattr(args, attr)
    kwargs.update(settings)
    return kwargs


def _curve_row(source: str, label: str, res: Any, seconds: float) -> dict[str, Any]:
    """One flat row of a curve score, with the training steps of a saved model."""
    timesteps = None
    model = _model_file(source)
    if model.endswith(".zip"):
        from imitation_meg.adapters.saved_models import read_model_info

        timesteps = read_model_info(model).num_timesteps
    return {
        "policy": label,
        "source": source,
        "timesteps": timesteps,
        "meg": res.meg,
        "low": res.low,
        "high": res.high,
        "confidence": res.confidence,
        "beta": res.beta,
        "expected_return": res.expected_return,
        "certificate": res.certificate,
        "settled": res.settled,
        "method": res.method,
        "n_eval_episodes": res.n_eval_episodes,
        "seconds": seconds,
    }
