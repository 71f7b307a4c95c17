"""Two ways to cheapen the linear solves of discounted unknown-utility MEG, measured (neither is used).

Unknown-utility MEG over every state utility in the discounted setting spends most of its time in
BiCGSTAB solves of ``(I - gamma P_pi) x = b`` and its transpose, two per Hessian-vector product
(docs/benchmark.md, "The discounted infinite-horizon setting"). This script runs the solve with
one of them changed and prints the time, the MEG and the solver's counts:

- ``--hvp-rtol R``: the Hessian-vector products' solves to a relative residual ``R`` instead of
  ``1e-13`` (values and gradients keep ``1e-13``);
- ``--ilu DROP FILL``: BiCGSTAB preconditioned by an incomplete LU factorisation of the matrix
  (``scipy.sparse.linalg.spilu(drop_tol=DROP, fill_factor=FILL)``, built once per policy).

Usage::

    python benchmarks/discounted_solves.py 1e4                     # the solver as it is
    python benchmarks/discounted_solves.py 1e4 --hvp-rtol 1e-10
    python benchmarks/discounted_solves.py 1e4 --ilu 1e-3 5
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from imitation_meg.core import discounted

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench

__all__ = ["main", "run"]


def run(
    n_states: int, *, hvp_rtol: float | None = None, ilu: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The benchmark's discounted row (:func:`bench.row_meg_discounted` at discount 0.9: known
    and every-state-utility MEG of the epsilon-greedy (0.3) policy on a random sparse MDP) with
    the solves changed as asked, and the solves' counts; the module's solver is restored
    afterwards."""
    counts: dict[str, Any] = {"solves": 0, "bicgstab_steps": 0, "ilu_build_s": 0.0}
    in_hvp = [False]
    rtol = discounted._KRYLOV_RTOL

    class Solver(discounted._PolicySolver):
        def __init__(self, M: sp.csc_matrix) -> None:
            super().__init__(M)
            self._pre: dict[bool, Any] = {}
            if self.lu is None and ilu is not None:
                t0 = time.perf_counter()
                fac = spla.spilu(M.tocsc(), drop_tol=ilu[0], fill_factor=ilu[1])
                self._pre[False] = spla.LinearOperator(M.shape, fac.solve)
                self._pre[True] = spla.LinearOperator(M.shape, lambda b: fac.solve(b, trans="T"))
                counts["ilu_build_s"] += time.perf_counter() - t0

        def solve(self, b: np.ndarray, *, transpose: bool = False) -> np.ndarray:
            if self.lu is not None:
                return super().solve(b, transpose=transpose)
            M, pre = self._M[transpose], self._pre.get(transpose)
            tol = hvp_rtol if in_hvp[0] and hvp_rtol is not None else rtol
            steps = [0]

            def count(_: Any) -> None:
                steps[0] += 1

            x, info = spla.bicgstab(M, b, rtol=tol, atol=0.0, maxiter=2000, M=pre, callback=count)
            counts["solves"] += 1
            counts["bicgstab_steps"] += steps[0]
            if info != 0:  # as the library does: GMRES, then Neumann sweeps
                x, info = spla.gmres(M, b, x0=x, rtol=tol, atol=0.0, restart=50, maxiter=50, M=pre)
                if info != 0:
                    x = discounted._neumann(M, b, x)
            return np.asarray(x)

    objective = discounted.DiscountedClassObjective
    plain_hvp = objective.neg_hvp

    def neg_hvp(self: Any, v: Any) -> Any:
        in_hvp[0] = True
        try:
            return plain_hvp(self, v)
        finally:
            in_hvp[0] = False

    plain_solver = discounted._PolicySolver
    discounted._PolicySolver = Solver  # type: ignore[misc]
    objective.neg_hvp = neg_hvp  # type: ignore[method-assign]
    try:
        row = bench.row_meg_discounted(n_states, 0.9)
    finally:
        discounted._PolicySolver = plain_solver  # type: ignore[misc]
        objective.neg_hvp = plain_hvp  # type: ignore[method-assign]
    return {**row, "hvp_rtol": hvp_rtol, "ilu": ilu, **counts}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n_states", help="states of the random MDP, e.g. 1e4")
    parser.add_argument("--hvp-rtol", type=float, default=None)
    parser.add_argument("--ilu", type=float, nargs=2, default=None, metavar=("DROP", "FILL"))
    args = parser.parse_args(argv)
    ilu = None if args.ilu is None else (args.ilu[0], args.ilu[1])
    print(json.dumps(run(int(float(args.n_states)), hvp_rtol=args.hvp_rtol, ilu=ilu)))


if __name__ == "__main__":
    main()
