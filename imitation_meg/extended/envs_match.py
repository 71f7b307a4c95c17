"""The match environments: the reward is +1 when the true agent plays what its one sim plays.

Each environment keeps one sim of the agent (made in ``_setup`` by
:meth:`~imitation_meg.extended.core.ExtendedEnv.make_sim`) and differs only in how that sim is
built and trained: with the rewards, actions or observations it is shown changed. All of them are
adaptable with gym (the paper's Definition 11): the reward is fixed by :meth:`decide` before
:meth:`finish` trains the sim.
"""

from __future__ import annotations

from imitation_meg.extended.core import Agent, ExtendedEnv

__all__ = [
    "DelayedRewards",
    "FalseMemories",
    "FlipEveryOther",
    "IgnoreActions",
    "IgnoreObservations",
    "IgnoreRewards",
    "IgnoreRewards2",
    "IgnoreRewards3",
    "IncentivizeLearningRate",
    "NthRewardMultipliedByN",
    "PunishNondeterministicAgent",
    "Repeater",
    "ShiftedRewards",
    "ThirdActionForbidden",
]


def match(action: int, hypothetical: int) -> int:
    """+1 if the true agent's ``action`` equals the sim's ``hypothetical`` action, else -1."""
    return 1 if action == hypothetical else -1


class _SingleSimMatch(ExtendedEnv):
    """Shared shape of the one-observation "match" environments (obs always 0, one sim).

    Subclasses override :meth:`_train_sim` to say how the sim is trained after each step.
    """

    gym_adaptable = True

    def _setup(self) -> None:
        self.sim: Agent = self.make_sim()
        self._hyp = 0

    def decide(self, action: int) -> float:
        self._hyp = self.sim.act(0)
        return match(action, self._hyp)

    def finish(self, action: int, reward: float) -> int:
        self._train_sim(action, reward)
        return 0

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, reward, 0)


class DelayedRewards(_SingleSimMatch):
    """Match against a sim that sees every other reward delayed and added to the next one.

    Rewards ``r_1, r_2, r_3, ...`` are shown to the sim as ``r_1, 0, r_2 + r_3, 0, r_4 + r_5, ...``
    (the even-numbered reward is withheld for one turn, then added to the odd-numbered reward that
    follows). Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _setup(self) -> None:
        super()._setup()
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

    def _setup(self) -> None:
        super()._setup()
        self.sim.train(0, 0, 0, 0)
        self.sim.train(0, 0, 0, 0)


class FlipEveryOther(_SingleSimMatch):
    """Match against a sim that sees the 1st, 3rd, 5th, ... rewards with their sign flipped.

    (The original library's code flips the 2nd, 4th, ... rewards instead, against its own
    docstring, which we follow.) Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _setup(self) -> None:
        super()._setup()
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

    def _setup(self) -> None:
        self.sim = self.make_sim()

    def reset(self) -> int:
        self.prev = int(self.rng.integers(5))
        return self.prev

    def decide(self, action: int) -> float:
        return match(action, self.sim.act(self.prev))

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

    def _setup(self) -> None:
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


class NthRewardMultipliedByN(_SingleSimMatch):
    """Match against a sim that sees the n-th reward multiplied by n (n = 1, 2, 3, ...).

    (The original library counts from 0, multiplying the first reward by 0.) Actions 2,
    observations 1.
    """

    n_actions, n_obs = 2, 1

    def _setup(self) -> None:
        super()._setup()
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


class ShiftedRewards(_SingleSimMatch):
    """Match against a sim that sees every reward one turn late (the first one as 0).

    Rewards ``r_1, r_2, ...`` reach the sim as ``0, r_1, r_2, ...``. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _setup(self) -> None:
        super()._setup()
        self.prev_reward = 0.0

    def _train_sim(self, action: int, reward: float) -> None:
        self.sim.train(0, action, self.prev_reward, 0)
        self.prev_reward = reward


class ThirdActionForbidden(_SingleSimMatch):
    """Match against a sim built as if there were 3 actions (``n_actions=3``) instead of 2.

    The sim is trained on the agent's transitions; if it plays the forbidden action 2 the agent
    cannot match it. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1

    def _setup(self) -> None:
        self._hyp = 0
        self.sim = self.make_sim(n_actions=3)
