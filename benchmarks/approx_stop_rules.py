"""What stopping the refits early would have given on the published validation units.

Every validation unit stores the estimate and interval after each fitting stage, and a run with
``refine=k`` reports exactly stage ``k`` of a run with more refits (same seed: the same fits and
bootstrap draws; ``tests/approx/test_approx.py`` checks it). So a rule that stops refitting once
the estimate has settled can be judged on the 120 stored units without refitting: stop at the
first refit ``k >= 1`` whose move ``|stages[k] - stages[k-1]|`` the rule accepts, and report that
stage. Each stage's sampling half-width is read back from its stored interval (the half-width less
the allowance, from an end not clipped to ``[0, certificate]``).

Usage (from the repository root; seconds)::

    python benchmarks/approx_stop_rules.py [docs/results/approx_validation]

Prints, per rule, the share of the fitting stages it runs (1 = all four) and per case and policy
the seeds whose interval holds the exact value, whose error is within 5% of ``H log|A|`` and
within the stricter yardstick (5% of the exact value or 1% of ``H log|A|``).
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from imitation_meg.approx.evaluate import stages_settled
from imitation_meg.runners import load_driver

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: the validation study: its stricter yardstick and its reading of stored intervals
STUDY = load_driver("approx_validation", ROOT / "experiments")

Rule = Callable[[list[float], float, float], bool]

RULES: dict[str, Rule] = {
    "never (the default: all refits)": lambda s, samp, bound: False,
    "settled (sampling half-width or 1% of the bound)": lambda s, samp, bound: bool(
        stages_settled(s, samp, bound)
    ),
    "move <= 1% of the bound": lambda s, samp, bound: abs(s[-1] - s[-2]) <= 0.01 * bound,
    "move <= 0.5% of the bound": lambda s, samp, bound: abs(s[-1] - s[-2]) <= 0.005 * bound,
    "move <= 0.2% of the bound": lambda s, samp, bound: abs(s[-1] - s[-2]) <= 0.002 * bound,
}


def stop_stage(row: dict[str, Any], rule: Rule) -> int:
    """The stage a run with ``rule`` reports (the last one when the rule never stops it)."""
    stages = row["stages"]
    for k in range(1, len(stages)):
        if rule(stages[: k + 1], STUDY.stage_sampling(row, k), row["bound"]):
            return k
    return len(stages) - 1


def judge(rows: list[dict[str, Any]], rule: Rule) -> tuple[float, dict[tuple[str, str], list[int]]]:
    """The share of stages fitted, and per (case, policy) ``[covered, within 5%, strict, n]``."""
    fitted, total = 0, 0
    per: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        k = stop_stage(r, rule)
        fitted += k + 1
        total += len(r["stages"])
        _, low, high = r["stage_intervals"][k]
        est = min(max(r["stages"][k], 0.0), r["certificate"])
        err = abs(est - r["exact"])
        c = per.setdefault((r["case"], r["policy"]), [0, 0, 0, 0])
        c[0] += int(low <= r["exact"] <= high)
        c[1] += int(err <= 0.05 * r["bound"])
        c[2] += int(err <= STUDY.strict_tolerance(r["exact"], r["bound"]))
        c[3] += 1
    return fitted / total, per


def main(folder: pathlib.Path) -> None:
    rows = json.loads((folder / "results.json").read_text())["results"]
    rows = [r for r in rows if r.get("stages") and r.get("stage_intervals")]
    for name, rule in RULES.items():
        share, per = judge(rows, rule)
        print(f"\n{name}: {share:.0%} of the fitting stages")
        print("| case | policy | interval holds exact | within 5% | stricter yardstick |")
        print("| --- | --- | --- | --- | --- |")
        for (case, pol), (cov, loose, strict, n) in sorted(per.items()):
            print(f"| {case} | {pol} | {cov}/{n} | {loose}/{n} | {strict}/{n} |")


if __name__ == "__main__":
    main(
        pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/results/approx_validation"
    )
