"""MADDPG and its SymmToM variants: networks against independent references, acting, training, driver."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch as th
from torch import nn

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml
from imitation_meg.symmtom import SymmToMEnv
from imitation_meg.symmtom import maddpg as M
from imitation_meg.symmtom import maddpg_acting as MA
from imitation_meg.symmtom import networks as N

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tiny(variant: str, **kw) -> M.MADDPGConfig:
    base = {
        "variant": variant,
        "episodes": 8,
        "batch_size": 32,
        "update_every": 30,
        "learning_starts": 60,
        "eval_every": 4,
        "eval_episodes": 2,
    }
    return M.MADDPGConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- networks
def test_ensemble_lstm_equals_torch_lstm_per_agent():
    th.manual_seed(0)
    m, n_in, h, b, t = 3, 5, 4, 2, 6
    ens = N.EnsembleLSTM(m, n_in, h)
    x = th.randn(m, b, t, n_in)
    y, (hn, cn) = ens(x, None)
    for k in range(m):
        ref = nn.LSTM(n_in, h, batch_first=True)
        with th.no_grad():  # torch stores (4h, in) with the gate order i, f, g, o, as ours
            ref.weight_ih_l0.copy_(ens.x2g.weight[k].T)
            ref.weight_hh_l0.copy_(ens.h2g.weight[k].T)
            ref.bias_ih_l0.copy_(ens.x2g.bias[k, 0])
            ref.bias_hh_l0.copy_(ens.h2g.bias[k, 0])
        y_ref, (h_ref, c_ref) = ref(x[k])
        th.testing.assert_close(y[k], y_ref, atol=1e-6, rtol=1e-5)
        th.testing.assert_close(hn[k], h_ref[0], atol=1e-6, rtol=1e-5)
        th.testing.assert_close(cn[k], c_ref[0], atol=1e-6, rtol=1e-5)


def test_ensemble_mlp_slices_are_independent_mlps():
    th.manual_seed(1)
    mlp = N.EnsembleMLP(3, 7, 8, 2)
    x = th.randn(3, 5, 7)
    out = mlp(x)
    for k in range(3):
        h = th.relu(x[k] @ mlp.l1.weight[k] + mlp.l1.bias[k])
        h = th.relu(h @ mlp.l2.weight[k] + mlp.l2.bias[k])
        th.testing.assert_close(out[k], h @ mlp.l3.weight[k] + mlp.l3.bias[k])
    # agent 0's output does not depend on agent 1's input
    x2 = x.clone()
    x2[1] += 1.0
    th.testing.assert_close(mlp(x2)[0], out[0])


def test_recurrent_actor_state_carries_over_steps():
    cfg = _tiny("rmaddpg")
    th.manual_seed(2)
    actors = M._make_actors(cfg)
    x = th.randn(3, 1, 5, cfg.actor_obs_size)
    whole, _ = actors(x)
    state = None
    for t in range(5):
        step, state = actors(x[:, :, t : t + 1], state)
        th.testing.assert_close(step[:, :, 0], whole[:, :, t], atol=1e-6, rtol=1e-5)


def test_straight_through_is_one_hot_forward_with_softmax_gradient():
    logits = th.tensor([[0.3, -1.0, 2.0, 0.0, 0.5, 1.0, -0.5, 0.2]], requires_grad=True)
    gen = th.Generator().manual_seed(0)
    a = N.relaxed_actions(logits, gen)
    assert a[0, :5].sum() == 1 and a[0, 5:].sum() == 1
    assert set(a.detach().flatten().tolist()) <= {0.0, 1.0}
    (a * th.arange(8.0)).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_gumbel_max_sampling_matches_softmax_frequencies():
    logits = th.tensor([[np.log(0.1), np.log(0.2), np.log(0.7), 0.0, 0.0, 0.0, 0.0, 0.0]] * 3)
    cfg = _tiny("maddpg")
    rng = np.random.default_rng(0)
    moves = np.array([MA._sample(logits, cfg, rng)[:, 0] for _ in range(4000)]).ravel()
    freq = np.bincount(moves, minlength=5) / len(moves)
    # moves 3, 4 have logit 0 = log 1: probabilities (0.1, 0.2, 0.7, 1, 1) / 3
    np.testing.assert_allclose(freq, np.array([0.1, 0.2, 0.7, 1.0, 1.0]) / 3.0, atol=0.015)


def test_per_agent_gradient_clipping():
    mlp = N.EnsembleMLP(3, 4, 5, 1)
    for p in mlp.parameters():
        p.grad = th.ones_like(p)
        p.grad[1] *= 1e-4  # agent 1 is below the threshold, agents 0 and 2 far above
    N.clip_per_agent(mlp, 3, 0.5)
    norms = th.sqrt(sum(p.grad.reshape(3, -1).pow(2).sum(1) for p in mlp.parameters()))
    th.testing.assert_close(norms[[0, 2]], th.tensor([0.5, 0.5]), atol=1e-4, rtol=0)
    assert norms[1] < 0.01


def test_buffer_stores_observations_exactly():
    cfg = _tiny("ge", n_pieces=6)
    env = cfg.make_env()
    env.reset(seed=3)
    buf = M._EpisodeBuffer(cfg)
    t_len, n = cfg.horizon, cfg.n_agents
    obs = np.zeros((t_len + 1, n, env.obs_size), dtype=np.float32)
    rng = np.random.default_rng(0)
    for t in range(t_len + 1):
        obs[t] = env.observe_all()
        if env.agents:
            env.step({a: (int(rng.integers(5)), int(rng.integers(6))) for a in env.agents})
    bel = rng.random((t_len + 1, n, n * 6)) < 0.5
    buf.add(obs, bel, np.zeros((t_len, n, 2), dtype=np.int64), np.zeros((t_len, n), np.float32))
    np.testing.assert_allclose(buf.observations(np.array([0]), slice(None))[0], obs, atol=1e-6)
    np.testing.assert_array_equal(buf.beliefs[0], bel)


# ----------------------------------------------------------------------------- training, acting
@pytest.mark.parametrize("variant", M.VARIANTS)
def test_training_is_reproducible_from_the_seed(variant):
    cfg = _tiny(variant)
    a, b = M.train_maddpg(cfg, seed=5), M.train_maddpg(cfg, seed=5)
    assert a.updates > 0 and a.steps == 8 * 30
    for x, y in zip(a.actors.state_dict().values(), b.actors.state_dict().values(), strict=True):
        assert th.equal(x, y)
    assert a.checkpoints == b.checkpoints
    c = M.train_maddpg(cfg, seed=6)
    differs = [
        not th.equal(x, y)
        for x, y in zip(a.actors.state_dict().values(), c.actors.state_dict().values(), strict=True)
    ]
    assert any(differs)


def test_best_checkpoint_is_the_best_evaluation():
    run = M.train_maddpg(_tiny("maddpg", episodes=12, eval_every=3), seed=0)
    rewards = [c["reward"] for c in run.checkpoints]
    assert [c["episode"] for c in run.checkpoints] == [3, 6, 9, 12]
    assert run.best_reward == max(rewards)
    assert run.best_episode == run.checkpoints[int(np.argmax(rewards))]["episode"]


def test_learned_policy_computes_the_training_loops_logits():
    """The single-agent wrapper (ToM tests) computes what the trainer's acting loop computes."""
    for variant in M.VARIANTS:
        cfg = _tiny(variant)
        run = M.train_maddpg(cfg, seed=0)
        env = cfg.make_env()
        env.reset(seed=11)
        acting = M._Actor(cfg, run.actors, np.random.default_rng(4))
        acting.reset(env)
        pol = M.LearnedPolicy(run.actors, cfg, agent=1, seed=4)
        pol.reset(env, 1)
        plain = SymmToMEnv(3, 6, 3).obs_size
        for _ in range(12):
            obs_all = env.observe_all()
            joint = acting.logits(M._actor_inputs(cfg, obs_all, acting.beliefs()))
            # the wrapper gets agent 1's observation as an env of the variant's kind gives it
            single = pol.logits(obs_all[1] if variant == "oracle" else obs_all[1][:plain], env, 1)
            th.testing.assert_close(single, joint[1])
            acts = MA._sample(joint, cfg, np.random.default_rng(0))
            env.step({a: acts[i] for i, a in enumerate(env.possible_agents)})
            acting.observe_step(env)


