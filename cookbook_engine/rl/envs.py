"""The RL environments: arithmetic, Python coding problems graded by unit tests, a user's prompt/answer file, and the
multi-turn calculator env (rl/multi_turn.py).

The first three are single-turn problem envs in the shape of tinker-cookbook's ProblemEnv: the prompt is the question as
a user message, the completion is parsed with the renderer, and the reward is

    reward = score + format_coef * (format_ok - 1)

where `score` is 1 for a correct answer (the fraction of unit tests passed for code; for a wrong arithmetic answer
`partial_credit` × the share of its digits in place, rl/arithmetic.digit_credit) and `format_ok` says the reply
ended with the stop sequence and has the expected shape (a number; a ```python block). So a well-formed wrong
answer earns 0 (or its partial credit, under the right answer's 1), a rambling one cut off at max_tokens earns
-0.1. Per-sample metrics: correct, format (and tests_passed / tests_total for code); logs carry what a person
reading a transcript wants (the expected answer, the sandbox's error).

- arithmetic: "What is 47 + 38? Answer with just the number."; the reply's one committed number is graded by the
  numeric grader's rule (rl/text_graders.py: "85", "47 + 38 = 85", "The answer is 85"; a hedge such as "84 or 85"
  scores 0 and is marked hedged). The problems
  are rl/arithmetic.py's: a fixed held-out set of two-digit problems (the built-in eval set `builtin:arithmetic`)
  and a training curriculum whose operands grow from 1..20 to 1..99 over the first quarter of the run, three in four
  of its sums carrying, never drawing a held-out problem.
- code: rl/code_problems.py's built-in problems and fixed train/test split; the reply's code runs in the sandbox.
- calculator: multi-turn (rl/multi_turn.py): two-digit products the model may work out by calling the calculator
  tool (`<calc>47 * 38</calc>`, its result fed back), the reward on the final answer; needs max_turns.
- custom: datasets.load_rl_problems (prompt, answer, grader per row) graded by rl/graders.py.
- a mix, `env=arithmetic:2,code:1` (data/mix.py's syntax and refusals): each env built as above, each step's
  `groups_per_batch` groups split between them by weight (`mix.step_counts`: every env its whole share, the rest
  drawn by the shares' fractions, seeded by the step), an env's groups the first ones of its own batch at that step.
  Each group is tagged with its env's name (its own tags become `<name>/<tag>`), so the loop logs
  `env/<name>/...` and `test/env/<name>/...` per env and Transcripts can filter by task; every env's held-out
  problems are evaluated (num_eval_problems each), a weight of 0 included.
- `with_fixed_mixed_rewards(setup)`: the same prompts with rewards 0, 1, 0, 1, ... fixed in advance, for measuring
  the loop's schedules (tests, benchmarks/pipelining.py): every group then trains, whatever the model samples.

Not here: sampling, advantages, training (rl/loop.py, rl/advantages.py, rl/data.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cookbook_engine.config import RL_ENVS, RLConfig
from cookbook_engine.data import loading as datasets, mix
from cookbook_engine.rl import arithmetic, code_problems, graders, multi_turn
from cookbook_engine.rl.arithmetic import ArithmeticProblem
from cookbook_engine.rl.metrics import HEDGED_METRIC, SUSPICIOUS_METRIC
from cookbook_engine.rl.types import Env, EnvGroupBuilder, RLDataset, StepResult

FORMAT_COEF = 0.1


@dataclass
class Graded:
    """What an env's grader says about one reply, before the format term is applied."""

    score: float  # in [0, 1]
    correct: bool
    format_ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    logs: dict = field(default_factory=dict)


