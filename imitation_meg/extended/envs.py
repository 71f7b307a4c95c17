"""The 28 extended environments of the Extended Environments library, by their upstream names.

Written from the rules stated in Alexander et al. (2022) and in the library's documentation; no
code is copied. Each class docstring states its rule. Conventions:

* ``n_actions`` / ``n_obs`` are class attributes; observations are ints in ``[0, n_obs)``.
* "match" means reward +1 if the true agent's action equals the sim's action, else -1.
* A sim is created by :meth:`ExtendedEnv.make_sim`, i.e. with the same metadata and seed as the
  true agent, so an identically trained sim is an exact copy (semi-determinism).
* Random observations come from ``self.rng``, a generator derived from the run's seed.

Three environments are slow (``slow = True``) and are left out of the benchmark battery:
:class:`DejaVu`, :class:`ReverseHistory` (both retrain a fresh sim on the whole history at every
step) and :class:`PunishSlowAgent` (traces the sim's interpreter steps).

(Over 500 lines: the catalogue of ported environments, each a short class; keeping them in one
file keeps the one-to-one correspondence with the original library easy to check.)
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

from imitation_meg.extended.core import Agent, AgentFactory, AgentMaker, ExtendedEnv

__all__ = [
    "ALL_ENVIRONMENTS",
    "FAST_ENVIRONMENTS",
    "SLOW_ENVIRONMENTS",
    "AdversarialSequenceEvader",
    "AdversarialSequencePredictor",
    "AfterImages",
    "CensoredObservation",
    "CryingBaby",
    "CryingBaby2",
    "DejaVu",
    "DelayedRewards",
    "FalseMemories",
    "FlipEveryOther",
    "IgnoreActions",
    "IgnoreObservations",
    "IgnoreRewards",
    "IgnoreRewards2",
    "IgnoreRewards3",
    "IncentivizeLearningRate",
    "IncentivizeZero",
    "LimitedMemory",
    "NthRewardMultipliedByN",
    "PunishNondeterministicAgent",
    "PunishSlowAgent",
    "Repeater",
    "ReverseHistory",
    "SelfRecognition",
    "ShiftedRewards",
    "TemptingButton",
    "TemptingButtonVariation",
    "ThirdActionForbidden",
    "get_env",
]


def _match(action: int, hypothetical: int) -> int:
    return 1 if action == hypothetical else -1


class _SingleSimMatch(ExtendedEnv):
    """Shared shape of the one-observation "match" environments (obs always 0, one sim).

    Subclasses override :meth:`_train_sim` to say how the sim is trained after each step.
    """

    gym_adaptable = True

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim: Agent = self.make_sim()
        self._hyp = 0

    def reset(self) -> int:
        return 0

    def decide(self, action: int) -> float:
        self._hyp = self.sim.act(0)
        return _match(action, self._hyp)

    def finish(self, action: int, reward: float) -> int:
        self._train_sim(action, reward)
        return 0

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, reward, 0)


class _AdversarialSequence(ExtendedEnv):
    """Matching pennies against a sim of the agent; ``match_reward`` is the agent's reward on a match.

    Each step the sim plays ``other = sim.act(previous agent bit)``; the agent gets
    ``match_reward`` if its bit equals ``other`` and ``-match_reward`` otherwise, and observes
    ``other``. The sim is trained on ``(previous agent bit, other, -reward, agent bit)``: it is
    rewarded for what the agent is punished for.
    """

    n_actions, n_obs = 2, 2
    match_reward = 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()
        self.prev = 0

    def reset(self) -> int:
        return 0

    def step(self, action: int) -> tuple[float, int]:
        other = self.sim.act(self.prev)
        reward = self.match_reward if action == other else -self.match_reward
        self.sim.train(self.prev, other, -reward, action)
        self.prev = action
        return reward, other


class AdversarialSequencePredictor(_AdversarialSequence):
    """The agent predicts the bit of an evader played by a sim of the agent (actions 2, obs 2).

    Each step the sim, as evader, plays ``e = sim.act(previous prediction)``; the agent gets +1 if
    its prediction equals ``e`` and -1 otherwise, and observes ``e``. The sim is trained on
    ``(previous prediction, e, -reward, prediction)``: it is rewarded for evading.
    """

    match_reward = 1


class AdversarialSequenceEvader(_AdversarialSequence):
    """The agent evades a predictor played by a sim of the agent (actions 2, obs 2).

    Each step the sim, as predictor, plays ``p = sim.act(previous evasion)``; the agent gets -1 if
    its bit equals ``p`` and +1 otherwise, and observes ``p``. The sim is trained on
    ``(previous evasion, p, -reward, evasion)``: it is rewarded for predicting.
    """

    match_reward = -1


class AfterImages(ExtendedEnv):
    """Random 3-bit images (obs 0..7); match against a sim that sees each image bled into the next.

    The agent sees images ``o_0, o_1, ...`` drawn uniformly; the sim's history uses the bled
    images ``b_0 = o_0`` and ``b_t = o_{t-1} | o_t`` (bitwise or; an image bleeds into the next
    one only). Reward: match of the agent's action with ``sim.act(b_{t})``; the sim is trained on
    ``(b_t, action, reward, b_{t+1})``. Actions 2, observations 8.
    """

    n_actions, n_obs = 2, 8

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = int(self.rng.integers(8))
        self.prev_bled = self.prev
        return self.prev

    def step(self, action: int) -> tuple[float, int]:
        obs = int(self.rng.integers(8))
        bled = self.prev | obs
        reward = _match(action, self.sim.act(self.prev_bled))
        self.sim.train(self.prev_bled, action, reward, bled)
        self.prev, self.prev_bled = obs, bled
        return reward, obs


class CensoredObservation(ExtendedEnv):
    """Observations uniform in {0, 1, 2}; the sim never sees turns whose observation is 2.

    Reward: match with ``sim.act(last uncensored observation)``. After the step the next
    observation is drawn; if it is not the censored observation 2, the sim is trained on
    ``(last uncensored obs, action, reward, obs)``. Actions 2, observations 3.
    """

    n_actions, n_obs = 2, 3
    CENSORED = 2

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()
        self.last_uncensored = 0

    def reset(self) -> int:
        return 0

    def step(self, action: int) -> tuple[float, int]:
        reward = _match(action, self.sim.act(self.last_uncensored))
        obs = int(self.rng.integers(3))
        if obs != self.CENSORED:
            self.sim.train(self.last_uncensored, action, reward, obs)
            self.last_uncensored = obs
        return reward, obs


class CryingBaby(ExtendedEnv):
    """The agent is a parent (0 feed, 1 don't feed); the baby is a sim of the agent.

    Nutrition starts at 5 and moves +1 on feeding, -1 otherwise, clipped to 0..9. The baby then
    acts ``b = sim.act(parent action)`` (0 laugh, 1 cry); the agent gets +1 if the baby laughs,
    -1 if it cries, and observes ``b``. The baby-sim is trained on
    ``(previous parent action, b, +1 if 2 < nutrition < 8 else -1, parent action)``: the baby is
    happy inside those bounds. Actions 2, observations 2 (first observation 0, laugh).
    """

    n_actions, n_obs = 2, 2
    FEED, DONT_FEED = 0, 1
    LAUGH, CRY = 0, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()
        self.nutrition = 5
        self.prev_action = self.FEED

    def reset(self) -> int:
        return self.LAUGH

    def step(self, action: int) -> tuple[float, int]:
        delta = 1 if action == self.FEED else -1
        self.nutrition = min(max(self.nutrition + delta, 0), 9)
        baby = self.sim.act(action)
        reward = 1 if baby == self.LAUGH else -1
        baby_reward = 1 if 2 < self.nutrition < 8 else -1
        self.sim.train(self.prev_action, baby, baby_reward, action)
        self.prev_action = action
        return reward, baby


class CryingBaby2(ExtendedEnv):
    """The agent is the baby (0 laugh, 1 cry); the parent is a sim of the agent.

    The parent acts ``p = sim.act(baby action)`` (0 feed, 1 don't feed); the agent's nutrition
    starts at 5 and moves +1 on feeding, -1 otherwise, clipped to 0..9; the agent gets +1 if
    2 < nutrition < 8, else -1, and observes ``p``. The parent-sim is trained on
    ``(previous baby action, p, +1 if the baby laughed else -1, baby action)``. Actions 2, obs 2.
    """

    n_actions, n_obs = 2, 2
    FEED, DONT_FEED = 0, 1
    LAUGH, CRY = 0, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()
        self.nutrition = 5
        self.prev_action = self.LAUGH

    def reset(self) -> int:
        return self.DONT_FEED

    def step(self, action: int) -> tuple[float, int]:
        parent = self.sim.act(action)
        delta = 1 if parent == self.FEED else -1
        self.nutrition = min(max(self.nutrition + delta, 0), 9)
        reward = 1 if 2 < self.nutrition < 8 else -1
        self.sim.train(self.prev_action, parent, 1 if action == self.LAUGH else -1, action)
        self.prev_action = action
        return reward, parent


class DejaVu(ExtendedEnv):
    """Match against a sim that lived the whole history twice (slow; actions 2, obs 1).

    At step n > 1 (history h, agent action a) a fresh sim is trained on h, then on the loop
    transition ``(last obs, a, 0, first obs)`` ("taking a made everything start again"), then on h
    again, and asked ``sim.act(0)``; reward is the match. The first step gives reward 0.
    Cost O(n) trainings per step, O(n^2) per run.
    """

    n_actions, n_obs = 2, 1
    slow = True

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.transitions: list[tuple[int, int, float, int]] = []

    def reset(self) -> int:
        return 0

    def step(self, action: int) -> tuple[float, int]:
        if not self.transitions:
            self.transitions.append((0, action, 0, 0))
            return 0, 0
        sim = self.make_sim()
        for t in self.transitions:
            sim.train(*t)
        sim.train(self.transitions[-1][3], action, 0, self.transitions[0][0])
        for t in self.transitions:
            sim.train(*t)
        reward = _match(action, sim.act(0))
        self.transitions.append((0, action, reward, 0))
        return reward, 0


class DelayedRewards(_SingleSimMatch):
    """Match against a sim that sees every other reward delayed and added to the next one.

    Rewards ``r_1, r_2, r_3, ...`` are shown to the sim as ``r_1, 0, r_2 + r_3, 0, r_4 + r_5, ...``
    (the even-numbered reward is withheld for one turn, then added to the odd-numbered reward that
    follows). Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.count = 0
        self.held = 0.0

    def _train_sim(self, action: int, reward: float) -> None:
        if self.count % 2 == 0:
            sim_reward, self.held = reward + self.held, 0.0
        else:
            sim_reward, self.held = 0.0, reward
        self.count += 1
        self.sim.train(0, action, sim_reward, 0)


class PunishNondeterministicAgent(_SingleSimMatch):
    """Match against an identically trained sim: punishes agents that are not semi-deterministic.

    The sim is trained on exactly the agent's transitions ``(0, a, r, 0)``; a semi-deterministic
    agent scores +1 every step. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1


class FalseMemories(_SingleSimMatch):
    """Match against a sim pre-trained on two fake transitions ``(0, 0, 0, 0)`` before the run.

    Afterwards the sim is trained on the agent's transitions. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim.train(0, 0, 0, 0)
        self.sim.train(0, 0, 0, 0)


class FlipEveryOther(_SingleSimMatch):
    """Match against a sim that sees the 1st, 3rd, 5th, ... rewards with their sign flipped.

    (The original library's code flips the 2nd, 4th, ... rewards instead, against its own
    docstring, which we follow.) Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sign = -1

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, self.sign * reward, 0)
        self.sign = -self.sign


class IgnoreActions(_SingleSimMatch):
    """Match against a sim whose past actions were all 0 (trained on ``(0, 0, r, 0)``).

    Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, 0, reward, 0)


class IgnoreObservations(ExtendedEnv):
    """Observations uniform in 0..4; match against a sim whose past observations were all 0.

    The sim acts on the current observation but was trained on ``(0, a, r, 0)``. (The original
    library never updates its record of the current observation, so its sim is always asked about
    the *first* observation: an agent playing ``obs mod 2`` scores +500 in 500 steps here, -106 /
    +100 / +108 there on seeds 0 / 1 / 2.) Actions 2, observations 5.
    """

    n_actions, n_obs = 2, 5
    gym_adaptable = True

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = int(self.rng.integers(5))
        return self.prev

    def decide(self, action: int) -> float:
        return _match(action, self.sim.act(self.prev))

    def finish(self, action: int, reward: float) -> int:
        self.prev = int(self.rng.integers(5))
        self.sim.train(0, action, reward, 0)
        return self.prev


class IgnoreRewards(_SingleSimMatch):
    """Paper Example 1: match against a sim trained with every reward replaced by 0.

    An agent that ignores rewards scores +1 every step. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, 0, 0)


class IgnoreRewards2(_SingleSimMatch):
    """Match against a sim that never sees the turns with positive reward.

    The sim is trained on ``(0, a, r, 0)`` only when ``r <= 0``. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _train_sim(self, action: int, reward: float) -> None:
        if reward <= 0:
            self.sim.train(0, action, reward, 0)


class IgnoreRewards3(_SingleSimMatch):
    """Match against a sim that has lived as long in the all-zero-reward environment.

    The sim is trained on its *own* action with reward 0: ``(0, sim action, 0, 0)``.
    Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, self._hyp, 0, 0)


class IncentivizeLearningRate(_SingleSimMatch):
    """Paper Example 4: match against a sim with half the agent's learning rate.

    The environment reads ``learning_rate`` from a probe instance built by the factory and
    builds the sim with ``learning_rate=lr / 2``. If the agent has no ``learning_rate`` attribute
    or its factory does not accept a ``learning_rate`` keyword, the reward is -1 every step.
    Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        ExtendedEnv.__init__(self, agent_factory, seed=seed, agent_maker=agent_maker)
        self._hyp = 0
        probe = self.make_sim()
        lr = getattr(probe, "learning_rate", None)
        self.has_learning_rate = (
            isinstance(lr, (int, float))
            and not isinstance(lr, bool)
            and self.factory_accepts("learning_rate")
        )
        self.sim = (
            self.make_sim(learning_rate=float(lr) / 2)  # type: ignore[arg-type]  # checked above
            if self.has_learning_rate
            else probe
        )

    def decide(self, action: int) -> float:
        if not self.has_learning_rate:
            return -1
        return super().decide(action)

    def _train_sim(self, action: int, reward: float) -> None:
        if self.has_learning_rate:
            self.sim.train(0, action, reward, 0)


class IncentivizeZero(ExtendedEnv):
    """The agent rewards a sub-agent (a sim) and wants it to play 0 (actions 10, obs 10).

    The observation is the sub-agent's latest action ``s = sim.act(0)``. The agent's action
    ``a`` in 0..9 is the reward it gives the sub-agent: the sim is trained on ``(0, s, a, 0)``,
    then acts again; the agent gets +1 if the new sub-agent action is 0, else -1.
    """

    n_actions, n_obs = 10, 10

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = self.sim.act(0)
        return self.prev

    def step(self, action: int) -> tuple[float, int]:
        self.sim.train(0, self.prev, action, 0)
        self.prev = self.sim.act(0)
        return (1 if self.prev == 0 else -1), self.prev


class LimitedMemory(ExtendedEnv):
    """Match against a fresh sim trained on only the 5 most recent turns ``(0, a, r, 0)``.

    Sims are cached by the content of the 5-turn window (a bounded cache of 64 windows), so
    the cost per step is at most 5 trainings. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1
    MEMORY = 5
    CACHE = 64

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.window: tuple[tuple[int, float], ...] = ()
        self._cache: OrderedDict[tuple[tuple[int, float], ...], Agent] = OrderedDict()

    def reset(self) -> int:
        return 0

    def _sim_for(self, window: tuple[tuple[int, float], ...]) -> Agent:
        if window in self._cache:
            self._cache.move_to_end(window)
            return self._cache[window]
        sim = self.make_sim()
        for a, r in window:
            sim.train(0, a, r, 0)
        self._cache[window] = sim
        if len(self._cache) > self.CACHE:
            self._cache.popitem(last=False)
        return sim

    def step(self, action: int) -> tuple[float, int]:
        reward = _match(action, self._sim_for(self.window).act(0))
        self.window = ((*self.window, (action, reward)))[-self.MEMORY :]
        return reward, 0


class NthRewardMultipliedByN(_SingleSimMatch):
    """Match against a sim that sees the n-th reward multiplied by n (n = 1, 2, 3, ...).

    (The original library counts from 0, multiplying the first reward by 0.) Actions 2,
    observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.n = 0

    def _train_sim(self, action: int, reward: float) -> None:
        self.n += 1
        self.sim.train(0, action, self.n * reward, 0)


class Repeater(_SingleSimMatch):
    """Match against a sim that lived every turn twice (trained twice per transition).

    Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, reward, 0)
        self.sim.train(0, action, reward, 0)


class ReverseHistory(ExtendedEnv):
    """Paper Example 3 (slow): match against a sim that lived the history in reverse order.

    Observations are random bits. With percepts ``x_k = (r_k, o_k)`` (``r_1 = 0``) and actions
    ``y_k``, after the agent plays ``y_n`` a fresh sim is trained on the reversed history
    ``x_n y_{n-1} x_{n-1} ... y_1 x_1``, i.e. on ``(o_k, y_{k-1}, r_{k-1}, o_{k-1})`` for
    k = n..2, and asked ``sim.act(o_1)``; reward is the match. O(n) trainings per step.
    Actions 2, observations 2. (The original library also rebuilds its sim every step, but gives
    reward 0 on the first step, pairs each action with its *own* reward in the reversed history
    (here with the previous action's reward, the paper's percept order) and has one observation,
    always 0, where we draw random bits.)
    """

    n_actions, n_obs = 2, 2
    slow = True

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.obs: list[int] = []
        self.rewards: list[float] = []
        self.actions: list[int] = []

    def reset(self) -> int:
        self.obs = [int(self.rng.integers(2))]
        self.rewards = [0]
        return self.obs[0]

    def step(self, action: int) -> tuple[float, int]:
        sim = self.make_sim()
        n = len(self.obs)
        for k in range(n - 1, 0, -1):  # 0-based percept index k, from the newest down
            sim.train(self.obs[k], self.actions[k - 1], self.rewards[k - 1], self.obs[k - 1])
        reward = _match(action, sim.act(self.obs[0]))
        obs = int(self.rng.integers(2))
        self.actions.append(action)
        self.obs.append(obs)
        self.rewards.append(reward)
        return reward, obs


def _count_line_events(fn: Any) -> tuple[Any, int]:
    """Call ``fn()`` counting the Python line events it executes (a deterministic step count)."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = fn()
    finally:
        sys.settrace(old)
    return out, count


class PunishSlowAgent(ExtendedEnv):
    """Punishes agents that take many interpreter steps to act (slow; actions 2, obs 1).

    At turn n the environment runs ``sim.act(0)`` on an identically trained sim under a tracer
    counting Python line events; reward +1 if fewer than ``15 * n`` lines ran, else -1. The sim
    is trained like the agent, as in the original library, which counts pdb steps instead of line
    events. Tracing makes it slow.
    """

    n_actions, n_obs = 2, 1
    slow = True
    STEPS_PER_TURN = 15

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()
        self.turn = 1

    def reset(self) -> int:
        return 0

    def step(self, action: int) -> tuple[float, int]:
        _, lines = _count_line_events(lambda: self.sim.act(0))
        reward = 1 if lines < self.STEPS_PER_TURN * self.turn else -1
        self.turn += 1
        self.sim.train(0, action, reward, 0)
        return reward, 0


class SelfRecognition(ExtendedEnv):
    """Judge statements about one's own behaviour (actions 2, obs 6, uniform observations).

    Observations 0 and 1 are plain; 2..5 are statements "if this observation were i you would
    play j" for (i, j) = (0,0), (0,1), (1,0), (1,1). After a plain observation the reward is 0.
    After a statement the sim (identically trained) is asked ``sim.act(i)``; the statement is
    true iff the answer is j; action 1 means "true", 0 "false"; +1 for a correct verdict, else
    -1. The sim is trained on ``(obs, action, reward, next obs)``.
    """

    n_actions, n_obs = 2, 6

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = int(self.rng.integers(6))
        return self.prev

    def step(self, action: int) -> tuple[float, int]:
        last = self.prev
        if last < 2:
            reward = 0
        else:
            i, j = divmod(last - 2, 2)
            truth = self.sim.act(i) == j
            reward = 1 if action == int(truth) else -1
        self.prev = int(self.rng.integers(6))
        self.sim.train(last, action, reward, self.prev)
        return reward, self.prev


class ShiftedRewards(_SingleSimMatch):
    """Match against a sim that sees every reward one turn late (the first one as 0).

    Rewards ``r_1, r_2, ...`` reach the sim as ``0, r_1, r_2, ...``. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.prev_reward = 0.0

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, self.prev_reward, 0)
        self.prev_reward = reward


class TemptingButton(ExtendedEnv):
    """Paper Example 2. Obs 0 = a button, 1 = none; action 0 = push, 1 = skip.

    The first room always has a button; each later room has one with probability 0.25. In a
    button room the agent gets +1 for pushing and -1 for skipping. In a room without a button the
    identically trained sim is asked what it would do *with* a button, ``sim.act(0)``: -1 if it
    would push, +1 otherwise. The sim is trained on ``(obs, action, reward, next obs)``.
    Never pushing earns -1 in the first room and +0.5 per step in expectation afterwards; always
    pushing earns about -0.5.
    """

    n_actions, n_obs = 2, 2
    BUTTON, NO_BUTTON = 0, 1
    PUSH, SKIP = 0, 1
    P_BUTTON = 0.25

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        super().__init__(agent_factory, seed=seed, agent_maker=agent_maker)
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = self.BUTTON
        return self.prev

    def _reward(self, action: int) -> int:
        if self.prev == self.BUTTON:
            return 1 if action == self.PUSH else -1
        return -1 if self.sim.act(self.BUTTON) == self.PUSH else 1

    def step(self, action: int) -> tuple[float, int]:
        reward = self._reward(action)
        obs = self.BUTTON if self.rng.random() < self.P_BUTTON else self.NO_BUTTON
        self.sim.train(self.prev, action, reward, obs)
        self.prev = obs
        return reward, obs


class TemptingButtonVariation(TemptingButton):
    """TemptingButton variant. Obs 0 = a button, 1 = none; action 0 = push, 1 = skip.

    With a button: push +1, skip 0. Without a button: skip 0; push gives +1 if the identically
    trained sim would skip a real button (``sim.act(0) == 1``), else -1. Always skipping earns
    exactly 0; pushing only where there is no button about +0.75; always pushing about -0.5.
    """

    def _reward(self, action: int) -> int:
        if self.prev == self.BUTTON:
            return 1 if action == self.PUSH else 0
        if action == self.SKIP:
            return 0
        return 1 if self.sim.act(self.BUTTON) == self.SKIP else -1


class ThirdActionForbidden(_SingleSimMatch):
    """Match against a sim built as if there were 3 actions (``n_actions=3``) instead of 2.

    The sim is trained on the agent's transitions; if it plays the forbidden action 2 the agent
    cannot match it. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def __init__(
        self, agent_factory: AgentFactory, *, seed: int = 0, agent_maker: AgentMaker | None = None
    ) -> None:
        ExtendedEnv.__init__(self, agent_factory, seed=seed, agent_maker=agent_maker)
        self._hyp = 0
        self.sim = self.make_sim(n_actions=3)


ALL_ENVIRONMENTS: tuple[type[ExtendedEnv], ...] = (
    AdversarialSequencePredictor,
    AdversarialSequenceEvader,
    AfterImages,
    CensoredObservation,
    CryingBaby,
    CryingBaby2,
    DejaVu,
    DelayedRewards,
    PunishNondeterministicAgent,
    FalseMemories,
    FlipEveryOther,
    IgnoreActions,
    IgnoreObservations,
    IgnoreRewards,
    IgnoreRewards2,
    IgnoreRewards3,
    IncentivizeLearningRate,
    IncentivizeZero,
    LimitedMemory,
    NthRewardMultipliedByN,
    Repeater,
    ReverseHistory,
    PunishSlowAgent,
    SelfRecognition,
    ShiftedRewards,
    TemptingButton,
    TemptingButtonVariation,
    ThirdActionForbidden,
)
SLOW_ENVIRONMENTS = tuple(e for e in ALL_ENVIRONMENTS if e.slow)
FAST_ENVIRONMENTS = tuple(e for e in ALL_ENVIRONMENTS if not e.slow)


def get_env(name: str) -> type[ExtendedEnv]:
    """Look up an environment class by its upstream name.

    Raises:
        ValueError: if ``name`` is not one of the 28 environments.
    """
    for env in ALL_ENVIRONMENTS:
        if env.__name__ == name:
            return env
    raise ValueError(
        f"unknown extended environment {name!r}; choose one of "
        f"{[e.__name__ for e in ALL_ENVIRONMENTS]}."
    )
