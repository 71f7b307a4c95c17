"""Convert seals tabular environments and gymnasium toy-text environments to TabularMDP."""

from __future__ import annotations

from typing import Any

import torch as th

from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import Device, EnvLike

__all__ = ["mdp_from_env"]


def mdp_from_env(
    env_or_id: EnvLike,
    *,
    horizon: int | None = None,
    dtype: th.dtype = th.float64,
    device: Device | None = None,
    **make_kwargs: Any,
) -> TabularMDP:
    """See :meth:`TabularMDP.from_env`."""
    return TabularMDP.from_env(
        env_or_id, horizon=horizon, dtype=dtype, device=device, **make_kwargs
    )
