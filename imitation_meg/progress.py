"""Optional progress bars (tqdm when installed) for long computations and studies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

__all__ = ["progress"]

T = TypeVar("T")


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
