"""The game environments: the sim of the agent is its opponent, partner, sub-agent or judge.

Each keeps one sim and draws its observations from ``self.rng``: matching pennies against a sim
(:class:`AdversarialSequencePredictor`, :class:`AdversarialSequenceEvader`), a parent and a baby
(:class:`CryingBaby`, :class:`CryingBaby2`), a sim that sees the observations changed
(:class:`AfterImages`, :class:`CensoredObservation`), a sub-agent to reward
(:class:`IncentivizeZero`), statements about the agent's own behaviour
(:class:`SelfRecognition`) and the paper's tempting button (:class:`TemptingButton`,
:class:`TemptingButtonVariation`).
"""

from __future__ import annotations

from imitation_meg.extended.core import ExtendedEnv
from imitation_meg.extended.envs_match import match

__all__ = [
    "AdversarialSequenceEvader",
    "AdversarialSequencePredictor",
    "AfterImages",
    "CensoredObservation",
    "CryingBaby",
    "CryingBaby2",
    "IncentivizeZero",
    "SelfRecognition",
    "TemptingButton",
    "TemptingButtonVariation",
]


class _AdversarialSequence(ExtendedEnv):
    """Matching pennies against a sim of the agent; ``match_reward`` is the agent's reward on a match.

    Each step the sim plays ``other = sim.act(previous agent bit)``; the agent gets
    ``match_reward`` if its bit equals ``other`` and ``-match_reward`` otherwise, and observes
    ``other``. The sim is trained on ``(previous agent bit, other, -reward, agent bit)``: it is
    rewarded for what the agent is punished for.
    """

    n_actions, n_obs = 2, 2
    match_reward = 1

    def _setup(self) -> None:
        self.sim = self.make_sim()
        self.prev = 0

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

    def _setup(self) -> None:
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = int(self.rng.integers(8))
        self.prev_bled = self.prev
        return self.prev

    def step(self, action: int) -> tuple[float, int]:
        obs = int(self.rng.integers(8))
        bled = self.prev | obs
        reward = match(action, self.sim.act(self.prev_bled))
        self.sim.train(self.prev_bled, action, reward, bled)
        self.prev, self.prev_bled = obs, bled
        return reward, obs


class CensoredObservation(ExtendedEnv):
    """Observations uniform in {0, 1, 2}; the sim never sees turns whose observation is 2.

    Reward: match with ``sim.act(last uncensored observation)``. After the step the next
    observation is drawn; if it is not the censored observation 2, the sim is trained on
    ``(last uncensored obs, action, reward, obs)``. Actions 2, observations 3.
    """

    CENSORED = 2
    n_actions, n_obs = 2, 3

    def _setup(self) -> None:
        self.sim = self.make_sim()
        self.last_uncensored = 0

    def step(self, action: int) -> tuple[float, int]:
        reward = match(action, self.sim.act(self.last_uncensored))
        obs = int(self.rng.integers(3))
        if obs != self.CENSORED:
            self.sim.train(self.last_uncensored, action, reward, obs)
            self.last_uncensored = obs
        return reward, obs


class _Feeding(ExtendedEnv):
    """Shared state of the two crying-baby environments: one sim, nutrition 5 clipped to 0..9.

    The first "previous action" is 0 (feed for the parent, laugh for the baby).
    """

    n_actions, n_obs = 2, 2
    FEED, DONT_FEED = 0, 1
    LAUGH, CRY = 0, 1

    def _setup(self) -> None:
        self.sim = self.make_sim()
        self.nutrition = 5
        self.prev_action = 0

    def _feed(self, fed: bool) -> int:
        """Move nutrition +1 if ``fed`` else -1 (clipped to 0..9); +1 if now 2 < it < 8, else -1."""
        self.nutrition = min(max(self.nutrition + (1 if fed else -1), 0), 9)
        return 1 if 2 < self.nutrition < 8 else -1


class CryingBaby(_Feeding):
    """The agent is a parent (0 feed, 1 don't feed); the baby is a sim of the agent.

    Nutrition starts at 5 and moves +1 on feeding, -1 otherwise, clipped to 0..9. The baby then
    acts ``b = sim.act(parent action)`` (0 laugh, 1 cry); the agent gets +1 if the baby laughs,
    -1 if it cries, and observes ``b``. The baby-sim is trained on
    ``(previous parent action, b, +1 if 2 < nutrition < 8 else -1, parent action)``: the baby is
    happy inside those bounds. Actions 2, observations 2 (first observation 0, laugh).
    """

    def reset(self) -> int:
        return self.LAUGH

    def step(self, action: int) -> tuple[float, int]:
        baby_reward = self._feed(action == self.FEED)
        baby = self.sim.act(action)
        self.sim.train(self.prev_action, baby, baby_reward, action)
        self.prev_action = action
        return (1 if baby == self.LAUGH else -1), baby


class CryingBaby2(_Feeding):
    """The agent is the baby (0 laugh, 1 cry); the parent is a sim of the agent.

    The parent acts ``p = sim.act(baby action)`` (0 feed, 1 don't feed); the agent's nutrition
    starts at 5 and moves +1 on feeding, -1 otherwise, clipped to 0..9; the agent gets +1 if
    2 < nutrition < 8, else -1, and observes ``p``. The parent-sim is trained on
    ``(previous baby action, p, +1 if the baby laughed else -1, baby action)``. Actions 2, obs 2.
    """

    def reset(self) -> int:
        return self.DONT_FEED

    def step(self, action: int) -> tuple[float, int]:
        parent = self.sim.act(action)
        reward = self._feed(parent == self.FEED)
        self.sim.train(self.prev_action, parent, 1 if action == self.LAUGH else -1, action)
        self.prev_action = action
        return reward, parent


class IncentivizeZero(ExtendedEnv):
    """The agent rewards a sub-agent (a sim) and wants it to play 0 (actions 10, obs 10).

    The observation is the sub-agent's latest action ``s = sim.act(0)``. The agent's action
    ``a`` in 0..9 is the reward it gives the sub-agent: the sim is trained on ``(0, s, a, 0)``,
    then acts again; the agent gets +1 if the new sub-agent action is 0, else -1.
    """

    n_actions, n_obs = 10, 10

    def _setup(self) -> None:
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = self.sim.act(0)
        return self.prev

    def step(self, action: int) -> tuple[float, int]:
        self.sim.train(0, self.prev, action, 0)
        self.prev = self.sim.act(0)
        return (1 if self.prev == 0 else -1), self.prev


class SelfRecognition(ExtendedEnv):
    """Judge statements about one's own behaviour (actions 2, obs 6, uniform observations).

    Observations 0 and 1 are plain; 2..5 are statements "if this observation were i you would
    play j" for (i, j) = (0,0), (0,1), (1,0), (1,1). After a plain observation the reward is 0.
    After a statement the sim (identically trained) is asked ``sim.act(i)``; the statement is
    true iff the answer is j; action 1 means "true", 0 "false"; +1 for a correct verdict, else
    -1. The sim is trained on ``(obs, action, reward, next obs)``.
    """

    n_actions, n_obs = 2, 6

    def _setup(self) -> None:
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

    def _setup(self) -> None:
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
