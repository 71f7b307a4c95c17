"""Text and image renderings of a :class:`~imitation_meg.symmtom.env.SymmToMEnv` (numpy only)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["AGENT_COLORS", "GridState", "render_ansi", "render_rgb"]


class GridState(Protocol):
    """What a rendering reads of the environment (a ``SymmToMEnv`` has all of it)."""

    width: int
    n_agents: int
    n_pieces: int
    max_steps: int
    timestep: int
    bases: np.ndarray  # (n, 2) int
    positions: np.ndarray  # (n, 2) int
    knowledge: np.ndarray  # (n, c) bool
    first_hand: np.ndarray  # (n, c) bool
    last_said: np.ndarray  # (n,) int, -1 for silence
    last_rewards: np.ndarray  # (n,) float


#: RGB colours of agents 0, 1, ... (cycled when there are more agents).
AGENT_COLORS = np.array(
    [[220, 50, 47], [38, 139, 210], [133, 153, 0], [181, 137, 0], [108, 113, 196], [211, 54, 130]],
    dtype=np.uint8,
)


def render_ansi(env: GridState) -> str:
    """Grid with agents ``0..9`` (``A..`` beyond), bases ``a..``, then knowledge and speech.

    Row ``y = w - 1`` is printed first so that ``+y`` points up. A base under its own or another
    agent shows the agent. Knowledge rows show ``F`` (first hand), ``k`` (second hand), ``.``
    (unknown) per piece.
    """
    w, n = env.width, env.n_agents
    grid = [["." for _ in range(w)] for _ in range(w)]
    for i, (x, y) in enumerate(env.bases):
        grid[y][x] = chr(ord("a") + i % 26)
    for i, (x, y) in enumerate(env.positions):
        grid[y][x] = str(i) if i < 10 else chr(ord("A") + (i - 10) % 26)
    lines = [f"step {env.timestep}/{env.max_steps}", "+" + "-" * w + "+"]
    lines += ["|" + "".join(grid[y]) + "|" for y in range(w - 1, -1, -1)]
    lines.append("+" + "-" * w + "+")
    for i in range(n):
        know = "".join(
            "F" if env.first_hand[i, p] else ("k" if env.knowledge[i, p] else ".")
            for p in range(env.n_pieces)
        )
        said = "-" if env.last_said[i] < 0 else str(int(env.last_said[i]))
        lines.append(
            f"agent {i}: pos={tuple(int(v) for v in env.positions[i])} base={tuple(int(v) for v in env.bases[i])} "
            f"knows={know} said={said} reward={env.last_rewards[i]:g}"
        )
    return "\n".join(lines)


def render_rgb(env: GridState, *, cell: int = 24) -> np.ndarray:
    """An ``(H, W, 3)`` uint8 image: grid (agents filled, bases as frames, a dot for effective
    speech) on the left; a knowledge panel (rows agents, columns pieces; full colour first hand,
    pale second hand, grey unknown) on the right.
    """
    w, n, c = env.width, env.n_agents, env.n_pieces
    pad = cell // 2
    grid_px = w * cell
    panel_w = c * cell + pad
    height = max(grid_px, n * cell) + 2 * pad
    img = np.full((height, grid_px + panel_w + 2 * pad, 3), 255, dtype=np.uint8)

    def box(y0: int, x0: int, size: int, color: np.ndarray, border: int = 0) -> None:
        if border:
            img[y0 : y0 + size, x0 : x0 + border] = color
            img[y0 : y0 + size, x0 + size - border : x0 + size] = color
            img[y0 : y0 + border, x0 : x0 + size] = color
            img[y0 + size - border : y0 + size, x0 : x0 + size] = color
        else:
            img[y0 : y0 + size, x0 : x0 + size] = color

    def cell_origin(x: int, y: int) -> tuple[int, int]:
        return pad + (w - 1 - y) * cell, pad + x * cell

    for x in range(w):
        for y in range(w):
            r, q = cell_origin(x, y)
            box(r, q, cell, np.array([200, 200, 200], np.uint8), border=1)
    for i, (x, y) in enumerate(env.bases):
        r, q = cell_origin(int(x), int(y))
        box(r + 1, q + 1, cell - 2, AGENT_COLORS[i % len(AGENT_COLORS)], border=3)
    for i, (x, y) in enumerate(env.positions):
        r, q = cell_origin(int(x), int(y))
        box(r + 5, q + 5, cell - 10, AGENT_COLORS[i % len(AGENT_COLORS)])
        if env.last_said[i] >= 0:
            box(r + cell // 2 - 2, q + cell // 2 - 2, 4, np.array([255, 255, 255], np.uint8))
    x0 = 2 * pad + grid_px
    for i in range(n):
        color = AGENT_COLORS[i % len(AGENT_COLORS)].astype(int)
        for p in range(c):
            if env.first_hand[i, p]:
                col = color
            elif env.knowledge[i, p]:
                col = (color + 2 * 255) // 3
            else:
                col = np.array([60, 60, 60])
            box(pad + i * cell + 2, x0 + p * cell + 2, cell - 4, col.astype(np.uint8))
    return img