def test_learned_policy_validation():
    cfg = _tiny("oracle")
    run = M.train_maddpg(cfg, seed=0)
    pol = M.LearnedPolicy(run.actors, cfg, seed=0)
    env = SymmToMEnv(3, 6, 3)
    obs, _ = env.reset(seed=0)
    pol.reset(env, 0)
    with pytest.raises(ValueError, match="oracle=True"):
        pol(obs["agent_0"], env, 0)
    with pytest.raises(ValueError, match="trained with n=3"):
        pol.reset(SymmToMEnv(4, 6, 4), 0)
    with pytest.raises(ValueError, match="actor index"):
        M.LearnedPolicy(run.actors, cfg, agent=3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variant": "lstm"}, "unknown"),
        ({"episodes": 0}, "episodes"),
        ({"tau": 0.0}, "tau"),
        ({"learning_starts": -1}, "learning_starts"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        M.MADDPGConfig(**kwargs)
    with pytest.raises(TypeError, match="seed"):
        M.train_maddpg(_tiny("maddpg"), seed="0")  # type: ignore[arg-type]


@pytest.mark.expensive
def test_oracle_learns_beyond_random():
    """1,500 episodes with frequent small updates: Oracle beats a random team clearly (~3.7)."""
    cfg = M.MADDPGConfig(
        variant="oracle",
        episodes=1500,
        batch_size=256,
        update_every=25,
        learning_starts=3000,
        eval_every=500,
        eval_episodes=50,
    )
    run = M.train_maddpg(cfg, seed=0)
    assert M.final_evaluation(run, episodes=200)["reward"] > 8.0


# ----------------------------------------------------------------------------- driver
def test_maddpg_driver_fast(tmp_path):
    module = load_driver("symmtom_maddpg", ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / "symmtom_maddpg_fast.yaml")
    cfg = load_config({**data, "results_dir": str(tmp_path)}, module.Config)
    units = module.units(cfg)
    assert len(units) == 5 + 2
    out = module.main(cfg)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {r["agent"] for r in saved["rewards"]} == set(module.NAMES.values())
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "tom.csv").is_file()
    # the three n = 3, c = 3 tests ran on every learned agent; first_order needs n = c = 4
    tests = {(r["agent"], r["test"]) for r in out["tom"]}
    assert len(tests) == 5 * 3 and not any(t == "first_order" for _, t in tests)
    heuristic = next(r for r in out["rewards"] if r["agent"] == "heuristic")
    random = next(r for r in out["rewards"] if r["agent"] == "random")
    assert heuristic["reward_mean"] > 5 * random["reward_mean"]
    # a unit is a pure function of (cfg, unit): the same bytes twice
    learned = next(u for u in units if "seed" in u)
    first = module.run_unit(cfg, learned)
    again = module.run_unit(cfg, learned)
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    with pytest.raises(ValueError, match="unknown variants"):
        load_config({**data, "variants": ["dqn"]}, module.Config)
