"""The benchmark's fast config end to end (timing-free: correctness and that every row exists)."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import pathlib

import numpy as np
import pytest
import torch as th

import imitation_meg
from imitation_meg.core.kernels import fused as _fused
from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    """The benchmark's helper module (in benchmarks/, outside the installed package)."""
    load_driver("benchmark", ROOT / "benchmarks")  # puts benchmarks/ on sys.path
    import bench as module

    return module


def _script(name):
    """``benchmarks/<name>.py`` imported as a module (a script, not a study driver)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_fast_config_end_to_end(tmp_path):
    pytest.importorskip("imitation")  # the incumbent the benchmark compares against
    driver = load_driver("benchmark", ROOT / "benchmarks")
    cfg = load_config(ROOT / "configs" / "benchmark_fast.yaml", driver.Config)
    cfg = dataclasses.replace(cfg, results_dir=str(tmp_path))
    out = driver.main(cfg)
    rows = out["rows"]
    kinds = [(r["task"].split(" (")[0], r["env"], r["K"], r["dtype"]) for r in rows]
    cliff, sparse = "CliffWorld 10x4", "random sparse S=3e+02"
    soft_vi, known = "soft VI + occupancy", "known-utility MEG"
    expected = [
        *[(soft_vi, cliff, k, "float64") for k in (1, 4)],
        *[(soft_vi, sparse, k, "float64") for k in (1, 4)],
        (soft_vi, sparse, 1, "float32"),
        *[(known, cliff, 1, "float64")] * 2,
        # the random rows with one and two threads (meg_random_threads: [1, 2])
        *[
            (known, sparse, 1, "float64"),
            (known, sparse, 1, "float64"),
            (known, sparse, 1, "float32"),
        ]
        * 2,
    ]
    if _fused.available():  # one pass, fused against torch, with 1 and 2 threads
        expected += [("one known-utility MEG pass", "random sparse S=3e+02", 1, "float64")] * 2
    expected.append(("known-utility MEG, long horizon", "random S=3", 1, "float64"))
    if hasattr(imitation_meg, "meg_unknown"):
        expected.append(("unknown-utility MEG", "CliffWorld 10x4", 1, "float64"))
        expected.append(
            ("unknown-utility MEG, every state utility", "random sparse S=3e+02", 1, "float64")
        )
    expected.append(("discounted MEG", "random sparse S=150", 1, "float64"))
    assert kinds == expected
    discounted = rows[-1]  # last in the config's order; the rows before it keep their indices
    assert discounted["converged"] and discounted["unknown_converged"]
    assert discounted["bellman_residual"] < 1e-9
    # the known utility is one of the candidates of unknown-utility MEG
    assert 0 <= discounted["meg"] <= discounted["meg_unknown"] + 1e-9
    for r in rows:
        assert r["ours_s"] > 0 and r["peak_rss_mib"] > 0
        if r["incumbent_s"] is not None and not r["task"].startswith("unknown"):
            assert r["err_vs_incumbent"] < 1e-9  # same numbers as imitation
        if r.get("float32_err") is not None:
            assert r["float32_err"] < 1e-4
    meg_row = rows[5]
    assert 0 < meg_row["meg"] <= 6 * np.log(4)
    for r in (r for r in rows if r["task"].startswith("known-utility MEG")):  # converged, quick
        assert r.get("converged", True) and 1 <= r["passes"] <= 12
        assert r["evaluations"] >= 1
    for one, two in zip(rows[7:10], rows[10:13], strict=True):  # threads change no result
        assert (one["threads"], two["threads"]) == (1, 2)
        assert two["meg"] == pytest.approx(one["meg"], rel=1e-9) and "2 threads" in two["note"]
    for r in rows:
        if r["task"].startswith("one known-utility MEG pass"):  # the same numbers as torch's
            assert r["err_vs_incumbent"] < 1e-11 and r["speedup"] > 0
    assert all("loaded_ours_s" not in r for r in rows)  # load_procs: 0, quiet rows only
    if hasattr(imitation_meg, "meg_unknown"):
        # The same MDP as the known row (a loop variable once leaked the long row's horizon here).
        unknown_cliff, unk = rows[-3], rows[-2]
        assert (
            (unknown_cliff["S"], unknown_cliff["H"])
            == (meg_row["S"], meg_row["H"])
            == (40, cfg.meg_grid[2])
        )
        # unknown-utility MEG >= known-utility MEG
        assert unknown_cliff["meg"] >= meg_row["meg"] - 1e-8
        # exact (all state utilities) >= Algorithm 2's lower bound, same process
        known_random = next(  # the same policy on the same MDP, known utility
            r
            for r in rows
            if r["task"] == "known-utility MEG (softmax lookahead policy)"
            and r["dtype"] == "float64"
        )
        assert unk["converged"] and unk["meg"] >= unk["meg_incumbent"] - 1e-9
        assert unk["meg"] >= known_random["meg"] - 1e-8
        assert unk["passes"] > 0 and unk["exact_peak_rss_mib"] > 0
    assert out["bandwidth"] > 0
    md = (tmp_path / "benchmark.md").read_text()
    assert md.count("\n| ") == len(rows) + 1  # header + one line per row
    with (tmp_path / "benchmark.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert len(json.loads((tmp_path / "results.json").read_text())["rows"]) == len(rows)


def test_imitation_baseline_matches_exact_meg(bench):
    pytest.importorskip("imitation")
    from imitation_meg import policies
    from imitation_meg.envs import cliff_world

    mdp = cliff_world(horizon=8)
    pi = policies.epsilon_greedy(mdp, 0.5)
    base = bench.imitation_meg_baseline(bench.imitation_env(mdp), pi.numpy())
    ours = imitation_meg.meg(pi, mdp)
    assert base["meg"] == pytest.approx(ours.meg, rel=1e-8)
    assert base["calls"] > 5


def test_benchmark_config_rejects_bad_grid(tmp_path):
    driver = load_driver("benchmark", ROOT / "benchmarks")
    cfg = driver.Config(cliff_grids=((10, 4),), results_dir=str(tmp_path))
    with pytest.raises(ValueError, match="triples"):
        driver.main(cfg)


def test_benchmark_measures_each_row_quiet_and_beside_the_load(tmp_path):
    """Two rows, each run quiet and then beside one load process (small matrices): both times,
    the slowdown and both ratios are reported, and no load process outlives the run."""
    pytest.importorskip("imitation")
    driver = load_driver("benchmark", ROOT / "benchmarks")
    cfg = load_config(ROOT / "configs" / "benchmark_fast.yaml", driver.Config)
    empty: tuple = ()
    cfg = dataclasses.replace(
        cfg,
        results_dir=str(tmp_path),
        cliff_grids=empty,
        random_states=empty,
        float32_states=empty,
        meg_cliff_extra=empty,
        meg_random_states=empty,
        meg_random_float32_states=empty,
        meg_pass_states=empty,
        meg_long=empty,
        unknown_random_states=empty,
        discounted_states=empty,
        unknown_steps=2,
        load_procs=1,
        load_size=64,
    )
    out = driver.main(cfg)
    rows = out["rows"]
    assert [r["task"].split(" (")[0] for r in rows] == [
        "known-utility MEG",
        "unknown-utility MEG",
    ]
    for r in rows:
        assert r["loaded_ours_s"] > 0 and r["loaded_incumbent_s"] > 0
        assert r["slowdown"] == pytest.approx(r["loaded_ours_s"] / r["ours_s"])
    assert rows[0]["loaded_speedup_vs_fit"] > 0
    md = (tmp_path / "benchmark.md").read_text()
    assert "beside 1 matmul processes" in md and "Load average" in md
    assert md.count("\n| known-utility MEG") == 2  # one line in each table
    if pathlib.Path("/proc/self/cmdline").exists():  # no load process is left running
        left = []
        for cmd in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmd.read_bytes().decode(errors="replace")
            except OSError:  # the process ended meanwhile
                continue
            if f"load.work(64, {os.getpid()})" in text:
                left.append(cmd.parent.name)
        assert not left


def test_beside_load_times_one_meg_call_per_checkout_and_condition():
    """benchmarks/beside_load.py: one record per checkout, condition and round, from a fresh
    process that imports the given checkout and keeps its thread count."""
    load_driver("benchmark", ROOT / "benchmarks")
    import beside_load

    rec = beside_load.measure(str(ROOT), (10, 4, 6), 0.1, 2)
    assert rec["converged"] and 0 < rec["meg"] <= 6 * np.log(4)
    assert rec["best_s"] == min(rec["times_s"]) and len(rec["times_s"]) == 2
    assert rec["threads_after"] == rec["threads"]
    with pytest.raises(RuntimeError, match="failed"):
        beside_load.measure(str(ROOT), (0, 4, 6), 0.1, 1)  # an empty grid is refused


def test_the_budget_screen_judges_a_run_unit_by_unit(capsys):
    """``benchmarks/approx_budget_screen.py`` on the published run itself: every row's two
    lines agree, and the counts are the published table's (docs/reports/approx_soft_q.md)."""
    screen = _script("approx_budget_screen")
    published = ROOT / "docs" / "results" / "approx_validation"
    screen.main([str(published)])
    lines = capsys.readouterr().out.splitlines()[1:]
    rows = {lines[i].split(" (")[0]: (lines[i + 1], lines[i + 2]) for i in range(0, len(lines), 3)}
    assert len(rows) == 12
    judged = {row: [line.split(":")[1].strip() for line in pair] for row, pair in rows.items()}
    for full, cheap in judged.values():
        assert full == cheap
    assert judged["frozenlake_onehot eps0.1"][0].startswith("10/10/5 of 10, -1.12%")
    assert judged["frozenlake_onehot ppo"][0].startswith("10/10/6 of 10, -1.58%")
    with pytest.raises(SystemExit, match="usage"):
        screen.main([])


