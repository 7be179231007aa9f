"""Multi-turn, tool-using RL (env=calculator): the calculator tool (safe: numbers and + - * only), the env's turns
(a tool call's result fed back as the next observation, the reward on the final answer, the turn limit), the
episode assembled into one rollout whose mask trains only the model's tokens, the refusals (unknown tool, no turn
limit), and Transcripts' turns. The real-model run is tests/test_multi_turn_model.py (slow)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from app import transcripts_view as view
from cookbook_engine import renderers
from cookbook_engine.config import RLConfig, validate
from cookbook_engine.rl import envs, loop, multi_turn, tools
from cookbook_engine.rl.data import datum_from_rollout
from cookbook_engine.training.common import tokenizer_for


@pytest.fixture(scope="module")
def renderer():
    config = RLConfig(env="calculator")
    return renderers.get_renderer(config.renderer, tokenizer_for(config))


@pytest.mark.parametrize(
    ("expression", "value"), [("47 * 38", "1786"), ("2 + 3 * 4 - 1", "13"), ("-5 * 3", "-15"), (" 7 ", "7")]
)
def test_the_calculator_computes_integers_with_plus_minus_times(expression, value):
    assert tools.calculate(expression) == value


@pytest.mark.parametrize(
    "expression", ["__import__('os').system('id')", "2 ** 3", "12 / 3", "(1 + 2)", "", "1 +", "1" * 10 + " * 2"]
)
def test_the_calculator_refuses_anything_else_without_running_it(expression):
    with pytest.raises(tools.ToolError):
        tools.calculate(expression)


def test_an_unknown_tool_call_gets_an_error_back():
    text, ran = tools.run_call(tools.Call("python", "print(1)"), ["calculator"])
    assert not ran and text == "error: unknown tool <python>; the tools are <calc>"
    assert tools.run_call(tools.Call("calc", "6 * 7"), ["calculator"]) == ("42", True)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tools": "python"}, "tools=python: unknown tool python; choose from calculator"),
        ({"tools": ""}, "tools: env=calculator needs a tool"),
        ({"max_turns": 0}, "max_turns=0: env=calculator is multi-turn and needs a turn limit"),
        ({"env": "arithmetic:1,calculator:1", "max_turns": 0}, "env=calculator is multi-turn and needs a turn limit"),
    ],
)
def test_bad_multi_turn_settings_are_refused_with_one_message(settings, message):
    problems = validate(RLConfig(**{"env": "calculator", **settings}))
    assert len(problems) == 1 and message in problems[0], problems


def test_single_turn_envs_ignore_the_turn_and_tool_settings():
    assert validate(RLConfig(env="arithmetic", max_turns=0, tools="python")) == []


def _tokens(renderer, text: str) -> list[int]:
    return renderer.tokenizer.encode(text, add_special_tokens=False) + list(renderer.get_stop_sequences())


def _play(renderer, replies: list[str], max_turns: int = 3):
    """Run one calculator episode with scripted replies; (env, turns)."""
    problem = multi_turn.CalcProblem(47, 38, 0)
    env = multi_turn.CalculatorEnv(renderer, problem, ["calculator"], max_turns)

    async def run():
        prompt, _ = await env.initial_observation()
        observation, turns = prompt.to_ints(), []
        for reply in replies:
            action = _tokens(renderer, reply)
            result = await env.step(action)
            turns.append(multi_turn.Turn(observation, action, [-0.5] * len(action), "stop", result))
            if result.episode_done:
                break
            observation = result.next_observation.to_ints()
        return turns

    return env, asyncio.run(run())


def test_a_tool_call_feeds_its_result_back_and_the_final_answer_is_rewarded(renderer):
    env, turns = _play(renderer, ["<calc>47 * 38</calc>", "1786"])
    first, last = turns[0].result, turns[1].result
    assert not first.episode_done and first.reward == 0.0
    fed_back = renderer.tokenizer.decode(first.next_observation.to_ints()[len(turns[0].observation) :])
    assert fed_back.startswith("<calc>47 * 38</calc>") and "calc: 1786" in fed_back  # the reply, then the result
    assert last.episode_done and last.reward == 1.0
    assert last.metrics == {"correct": 1.0, "format": 1.0, "turns": 2.0, "tool_calls": 1.0, "tool_errors": 0.0}
    assert last.logs["turns"] == [
        {"reply": "<calc>47 * 38</calc>", "tool": "calc", "result": "1786"},
        {"reply": "1786"},
    ]


def test_the_turn_limit_ends_an_episode_that_keeps_calling_tools(renderer):
    _, turns = _play(renderer, ["<calc>1 + 1</calc>", "<calc>2 + 2</calc>", "1786"], max_turns=2)
    assert len(turns) == 2 and turns[-1].result.episode_done
    assert turns[-1].result.reward == pytest.approx(-0.1) and turns[-1].result.metrics["correct"] == 0.0
    assert turns[-1].result.logs["ended"] == "turn limit reached while calling a tool"
    _, turns = _play(renderer, ["<python>1</python>", "1786"])
    assert turns[-1].result.logs["turns"][0]["result"] == "error: unknown tool <python>; the tools are <calc>"
    assert turns[-1].result.metrics["tool_errors"] == 1.0 and turns[-1].result.reward == 1.0


def test_an_episode_trains_only_the_models_tokens(renderer):
    _, turns = _play(renderer, ["<calc>47 * 38</calc>", "1786"])
    rollout = multi_turn.assemble(turns[0].observation, turns)
    first, second = turns[0].action, turns[1].action
    observation = turns[1].observation[len(turns[0].observation) + len(first) :]
    assert rollout.tokens == first + observation + second
    assert rollout.mask == [1.0] * len(first) + [0.0] * len(observation) + [1.0] * len(second)
    assert rollout.action_tokens == len(first) + len(second) and rollout.reward == 1.0
    datum = datum_from_rollout(rollout, advantage=0.5)
    mask = datum.loss_fn_inputs["mask"].to_numpy()
    advantages = datum.loss_fn_inputs["advantages"].to_numpy()
    logprobs = datum.loss_fn_inputs["logprobs"].to_numpy()
    prompt = len(turns[0].observation) - 1
    assert mask.sum() == len(first) + len(second) and (advantages == 0.5 * mask).all()
    assert (logprobs[prompt + len(first) : prompt + len(first) + len(observation)] == 0).all()
    assert (mask[prompt + len(first) : prompt + len(first) + len(observation)] == 0).all()  # the tool's result


def test_an_observation_that_rewrites_the_conversation_is_refused(renderer):
    _, turns = _play(renderer, ["<calc>47 * 38</calc>", "1786"])
    turns[1].observation = turns[1].observation[1:]
    with pytest.raises(ValueError, match="turn 2: the observation does not extend the conversation"):
        multi_turn.assemble(turns[0].observation, turns)


class ScriptedSampler:
    """A sampling client that calls the calculator first and answers with what it got back."""

    def __init__(self, renderer):
        self.renderer, self.calls = renderer, []

    async def sample_async(self, prompt, num_samples, params):
        text = self.renderer.tokenizer.decode(prompt.to_ints())
        self.calls.append(num_samples)
        fed_back = text.rsplit("calc: ", 1)[1].split("<")[0] if "calc: " in text else None
        reply = fed_back or "<calc>" + _expression(text) + "</calc>"
        tokens = _tokens(self.renderer, reply)
        sequence = SimpleNamespace(tokens=tokens, logprobs=[-0.1] * len(tokens), stop_reason="stop")
        return SimpleNamespace(sequences=[sequence] * num_samples)


def _expression(text: str) -> str:
    return text.split("What is ", 1)[1].split("?", 1)[0]


def test_the_loop_plays_every_turn_of_a_group_and_logs_each_in_the_transcript(renderer):
    config = RLConfig(env="calculator", group_size=2, groups_per_batch=1, max_turns=3)
    setup = envs.build_env(config, renderer)
    builder = setup.train.get_batch(0)[0]
    sampler = ScriptedSampler(renderer)
    group = asyncio.run(loop.group_rollout(builder, sampler, config, seed=1))
    assert sampler.calls == [2, 1, 1]  # the shared first prompt once for the group, then each episode alone
    assert group.rewards_G == [1.0, 1.0] and all(r.metrics["turns"] == 2.0 for r in group.rollouts_G)
    rows = loop.transcript_rows(0, [group], [[0.0, 0.0]], [False], renderer.tokenizer)
    assert "calc: " in rows[0]["completion"] and rows[0]["completion"].count("<calc>") == 1
    lines = view.turn_lines(rows[0]["metrics"])
    assert [who for who, _ in lines] == ["turn 1: model", "turn 1: <calc> returned", "turn 2: model"]
    assert lines[1][1] == lines[2][1] and "turns" not in view.split_details(rows[0]["metrics"])[1]


class SilentSampler(ScriptedSampler):
    """Answers 0 without calling the tool."""

    async def sample_async(self, prompt, num_samples, params):
        tokens = _tokens(self.renderer, "0")
        sequence = SimpleNamespace(tokens=tokens, logprobs=[-0.1] * len(tokens), stop_reason="stop")
        return SimpleNamespace(sequences=[sequence] * num_samples)


def test_cookbook_eval_plays_the_calculator_sets_episodes_and_grades_the_final_answer(renderer):
    from cookbook_engine.evals import evaluators, sets

    eval_set = sets.load_eval_set("builtin:calculator", max_examples=4)
    assert eval_set.kind == "episodes" and len(sets.load_eval_set("builtin:calculator").examples) == 64
    _, held_out = multi_turn.problems()
    assert [e.prompt for e in eval_set.examples] == [p.question for p in held_out[:4]]  # never trained on
    result = asyncio.run(evaluators.evaluate(ScriptedSampler(renderer), renderer, eval_set))
    assert result.metric("accuracy").value == 1.0 and result.metric("tool_calls").value == 1.0
    row = result.examples[0]
    assert row.correct and row.output.startswith("<calc>") and f"[calc: {row.reference}]" in row.output
    assert [turn.get("tool") for turn in row.details["turn_replies"]] == ["calc", None]
    wrong = asyncio.run(evaluators.evaluate(SilentSampler(renderer), renderer, eval_set))
    assert wrong.metric("accuracy").value == 0.0 and wrong.metric("tool_calls").value == 0.0


def test_transcripts_show_every_turn_of_an_episode(home, default_model_ready):
    from storage import Store
    from tests.test_studio_apptest import create_rl_run, open_page

    store = Store.default()
    create_rl_run(home, "rl-calc-demo", "calc-rl", {"env": "calculator"}, store)
    turns = [{"reply": "<calc>47 * 38</calc>", "tool": "calc", "result": "1786"}, {"reply": "1786"}]
    row = {"step": 0, "group_idx": 0, "sample_idx": 0, "prompt": "What is 47 * 38?", "reward": 1.0, "advantage": 0.0}
    row |= {"completion": "<calc>47 * 38</calc> ... 1786", "stop_reason": "stop", "metrics": {"turns": turns}}
    store.add_transcripts("rl-calc-demo", [row])
    at = open_page("transcripts", run="rl-calc-demo")
    assert [e.label for e in at.expander if e.label.startswith("Turns")] == ["Turns (2)"]
    captions = [c.value for c in at.caption]
    assert {"turn 1: model", "turn 1: <calc> returned", "turn 2: model"} <= set(captions), captions
    assert {"<calc>47 * 38</calc>", "1786"} <= {c.value for c in at.code}


def test_the_new_run_form_offers_the_calculator_env_and_its_turn_limit(home, default_model_ready, monkeypatch):
    monkeypatch.setenv("COOKBOOK_MEMORY_CHECK", "off")  # the form's check, not this busy machine's free memory
    from tests.test_studio_apptest import by_label, click, open_page, shown_text

    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()

    def turn_fields() -> list[str]:
        fields = [*at.number_input, *at.text_input]
        return [w.label for w in fields if w.label.startswith(("Max turns", "Tools"))]

    assert turn_fields() == []  # arithmetic is single-turn: no turn limit or tools to set
    by_label(at.get("button_group"), "Environment").set_value("calculator").run()
    assert turn_fields() == ["Max turns (multi-turn envs)", "Tools (calculator)"]
    click(at, "Check settings")
    assert "calculator: 512 training" in shown_text(at) and "up to 3 turns" in shown_text(at)
    by_label(at.number_input, "Max turns (multi-turn envs)").set_value(0)
    click(at, "Check settings")
    assert any("needs a turn limit" in error.value for error in at.error), shown_text(at)


def test_an_eval_set_naming_an_unknown_multi_turn_env_is_refused_before_anything_is_sampled(renderer):
    import dataclasses

    from cookbook_engine.evals import evaluators, sets

    eval_set = sets.load_eval_set("builtin:calculator", max_examples=2)
    eval_set = dataclasses.replace(
        eval_set, examples=[eval_set.examples[0], dataclasses.replace(eval_set.examples[1], env="chess")]
    )
    sampler = ScriptedSampler(renderer)
    with pytest.raises(
        ValueError, match="builtin:calculator: no multi-turn env named 'chess'; the ones there are: calculator"
    ):
        asyncio.run(evaluators.evaluate(sampler, renderer, eval_set))
    assert sampler.calls == []
    with pytest.raises(ValueError, match="no multi-turn env named 'chess'"):
        multi_turn.env_for("chess", renderer, (1, 2, 0), ["calculator"], 3)
