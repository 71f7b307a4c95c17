"""The paper's example diagrams, built with :mod:`imitation_meg.cid`.

- :func:`mouse`: Example 1 / Figure 1 (cheese position ``S``, move ``D``, cheese obtained ``T``,
  utility ``+1`` for the cheese and ``-1`` otherwise).
- :func:`mouse_pomdp`: Example 2 / Figure 2 (two moves guided by a noisy smell), with or without
  memory of the first observation and move.
"""

from __future__ import annotations

from imitation_meg.cid.model import CBN, CID, Chance, Decision, Utility

__all__ = ["mouse", "mouse_cbn", "mouse_pomdp"]

SIDES = ("left", "right")


def mouse(*, p_left: float = 0.5) -> CID:
    """The mouse of Example 1 as a three-variable CID plus its utility.

    Args:
        p_left: probability that the cheese is on the left.

    Returns:
        ``S`` (cheese side) -> ``D`` (move) -> ``T`` (``"cheese"`` iff ``D == S``) -> ``U``
        (``+1`` / ``-1``).
    """
    return CID(
        [
            Chance("S", SIDES, cpd=[p_left, 1.0 - p_left]),
            Decision("D", SIDES, parents=["S"]),
            Chance(
                "T",
                ("no cheese", "cheese"),
                parents=["S", "D"],
                cpd=lambda S, D: "cheese" if S == D else "no cheese",
            ),
            Utility("U", ["T"], table=[-1.0, 1.0]),
        ],
        name="mouse",
    )


def mouse_cbn(p_towards: float) -> CBN:
    """The mouse as a CBN (Figure 1b): the mouse moves towards the cheese with ``p_towards``."""
    return CBN(
        [
            Chance("S", SIDES, cpd=[0.5, 0.5]),
            Chance(
                "D",
                SIDES,
                parents=["S"],
                cpd=lambda S: {S: p_towards, SIDES[1 - SIDES.index(S)]: 1.0 - p_towards},
            ),
            Chance(
                "T",
                ("no cheese", "cheese"),
                parents=["S", "D"],
                cpd=lambda S, D: "cheese" if S == D else "no cheese",
            ),
        ],
        name="mouse CBN",
    )


def mouse_pomdp(*, smell_accuracy: float = 0.8, memory: bool = True) -> CID:
    """Example 2: the cheese is at the far left or right of a 5-cell corridor; the mouse starts
    in the middle, smells the cheese's direction correctly with ``smell_accuracy`` (``O1``,
    ``O2``) and moves twice (``D1``, ``D2``); ``U`` is ``+1`` if it ends next to the cheese.

    Args:
        smell_accuracy: probability that a smell points the right way.
        memory: ``D2`` also observes ``O1`` and ``D1`` (perfect recall). Without memory the
            second move does not know the first, and where it stands depends on the first
            move's rule: insufficient recall (backward induction refuses it).
    """
    acc = smell_accuracy

    def smell(C: str) -> dict[str, float]:
        return {C: acc, SIDES[1 - SIDES.index(C)]: 1.0 - acc}

    def step(pos: int, move: str) -> int:
        return pos - 1 if move == "left" else pos + 1

    def step2(X2: int, D2: str) -> int:  # arguments named like the parents
        return step(X2, D2)

    nodes: list[Chance | Decision | Utility] = [
        Chance("C", SIDES, cpd=[0.5, 0.5]),
        Chance("O1", SIDES, parents=["C"], cpd=smell),
        Decision("D1", SIDES, parents=["O1"]),
        Chance("X2", (1, 3), parents=["D1"], cpd=lambda D1: step(2, D1)),
        Chance("O2", SIDES, parents=["C"], cpd=smell),
        Decision("D2", SIDES, parents=["O1", "D1", "O2"] if memory else ["O2"]),
        Chance("X3", (0, 2, 4), parents=["X2", "D2"], cpd=step2),
        Utility(
            "U",
            ["C", "X3"],
            table=lambda C, X3: 1.0 if (0 if C == "left" else 4) == X3 else -1.0,
        ),
    ]
    return CID(nodes, name="mouse POMDP" + ("" if memory else " (no memory)"))