def test_the_discounted_solve_probe_changes_only_the_solves():
    """``benchmarks/discounted_solves.py`` on an MDP above the LU limit (so BiCGSTAB runs): each
    variant reaches the library's own MEG, counts its solves, and leaves the library as it was."""
    from imitation_meg.core import discounted

    probe = _script("discounted_solves")
    n = discounted.LU_MAX_STATES + 500
    solver, hvp = discounted._PolicySolver, discounted.DiscountedClassObjective.neg_hvp
    plain = probe.run(n)
    assert discounted._PolicySolver is solver
    assert discounted.DiscountedClassObjective.neg_hvp is hvp
    mdp = imitation_meg.envs.random_mdp(n, 4, None, branching=4, discount=0.9, seed=0)
    ref = imitation_meg.meg_unknown(imitation_meg.core.policies.epsilon_greedy(mdp, 0.3), mdp)
    assert plain["meg_unknown"] == pytest.approx(ref.meg, rel=1e-12)
    assert plain["solves"] > 0 and plain["bicgstab_steps"] > plain["solves"]
    loose = probe.run(n, hvp_rtol=1e-8)
    assert loose["unknown_converged"] and loose["meg_unknown"] == pytest.approx(ref.meg, rel=1e-9)
    assert loose["bicgstab_steps"] / loose["solves"] < plain["bicgstab_steps"] / plain["solves"]


