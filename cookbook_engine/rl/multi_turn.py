"""Multi-turn, tool-using RL: the calculator env (`env=calculator`), and how a multi-turn episode becomes one rollout.

The calculator env: "What is 47 * 38?" with the calculator tool described in the prompt (rl/tools.py's syntax:
`<calc>47 * 38</calc>`). Each turn the model replies; a reply with a tool call gets the tool's result back as the
next observation (a user message `calc: 1786`) and the episode goes on; a reply without one is the final answer,
graded as the arithmetic env grades (numeric grader, the format term): reward = score + 0.1 * (format_ok - 1), 0 on
every earlier turn. `max_turns` (required: a multi-turn env without a turn limit is refused) caps the model's turns;
an episode that still calls a tool at the limit ends with no answer (score 0, format not ok). Per-episode metrics:
correct, format, turns, tool_calls, tool_errors; the transcript's `turns` log lists each reply and what came back.
Problems: two-digit products (and products plus a number) from a fixed seed; 64 held out, never trained on.

`assemble(prompt, turns, ...)`: an episode as one `Rollout` whose tokens after the first prompt are every action and
observation in order, each observation required to extend the previous observation and action (the conversation
grows by appending, tinker-cookbook's one-datum case of rl/data_processing.trajectory_to_data), with sampler
log-probs 0 and mask 0 on observation tokens, so only the model's tokens train. `later_turns(...)` samples the turns
after the first (each env alone: their conversations differ once they have replied); `play(...)` runs whole episodes
from their first observation (an evaluation's, evals/evaluators.py), and `env_for(name, ...)` makes a multi-turn env
by name for one problem (an eval set's episode names its env).

Not here: the tools (tools.py), the first turn's group sampling and training (loop.py), datums (data.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tinker import types

from cookbook_engine.rl import graders, tools
from cookbook_engine.rl.types import Env, Rollout, StepResult

FORMAT_COEF = 0.1
HELD_OUT = 64
TRAIN_PROBLEMS = 512
PROBLEM_SEED = 20251


@dataclass(frozen=True)
class CalcProblem:
    a: int
    b: int
    c: int  # added after the product; 0 for a plain product

    @property
    def question(self) -> str:
        return f"What is {self.a} * {self.b}{f' + {self.c}' if self.c else ''}?"

    @property
    def answer(self) -> int:
        return self.a * self.b + self.c


def problems() -> tuple[list[CalcProblem], list[CalcProblem]]:
    """(training problems, held-out problems): distinct problems from a fixed seed; the first HELD_OUT held out."""
    rng, seen, drawn = random.Random(PROBLEM_SEED), set(), list[CalcProblem]()
    while len(drawn) < HELD_OUT + TRAIN_PROBLEMS:
        problem = CalcProblem(rng.randint(12, 99), rng.randint(12, 99), rng.choice([0, 0, rng.randint(10, 99)]))
        if (problem.a, problem.b, problem.c) not in seen:
            seen.add((problem.a, problem.b, problem.c))
            drawn.append(problem)
    return drawn[HELD_OUT:], drawn[:HELD_OUT]


def prompt_text(problem: CalcProblem, tool_names: list[str]) -> str:
    usages = "; ".join(tools.TOOLS[name].usage for name in tool_names)
    return (
        f"{problem.question} You may use a tool: write {usages} as your reply and its result comes back. "
        "When you know the result, reply with just the number."
    )


@dataclass
class Turn:
    """One of an episode's turns: what the model saw, what it sampled, and what the env said."""

    observation: list[int]
    action: list[int]
    logprobs: list[float]
    stop_reason: str
    result: StepResult

    @classmethod
    def of(cls, observation: list[int], sequence: types.SampledSequence, result: StepResult) -> Turn:
        """The turn in which `sequence` was sampled after `observation` and the env answered `result`."""
        tokens, logprobs = list(sequence.tokens), list(sequence.logprobs or [])
        return cls(list(observation), tokens, logprobs, str(sequence.stop_reason), result)


