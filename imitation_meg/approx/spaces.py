"""The uniform reference of an action space: what MEG's models are measured against.

MEG compares a policy's actions with uniformly random ones: ``1 / |A|`` for ``Discrete``
actions, the uniform density ``1 / vol(box)`` for a bounded ``Box``. The estimators beyond
tabular environments need only three things of the action space, which
:class:`ActionSpace` gives for both kinds: draws of uniform actions, the log of the reference's
normaliser (``log|A|`` or ``log vol``), and the shape of an action batch.

- :class:`DiscreteActions`: ``n`` actions, drawn as integers ``(m,)``.
- :class:`BoxActions`: a bounded box, drawn as floats ``(m, d)``.
- :func:`action_space_of`: the :class:`ActionSpace` of a gymnasium space, or a ``TypeError`` /
  ``ValueError`` that says why MEG has no uniform reference there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["ActionSpace", "BoxActions", "DiscreteActions", "action_space_of"]


class ActionSpace:
    """An action space with a uniform reference (base class; see the two kinds below).

    Attributes:
        log_measure: ``log|A|`` (discrete) or ``log vol(box)`` (box): the per-decision
            normaliser of the uniform reference.
        is_box: whether actions are points of a box.
        describe: a short description for messages and files (``"Discrete(3)"``,
            ``"Box([-2.0], [2.0])"``).
    """

    log_measure: float
    is_box: bool

    def sample(self, rng: np.random.Generator, m: int) -> np.ndarray:
        """``m`` uniformly random actions (``(m,)`` integers or ``(m, d)`` floats)."""
        raise NotImplementedError

    @property
    def describe(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (the curve files record it)."""
        raise NotImplementedError


class DiscreteActions(ActionSpace):
    """``n`` actions ``0 .. n - 1``; the reference puts ``1 / n`` on each.

    Raises:
        ValueError: ``n < 1``.
    """

    is_box = False

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"a Discrete action space needs n >= 1 actions, got {n!r}.")
        self.n = int(n)
        self.log_measure = math.log(self.n)

    def sample(self, rng: np.random.Generator, m: int) -> np.ndarray:
        return rng.integers(0, self.n, size=m)

    def all_actions(self) -> np.ndarray:
        """Every action once, ``(n,)``."""
        return np.arange(self.n)

    @property
    def describe(self) -> str:
        return f"Discrete({self.n})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "discrete", "n": self.n}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiscreteActions) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("discrete", self.n))


class BoxActions(ActionSpace):
    """A bounded box ``[low, high]`` of ``d`` dimensions; the reference is its uniform density.

    Args:
        low, high: ``(d,)`` finite bounds with ``low < high``.

    Raises:
        ValueError: infinite bounds, ``low >= high`` somewhere, or mismatched shapes.
    """

    is_box = True

    def __init__(self, low: Any, high: Any) -> None:
        lo = np.asarray(low, dtype=np.float64).reshape(-1)
        hi = np.asarray(high, dtype=np.float64).reshape(-1)
        if lo.shape != hi.shape or lo.size == 0:
            raise ValueError(
                f"a Box action space needs bounds of one shape (d,), got {lo.shape} and {hi.shape}."
            )
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ValueError(
                f"MEG against the uniform density needs a bounded box, got low={lo.tolist()}, "
                f"high={hi.tolist()}."
            )
        if not np.all(lo < hi):
            raise ValueError(f"a Box needs low < high, got low={lo.tolist()}, high={hi.tolist()}.")
        self.low, self.high = lo, hi
        self.dim = int(lo.size)
        self.log_measure = float(np.log(hi - lo).sum())

    def sample(self, rng: np.random.Generator, m: int) -> np.ndarray:
        return self.low + (self.high - self.low) * rng.random((m, self.dim))

    @property
    def describe(self) -> str:
        return f"Box({self.low.tolist()}, {self.high.tolist()})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "box", "low": self.low.tolist(), "high": self.high.tolist()}

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BoxActions)
            and np.array_equal(other.low, self.low)
            and np.array_equal(other.high, self.high)
        )

    def __hash__(self) -> int:
        return hash(("box", tuple(self.low), tuple(self.high)))


def action_space_of(space: Any, *, name: str = "the environment") -> ActionSpace:
    """The :class:`ActionSpace` of a gymnasium ``Discrete`` or bounded ``Box`` space.

    Raises:
        TypeError: another kind of space (MEG needs a uniform reference on it).
        ValueError: a ``Discrete`` space that does not start at 0, or an unbounded box.
    """
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        if int(getattr(space, "start", 0)) != 0:
            raise ValueError(
                f"{name}'s Discrete action space starts at {int(space.start)}; the estimators "
                "number actions from 0 (wrap the environment to shift them)."
            )
        return DiscreteActions(int(space.n))
    if isinstance(space, gym.spaces.Box):
        try:
            return BoxActions(space.low, space.high)
        except ValueError as e:
            raise ValueError(f"{name}'s action space {space}: {e}") from None
    raise TypeError(
        f"{name} has a {type(space).__name__} action space ({space}); MEG needs Discrete actions "
        "or a bounded Box (a uniform reference to compare the policy with)."
    )
