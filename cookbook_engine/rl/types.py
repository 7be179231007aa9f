"""The RL vocabulary of tinker-cookbook's rl/types.py: environments, groups of environments, datasets of groups,
and what a rollout produces.

- `Env`: one episode. `initial_observation()` gives the prompt tokens and the stop condition; `step(action_tokens)`
  grades the sampled completion and returns a `StepResult` (reward, done, metrics). A multi-turn env's step returns
  `episode_done=False` with the next observation (the whole conversation so far, extending the previous observation
  and action: rl/multi_turn.py) and its stop condition; the episode's reward is the sum of its steps' rewards.
- `EnvGroupBuilder`: `make_envs()` gives the G envs of one problem (GRPO compares samples within a group),
  `logging_tags()` names the metric groups the problem belongs to (e.g. "add" gives env/add/correct), and `task`
  names the env of a mix it came from (None outside mixes).
- `RLDataset`: `get_batch(i)` gives the builders of step i, deterministically, so a resumed run sees the same batches.
- `Rollout` / `RolloutGroup`: one episode (its first prompt, then every token after it: the model's actions and, in
  a multi-turn episode, the observations between them, with a mask that is 1 on the model's tokens only) with its
  sampler log-probs, reward and metrics; a group of them.

Every env of a group shares its first prompt, sampled once with num_samples=G; later turns (multi-turn envs) are
sampled per env (rl/multi_turn.py). This module holds types only, no sampling or training.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from tinker import types

StopCondition = list[int] | list[str]


@dataclass
class StepResult:
    reward: float
    episode_done: bool
    metrics: dict[str, float] = field(default_factory=dict)  # numeric, averaged into env/<tag>/<name>
    logs: dict = field(default_factory=dict)  # anything else worth reading in the transcript (errors, answers)
    next_observation: types.ModelInput | None = None  # multi-turn: what the model sees next (episode_done False)
    next_stop_condition: StopCondition | None = None


class Env(ABC):
    @abstractmethod
    async def initial_observation(self) -> tuple[types.ModelInput, StopCondition]:
        """The prompt tokens and the stop condition of the sampler."""

    @abstractmethod
    async def step(self, action: list[int]) -> StepResult:
        """Grade the sampled completion tokens."""


class EnvGroupBuilder(ABC):
    @abstractmethod
    async def make_envs(self) -> Sequence[Env]:
        """The envs of one group: the same problem, one env per sample."""

    def logging_tags(self) -> list[str]:
        return []

    @property
    def task(self) -> str | None:
        return None


class RLDataset(ABC):
    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        """The groups of step `index` (the same on every call)."""

    @abstractmethod
    def __len__(self) -> int:
        """The number of distinct batches before the problems repeat."""


@dataclass
class Rollout:
    prompt_tokens: list[int]
    tokens: list[int]  # the sampled completion, with its stop token when it stopped (multi-turn: every later token)
    logprobs: list[float]  # the sampler's log-probability of each of those tokens (0 on observation tokens)
    stop_reason: str  # "stop" | "length" (of the last turn)
    reward: float
    metrics: dict[str, float]
    logs: dict
    mask: list[float] | None = None  # multi-turn: 1 on the model's tokens, 0 on observations; None: all the model's

    @property
    def action_tokens(self) -> int:
        """How many of the tokens the model sampled."""
        return len(self.tokens) if self.mask is None else int(sum(self.mask))


@dataclass
class RolloutGroup:
    rollouts_G: list[Rollout]
    tags: list[str]
    task: str | None = None  # the env of a mix the group came from (its name); None when the run has one env

    @property
    def rewards_G(self) -> list[float]:
        return [rollout.reward for rollout in self.rollouts_G]
