"""Environment ids across gymnasium releases.

gymnasium 1.x bumped the versions of some toy-text environments (``CliffWalking-v0`` ->
``CliffWalking-v1``, ``Taxi-v3`` -> ``Taxi-v4``) and removed the old ids, so code and docs that
must run on both the pinned stack (gymnasium 0.29) and the current one ask for the id the
installed gymnasium registers.
"""

from __future__ import annotations

__all__ = ["registered_id"]


def registered_id(name: str) -> str:
    """The newest registered id of a gymnasium environment family.

    Args:
        name: the id without its version (``"Taxi"``, ``"CliffWalking"``, ``"FrozenLake"``).

    Returns:
        e.g. ``"Taxi-v3"`` under gymnasium 0.29, ``"Taxi-v4"`` under gymnasium 1.x.

    Raises:
        ValueError: no registered id of that family.

    Example:
        >>> registered_id("FrozenLake")
        'FrozenLake-v1'
    """
    import gymnasium as gym

    prefix = f"{name}-v"
    versions = {
        int(key[len(prefix) :]): key
        for key in gym.registry
        if key.startswith(prefix) and key[len(prefix) :].isdigit()
    }
    if not versions:
        raise ValueError(f"gymnasium {gym.__version__} registers no {name!r} environment.")
    return versions[max(versions)]