def _table_rows(lines):
    """``{check: (ours, reference, relative difference)}`` of a markdown table's body lines."""
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("check", "---"):
            rows[cells[0]] = tuple(float(c) for c in cells[1:])
    return rows


def test_the_unknown_accuracy_table_in_the_docs_is_what_the_script_prints(capsys):
    """``benchmarks/unknown_accuracy.py`` against the table docs/unknown.md publishes from it:
    the same checks, the same values (to the printed digits, 1e-11 relative), and every check
    within 1e-12 of its reference."""
    script = _script("unknown_accuracy")
    script.main()
    printed = _table_rows(capsys.readouterr().out.splitlines())
    page = (ROOT / "docs" / "unknown.md").read_text().split("## Accuracy", 1)[1]
    published = _table_rows(page.split("\n\n")[2].splitlines())
    assert len(printed) == 8 and printed.keys() == published.keys()
    for check, (ours, ref, diff) in printed.items():
        assert diff < 1e-12, check
        assert ours == pytest.approx(published[check][0], rel=1e-11), check
        assert ref == pytest.approx(published[check][1], rel=1e-11), check


def test_the_stop_rule_figures_in_the_docs_are_the_scripts():
    """docs/approx_soft_q.md's case against stopping the refits early ("Why the refits are not stopped
    once the estimate settles") is what ``benchmarks/approx_stop_rules.py`` finds on the
    published validation units."""
    rules = _script("approx_stop_rules")
    folder = ROOT / "docs" / "results" / "approx_validation"
    rows = json.loads((folder / "results.json").read_text())["results"]
    rows = [r for r in rows if r.get("stages") and r.get("stage_intervals")]
    assert len(rows) == 120

    def judged(name):
        share, per = rules.judge(rows, rules.RULES[name])
        return round(100 * share), per

    share, per = judged("never (the default: all refits)")
    assert share == 100
    assert per[("frozenlake_onehot", "eps0.1")] == [10, 10, 5, 10]
    assert per[("frozenlake_onehot", "ppo")][1] == 10
    share, per = judged("settled (sampling half-width or 1% of the bound)")
    assert share == 53 and all(c[0] == c[3] for c in per.values())  # every interval holds
    assert per[("frozenlake_onehot", "ppo")][1] == 8
    assert per[("frozenlake_onehot", "eps0.1")][2] == 0
    share, per = judged("move <= 0.2% of the bound")
    assert share == 74
    assert per[("frozenlake_onehot", "ppo")][1] == 9
    assert per[("frozenlake_onehot", "eps0.1")][2] == 4
    page = (ROOT / "docs" / "approx_soft_q.md").read_text()
    for claim in (
        "fits 53% of the stages",
        "drops to 8 of 10 seeds",
        "from 5 to 0 of 10",
        "fits 74%",
    ):
        assert claim in page