class ProblemEnv(Env):
    """One question as a user message; subclasses grade the reply text."""

    grade_in_thread = False  # True for graders that run subprocesses (the sandbox), so groups grade concurrently

    def __init__(self, renderer, question: str, format_coef: float = FORMAT_COEF):
        self.renderer, self.question, self.format_coef = renderer, question, format_coef

    def grade(self, response: str) -> Graded:
        raise NotImplementedError

    async def initial_observation(self):
        prompt = self.renderer.build_generation_prompt([{"role": "user", "content": self.question}])
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: list[int]) -> StepResult:
        message, stopped = self.renderer.parse_response(action)
        response = message["content"]
        graded = await asyncio.to_thread(self.grade, response) if self.grade_in_thread else self.grade(response)
        format_ok = stopped and graded.format_ok
        reward = graded.score + self.format_coef * (float(format_ok) - 1.0)
        metrics = {"correct": float(graded.correct), "format": float(format_ok), **graded.metrics}
        return StepResult(reward=reward, episode_done=True, metrics=metrics, logs=graded.logs)


# ------------------------------------------------------------------------------------------------ arithmetic


class ArithmeticEnv(ProblemEnv):
    def __init__(
        self, renderer, problem: ArithmeticProblem, format_coef: float = FORMAT_COEF, partial_credit: float = 0.0
    ):
        super().__init__(renderer, problem.question, format_coef)
        self.problem, self.partial_credit = problem, partial_credit

    def grade(self, response: str) -> Graded:
        graded = _from_grade(graders.grade("numeric", response, str(self.problem.answer)))
        found = graded.logs.get("found")
        graded.format_ok = found is not None
        graded.logs["answer"] = self.problem.answer
        if found is not None and not graded.correct and self.partial_credit:
            graded.score = self.partial_credit * arithmetic.digit_credit(found, self.problem.answer)
        return graded


# ------------------------------------------------------------------------------------------------ code


class CodeEnv(ProblemEnv):
    grade_in_thread = True

    def __init__(self, renderer, problem: code_problems.CodeProblem, format_coef: float = FORMAT_COEF):
        super().__init__(renderer, problem.prompt, format_coef)
        self.problem = problem

    def grade(self, response: str) -> Graded:
        return _from_grade(code_problems.grade_response(self.problem, response))


# ------------------------------------------------------------------------------------------------ custom


class CustomEnv(ProblemEnv):
    def __init__(
        self,
        renderer,
        problem: datasets.RLProblem,
        format_coef: float = FORMAT_COEF,
        other_answers: tuple[str, ...] = (),
    ):
        super().__init__(renderer, problem.prompt, format_coef)
        self.problem, self.other_answers = problem, other_answers
        self.grade_in_thread = problem.grader == "python_tests"

    def grade(self, response: str) -> Graded:
        graded = _from_grade(
            graders.grade(
                self.problem.grader,
                response,
                self.problem.answer,
                tolerance=self.problem.tolerance,
                other_answers=self.other_answers,
            )
        )
        if self.problem.grader != "python_tests":
            graded.logs["answer"] = self.problem.answer
        return graded


def _from_grade(grade: graders.Grade) -> Graded:
    """A grader's Grade as Graded: numeric details become metrics (tests_passed, tests_total), the rest logs."""
    details = dict(grade.details)
    format_ok = bool(details.pop("format_ok", True))
    metrics = {key: float(details.pop(key)) for key in ("tests_passed", "tests_total") if key in details}
    if "suspicious" in details:  # code graders: the hack patterns stay in the logs for Transcripts' badge
        metrics[SUSPICIOUS_METRIC] = float(bool(details["suspicious"]))
    if "hedged" in details:  # text graders: a reply holding several candidate answers, the right one among them
        metrics[HEDGED_METRIC] = float(bool(details["hedged"]))
    return Graded(float(grade.reward), bool(grade.correct), format_ok, metrics, details)


# ------------------------------------------------------------------------------------------------ groups, datasets


