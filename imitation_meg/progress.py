"""Optional progress bars (tqdm when installed) for long computations and studies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

__all__ = ["long_pass", "progress"]

T = TypeVar("T")

# Passes of at least this many steps or (step, state, action, column) entries show progress.
_LONG_PASS_WORK = 1 << 28
_LONG_PASS_STEPS = 1 << 15


def long_pass(H: int, work: int) -> bool:
    """Whether a pass of ``H`` steps over ``work`` entries is long enough for a progress bar
    (many steps, each costing ~20 us of calls on small MDPs, or much data)."""
    return H >= _LONG_PASS_STEPS or work >= _LONG_PASS_WORK


def progress(
    items: Iterable[T], enabled: bool = True, desc: str = "", total: int | None = None
) -> Iterable[T]:
    """Wrap an iterable in a tqdm progress bar when ``enabled`` and tqdm is installed."""
    if not enabled:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the experiments extra
        return items
    return tqdm(items, desc=desc, leave=False, total=total)