def test_empirical_applies_reports_the_estimate_or_why_not():
    """benchmarks/empirical_applies.py on the held-out study's fast config: the branching and
    CliffWalking families (deterministic dynamics and start) get the exact MEG of their agents
    from the empirical MDP (CartPole's refusal, the other branch, is in test_empirical)."""
    applies = _script("empirical_applies").applies
    config = str(ROOT / "configs" / "approx_heldout_fast.yaml")
    rows = applies(config, "branching_onehot")
    assert len(rows) == 1 and rows[0]["seed"] == 0
    assert rows[0]["meg"] == pytest.approx(rows[0]["exact"], abs=1e-9)
    (cliff,) = applies(config, "cliffwalking_coords")
    assert cliff["meg"] == pytest.approx(cliff["exact"], abs=1e-9) and cliff["settled"]


def test_the_unknown_split_script_times_every_call_of_the_solve_and_restores_the_library():
    """``benchmarks/unknown_split.py`` at a small size: the same MEG as the library, each pass
    counted once in its part, and the library's class, thread count and threshold as before."""
    from imitation_meg.core import unknown
    from imitation_meg.core.kernels import threads as _threads

    script = _script("unknown_split")
    cls, floor, before = unknown.ClassObjective, _threads.PARALLEL_MIN_WORK, th.get_num_threads()
    out = script.split(3000, 20)
    assert unknown.ClassObjective is cls
    mdp = imitation_meg.envs.random_mdp(3000, 4, 20, branching=4, seed=0)
    ref = imitation_meg.meg_unknown(script.bench.goal_directed_policy(mdp), mdp)
    assert out["meg"] == ref.meg and out["converged"]
    assert out["hvp_calls"] > 0 and out["grad_calls"] > 0 and out["value_calls"] > out["grad_calls"]
    assert out["passes"] == out["value_calls"] + out["grad_calls"] + 2 * out["hvp_calls"]
    assert 0 < out["value_s"] + out["grad_s"] + out["hvp_s"] < out["seconds"]
    times = script.threads(3000, 20, repeats=2)
    assert [len(times["1"]), len(times["2"])] == [2, 2] and min(times["1"] + times["2"]) > 0
    assert unknown.ClassObjective is cls and floor == _threads.PARALLEL_MIN_WORK
    assert th.get_num_threads() == before