@dataclass(frozen=True)
class ProblemGroupBuilder(EnvGroupBuilder):
    make_env: Callable[[], Env]
    group_size: int
    tags: tuple[str, ...] = ()

    async def make_envs(self) -> Sequence[Env]:
        return [self.make_env() for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return list(self.tags)


class ProblemDataset(RLDataset):
    """Problems in a deterministic shuffle per epoch, `groups_per_batch` of them per step (cycling when there are
    fewer problems than that)."""

    def __init__(
        self, problems: list, make_builder: Callable[[Any], EnvGroupBuilder], groups_per_batch: int, seed: int
    ):
        if not problems:
            raise ValueError("ProblemDataset: no problems")
        self.problems, self.make_builder = problems, make_builder
        self.groups_per_batch, self.seed = groups_per_batch, seed

    def __len__(self) -> int:
        return max(1, len(self.problems) // self.groups_per_batch)

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        epoch, position = divmod(index, len(self))
        order = list(range(len(self.problems)))
        random.Random(self.seed * 100_003 + epoch).shuffle(order)
        start = position * self.groups_per_batch
        picked = [order[(start + k) % len(order)] for k in range(self.groups_per_batch)]
        return [self.make_builder(self.problems[i]) for i in picked]


class CurriculumDataset(RLDataset):
    """Problems drawn afresh for each step by `draw(step)` (a pure function of the step, so a resumed run gets the
    same batches), each made into a group by `make_builder`."""

    def __init__(
        self, draw: Callable[[int], list], make_builder: Callable[[Any], EnvGroupBuilder], batches_per_epoch: int
    ):
        self.draw, self.make_builder, self.batches_per_epoch = draw, make_builder, batches_per_epoch

    def __len__(self) -> int:
        return self.batches_per_epoch

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        return [self.make_builder(problem) for problem in self.draw(index)]


@dataclass
class EnvSetup:
    """What the loop needs from an env: training batches, held-out builders (one sample each) and a description."""

    train: ProblemDataset | CurriculumDataset | MixedDataset
    test: list[EnvGroupBuilder]
    description: str
    prompts: list[str]  # every question, to check prompt lengths before the run starts
    tasks: tuple[str, ...] = ()  # a mix's env names, each logged as env/<name>/... at every step it is in


def arithmetic_setup(config: RLConfig, renderer) -> EnvSetup:
    """The arithmetic env: rl/arithmetic.py's curriculum for training, its fixed two-digit problems held out."""
    from cookbook_engine.config import ConfigError

    held_out = arithmetic.held_out_problems()
    if config.num_eval_problems > len(held_out):
        raise ConfigError(
            f"num_eval_problems={config.num_eval_problems}: the arithmetic env holds out "
            f"{len(held_out)} problems; evaluate on at most {len(held_out)}"
        )
    test = held_out[: config.num_eval_problems]

    def make(problem: ArithmeticProblem, size: int) -> ProblemGroupBuilder:
        return ProblemGroupBuilder(
            lambda: ArithmeticEnv(renderer, problem, partial_credit=config.partial_credit), size, (problem.tag,)
        )

    total = arithmetic.curriculum_length(config.max_steps, config.num_epochs)
    dataset = CurriculumDataset(
        lambda step: arithmetic.training_problems(config.seed, step, total, config.groups_per_batch),
        lambda problem: make(problem, config.group_size),
        max(1, total // config.num_epochs),
    )
    start = arithmetic.operand_bound(0, total)
    description = (
        f"arithmetic: fresh problems each step, operands growing from 1..{start}"
        f" to 1..99 over the first {arithmetic.CURRICULUM_RAMP:.0%} of {total} steps, {arithmetic.CARRY_SHARE:.0%} of"
        f" each step's sums carrying; {len(test)} "
        "held-out two-digit problems never trained on"
    )
    largest = [ArithmeticProblem(99, op, 99) for op in arithmetic.TRAIN_OPS]  # for the prompt-length check
    return EnvSetup(dataset, [make(problem, 1) for problem in test], description, [p.question for p in largest + test])


def calculator_setup(config: RLConfig, renderer) -> EnvSetup:
    """The calculator env (multi-turn, rl/multi_turn.py): two-digit products, 64 held out."""
    from cookbook_engine.config import ConfigError, tool_problems

    if config.max_turns < 1:
        raise ConfigError(f"max_turns={config.max_turns}: env=calculator is multi-turn and needs a turn limit (e.g. 3)")
    if problems := tool_problems(config.tools):
        raise ConfigError(problems[0])
    tool_names = [name.strip() for name in config.tools.split(",") if name.strip()]
    train, test = multi_turn.problems()
    test = test[: config.num_eval_problems]

    def make(problem: multi_turn.CalcProblem, size: int) -> ProblemGroupBuilder:
        return ProblemGroupBuilder(
            lambda: multi_turn.CalculatorEnv(renderer, problem, tool_names, config.max_turns), size, ()
        )

    dataset = ProblemDataset(train, lambda p: make(p, config.group_size), config.groups_per_batch, config.seed)
    description = (
        f"calculator: {len(train)} training and {len(test)} held-out products, up to {config.max_turns} turns, "
        f"tools {', '.join(tool_names)}"
    )
    prompts = [multi_turn.prompt_text(p, tool_names) for p in train + test]
    return EnvSetup(dataset, [make(p, 1) for p in test], description, prompts)


def build_env(config: RLConfig, renderer) -> EnvSetup:
    """The env a config names (or the mix of envs), with its train/test split; bad data raises DatasetError, bad
    settings ConfigError."""
    from cookbook_engine.config import ConfigError

    if mix.is_mix(config.env):
        return mixed_setup(config, renderer)
    if config.env == "arithmetic":
        return arithmetic_setup(config, renderer)
    if config.env == "calculator":
        return calculator_setup(config, renderer)
    train: list[Any]  # code_problems.CodeProblem or datasets.RLProblem: each has .prompt, as make() needs
    test: list[Any]
    if config.env == "code":
        train, test = code_problems.train_test_split()
        test = test[: config.num_eval_problems]

        def make(problem, size):
            return ProblemGroupBuilder(lambda: CodeEnv(renderer, problem), size, ())

        description = f"code: {len(train)} training and {len(test)} held-out Python problems graded by unit tests"
    elif config.env == "custom":
        train, test = datasets.load_rl_problems(
            config.dataset, grader=config.grader, test_fraction=config.test_fraction, seed=config.seed
        )
        if not train:
            raise datasets.DatasetError(
                f"{config.dataset}: no problems left to train on after holding out test_fraction={config.test_fraction}"
            )
        test = test[: config.num_eval_problems]

        answers = tuple(sorted({p.answer for p in train + test if p.grader == "contains"}))

        def make(problem, size):
            others = tuple(a for a in answers if a != problem.answer) if problem.grader == "contains" else ()
            return ProblemGroupBuilder(
                lambda: CustomEnv(renderer, problem, other_answers=others), size, (problem.grader,)
            )

        graders_used = sorted({p.grader for p in train + test})
        description = (
            f"custom {config.dataset}: {len(train)} training and {len(test)} held-out problems, "
            f"grader {', '.join(graders_used)}"
        )
    else:
        raise ConfigError(f"env={config.env}: choose one of arithmetic, code, custom")
    dataset = ProblemDataset(
        train, lambda problem: make(problem, config.group_size), config.groups_per_batch, config.seed
    )
    prompts = [p.prompt for p in train + test]
    return EnvSetup(dataset, [make(problem, 1) for problem in test], description, prompts)


# ------------------------------------------------------------------------------------------------ mixes


def env_names(env: str) -> list[str]:
    """The envs an `env=` value names: one, or a mix's (`arithmetic:2,code:1` gives arithmetic, code); none for a
    mix that does not parse (config.validate says why)."""
    try:
        return [part.spec for part in mix.parse_mix(env, "env")]
    except datasets.DatasetError:
        return []


@dataclass(frozen=True)
class TaskGroupBuilder(EnvGroupBuilder):
    """A group of one env of a mix: tagged with the env's name, its own tags under it (arithmetic/add)."""

    inner: EnvGroupBuilder
    name: str

    @property
    def task(self) -> str | None:
        return self.name

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    def logging_tags(self) -> list[str]:
        return [self.name, *(f"{self.name}/{tag}" for tag in self.inner.logging_tags())]


class MixedDataset(RLDataset):
    """Each step's groups split between the envs by weight (mix.step_counts, seeded by the step, so a resumed run
    gets the same batches); an env's k groups are the first k of its own batch at that step."""

    def __init__(self, parts: list[tuple[mix.MixPart, RLDataset]], groups_per_batch: int, seed: int):
        self.parts, self.groups_per_batch, self.seed = parts, groups_per_batch, seed

    def __len__(self) -> int:
        return max(len(train) for part, train in self.parts if part.weight > 0)

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(self.seed * 1_000_033 + index)
        counts = mix.step_counts([part for part, _ in self.parts], self.groups_per_batch, rng)
        return [
            TaskGroupBuilder(builder, part.name)
            for (part, train), count in zip(self.parts, counts)
            if count
            for builder in train.get_batch(index)[:count]
        ]


def mixed_setup(config: RLConfig, renderer) -> EnvSetup:
    """A mix of envs (`env=arithmetic:2,code:1`): each built alone, their groups split by weight at every step."""
    from cookbook_engine.config import ConfigError

    parts = mix.parse_mix(config.env, "env")
    for part in parts:
        if part.spec not in RL_ENVS:  # config.validate says so first; this guards callers that skip it
            raise ConfigError(f"env={config.env}: unknown env {part.spec}; choose from {', '.join(RL_ENVS)}")
    setups = [build_env(dataclasses.replace(config, env=part.spec), renderer) for part in parts]
    test: list[EnvGroupBuilder] = [
        TaskGroupBuilder(builder, part.name) for part, setup in zip(parts, setups) for builder in setup.test
    ]
    description = "a mix of envs: " + "; ".join(
        f"{part.name} (weight {part.weight:g}): {setup.description}" for part, setup in zip(parts, setups)
    )
    return EnvSetup(
        MixedDataset([(part, setup.train) for part, setup in zip(parts, setups)], config.groups_per_batch, config.seed),
        test,
        description,
        [prompt for setup in setups for prompt in setup.prompts],
        tuple(part.name for part in parts),
    )


# ------------------------------------------------------------------------------------------------ measuring


class FixedRewardEnv(Env):
    """An env's prompt with a reward fixed in advance (the sampled reply is not graded)."""

    def __init__(self, inner: Env, reward: float):
        self.inner, self.reward = inner, reward

    async def initial_observation(self):
        return await self.inner.initial_observation()

    async def step(self, action: list[int]) -> StepResult:
        return StepResult(reward=self.reward, episode_done=True, metrics={"correct": self.reward})


@dataclass(frozen=True)
class MixedRewardGroup(EnvGroupBuilder):
    """A group whose members get rewards 0, 1, 0, 1, ...: never constant, so it always trains."""

    inner: EnvGroupBuilder

    async def make_envs(self) -> Sequence[Env]:
        return [FixedRewardEnv(env, float(i % 2)) for i, env in enumerate(await self.inner.make_envs())]


def with_fixed_mixed_rewards(setup: EnvSetup) -> EnvSetup:
    """The setup with every training group's rewards fixed to 0, 1, 0, 1, ... (for measuring schedules; one env)."""
    if isinstance(setup.train, MixedDataset):
        raise ValueError("with_fixed_mixed_rewards: one env, not a mix")
    make_builder = setup.train.make_builder
    setup.train.make_builder = lambda problem: MixedRewardGroup(make_builder(problem))
    return setup