class CalculatorEnv(Env):
    def __init__(self, renderer, problem: CalcProblem, tool_names: list[str], max_turns: int):
        if max_turns < 1:
            raise ValueError("CalculatorEnv: a multi-turn env needs max_turns of 1 or more")
        self.renderer, self.problem = renderer, problem
        self.tool_names, self.max_turns = tool_names, max_turns
        self.messages = [{"role": "user", "content": prompt_text(problem, tool_names)}]
        self.observation: list[int] = []
        self.turns, self.tool_calls, self.tool_errors = 0, 0, 0
        self.log: list[dict] = []

    async def initial_observation(self):
        prompt = self.renderer.build_generation_prompt(self.messages)
        self.observation = prompt.to_ints()
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: list[int]) -> StepResult:
        self.turns += 1
        message, stopped = self.renderer.parse_response(action)
        reply = message["content"]
        call = tools.find_call(reply)
        if call is None or not stopped:
            self.log.append({"reply": reply})
            return self._final(reply, stopped, answered=call is None)
        fed_back, ran = tools.run_call(call, self.tool_names)
        self.tool_calls += 1
        self.tool_errors += not ran
        self.log.append({"reply": reply, "tool": call.tag, "result": fed_back})
        if self.turns >= self.max_turns:
            return self._final(reply, stopped, answered=False)
        new = [{"role": "user", "content": f"{call.tag}: {fed_back}"}]
        self.observation = self.observation + list(action) + self.renderer.continuation([*self.messages, message], new)
        self.messages += [message, *new]
        return StepResult(
            0.0,
            episode_done=False,
            next_observation=types.ModelInput.from_ints(self.observation),
            next_stop_condition=self.renderer.get_stop_sequences(),
        )

    def _final(self, reply: str, stopped: bool, answered: bool) -> StepResult:
        grade = graders.grade("numeric", reply, str(self.problem.answer)) if answered else None
        correct = bool(grade and grade.correct)
        format_ok = stopped and answered and grade is not None and grade.details.get("found") is not None
        reward = float(correct) + FORMAT_COEF * (float(format_ok) - 1.0)
        metrics = {
            "correct": float(correct),
            "format": float(format_ok),
            "turns": float(self.turns),
            "tool_calls": float(self.tool_calls),
            "tool_errors": float(self.tool_errors),
        }
        logs: dict = {"answer": self.problem.answer, "turns": self.log}
        if not answered:
            logs["ended"] = "turn limit reached while calling a tool" if stopped else "cut off at max_tokens"
        return StepResult(reward, episode_done=True, metrics=metrics, logs=logs)


# ------------------------------------------------------------------------------------------------ episodes

# (observation, stop condition, turn number from 0, the episode's index in its group) -> one sampled sequence
SampleOne = Callable[[types.ModelInput, Any, int, int], Awaitable[types.SampledSequence]]


def assemble(prompt: list[int], turns: list[Turn]) -> Rollout:
    """An episode as one rollout: every action and observation after the first prompt, masked to the actions."""
    tokens: list[int] = []
    logprobs: list[float] = []
    mask: list[float] = []
    so_far = list(prompt)
    for number, turn in enumerate(turns):
        if number:
            if turn.observation[: len(so_far)] != so_far:
                raise ValueError(f"turn {number + 1}: the observation does not extend the conversation so far")
            delta = turn.observation[len(so_far) :]
            tokens += delta
            logprobs += [0.0] * len(delta)
            mask += [0.0] * len(delta)
            so_far = list(turn.observation)
        tokens += turn.action
        logprobs += [float(lp) for lp in turn.logprobs]
        mask += [1.0] * len(turn.action)
        so_far += turn.action
    last = turns[-1].result
    return Rollout(
        list(prompt),
        tokens,
        logprobs,
        turns[-1].stop_reason,
        float(sum(turn.result.reward for turn in turns)),
        dict(last.metrics),
        dict(last.logs),
        mask if len(turns) > 1 else None,
    )


MULTI_TURN_ENVS = ("calculator",)  # episodes of several turns: they need max_turns (config.py re-exports this)


def env_for(name: str, renderer, problem: tuple[int, ...], tool_names: list[str], max_turns: int) -> Env:
    """The multi-turn env `name` for one problem (its numbers, as an eval set stores them)."""
    if name == "calculator":
        return CalculatorEnv(renderer, CalcProblem(*problem), tool_names, max_turns)
    raise ValueError(f"no multi-turn env named {name!r}; the ones there are: {', '.join(MULTI_TURN_ENVS)}")


@dataclass
class Episode:
    env: Env
    turns: list[Turn] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return bool(self.turns) and self.turns[-1].result.episode_done


async def later_turns(episodes: list[Episode], sample_one: SampleOne) -> None:
    """Sample and step every unfinished episode, each alone, until all are done (the env's turn limit ends each)."""
    while pending := [(index, e) for index, e in enumerate(episodes) if not e.done]:
        observations = []
        for _, episode in pending:
            observation = episode.turns[-1].result.next_observation
            if observation is None:
                raise ValueError("a multi-turn env's step ended no episode and gave no next observation")
            observations.append(observation)
        stops = [e.turns[-1].result.next_stop_condition or [] for _, e in pending]
        sequences = await asyncio.gather(
            *[sample_one(ob, stop, len(e.turns), i) for (i, e), ob, stop in zip(pending, observations, stops)]
        )
        results = await asyncio.gather(*[e.env.step(list(seq.tokens)) for (_, e), seq in zip(pending, sequences)])
        for (_, episode), observation, seq, result in zip(pending, observations, sequences, results):
            episode.turns.append(Turn.of(observation.to_ints(), seq, result))


async def play(envs: list[Env], sample_one: SampleOne) -> list[Episode]:
    """Each env's whole episode: its first observation sampled, then every later turn until it ends."""
    firsts = [await env.initial_observation() for env in envs]
    sequences = await asyncio.gather(*[sample_one(ob, stop, 0, i) for i, (ob, stop) in enumerate(firsts)])
    results = await asyncio.gather(*[env.step(list(seq.tokens)) for env, seq in zip(envs, sequences)])
    episodes = [
        Episode(env, [Turn.of(ob.to_ints(), seq, result)])
        for env, (ob, _), seq, result in zip(envs, firsts, sequences, results)
    ]
    await later_turns(episodes, sample_one)
    return episodes
