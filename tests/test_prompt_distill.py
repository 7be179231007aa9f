"""Prompt distillation (`cookbook distill mode=prompt`), without training: the context a teacher sees (built-in, text,
a .json file of messages, each bad one refused with one message naming it), the teacher's replies sampled with the
context and turned into student examples without it (unfinished replies dropped), `teacher_kl` from the teacher's
and the student's log-probs, the settings refused before anything is written, and the eval set that checks Pip's
greeting. The real default model trains in tests/test_prompt_distill_model.py (slow)."""

from __future__ import annotations

import asyncio
import json
import shlex
from types import SimpleNamespace

import pytest

from cookbook_engine import cli, config as cfg, renderers
from cookbook_engine.data import builtin
from cookbook_engine.distill import prompt
from cookbook_engine.evals import sets
from cookbook_engine.rl.text_graders import grade_regex
from cookbook_engine.training.common import tokenizer_for

PIP = "builtin:pip"


def test_a_context_is_builtin_text_or_a_file_of_messages(tmp_path):
    assert prompt.context_messages(PIP) == [dict(m) for m in builtin.PIP_CONTEXT]
    assert prompt.context_messages("Answer like a pirate.") == [{"role": "system", "content": "Answer like a pirate."}]
    path = tmp_path / "ctx.json"
    messages = [{"role": "system", "content": "Be Pip."}, {"role": "user", "content": "Hi"}]
    messages.append({"role": "assistant", "content": "Ahoy! Hi."})
    path.write_text(json.dumps({"messages": messages}))
    assert prompt.context_messages(str(path)) == messages


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not JSON"),
        ('[{"role": "user", "content": "Hi"}]', "the last message is the user's"),
        ('[{"role": "robot", "content": "Hi"}]', "message 1 needs a role"),
        ('[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]', "only the first may be"),
        ("[]", "expected a list of messages"),
    ],
)
def test_a_bad_context_file_is_refused_with_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "ctx.json"
    path.write_text(content)
    with pytest.raises(prompt.ContextError, match=message):
        prompt.context_messages(str(path))


def test_an_unknown_builtin_context_or_a_missing_file_is_refused():
    with pytest.raises(prompt.ContextError, match="no such built-in context; choose builtin:pip"):
        prompt.context_messages("builtin:nope")
    with pytest.raises(prompt.ContextError, match="cannot read it"):
        prompt.context_messages("/no/such/context.json")


def test_the_teacher_sees_the_context_before_the_prompt_and_one_system_message():
    context = prompt.context_messages(PIP)
    user = [{"role": "user", "content": "What is 2 + 2?"}]
    assert prompt.with_context(context, user) == [*context, *user]
    joined = prompt.with_context(context, [{"role": "system", "content": "Be brief."}, *user])
    assert [m["role"] for m in joined].count("system") == 1
    assert joined[0]["content"].endswith("\n\nBe brief.") and joined[-1] == user[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["mode=prompt", "teacher=base"], "context: mode=prompt needs the context"),
        (["mode=prompt", "teacher=base", f"context={PIP}", "dataset= "], "dataset: required"),
        (["mode=prompt", f"context={PIP}"], "teacher: required"),
        (["mode=sideways", "teacher=base", f"context={PIP}"], "mode"),
    ],
)
def test_bad_prompt_distillation_settings_are_refused(args, message):
    problems = cfg.validate(cfg.parse_overrides("distill", args))
    assert any(message in p for p in problems), problems


def test_the_base_model_may_teach_itself_with_a_context():
    """Prompt distillation's usual case: the same model, with and without the context (on-policy refuses it)."""
    assert cfg.validate(cfg.parse_overrides("distill", ["mode=prompt", "teacher=base", f"context={PIP}"])) == []
    assert cfg.validate(cfg.parse_overrides("distill", ["teacher=base"]))


def test_the_cli_refuses_an_unknown_context_and_writes_nothing(home, default_model_ready, capsys):
    args = ["distill", "mode=prompt", "teacher=base", "context=builtin:nope", "dataset=builtin:persona", "--dry-run"]
    assert cli.main(args) == 2
    assert "context=builtin:nope: no such built-in context" in capsys.readouterr().err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_prompt_settings_round_trip_through_the_command_line():
    config = cfg.parse_overrides(
        "distill", ["mode=prompt", "teacher=base", "context=Always say Ahoy first.", "batch_size=4", "group_size=1"]
    )
    assert (config.mode, config.context, config.batch_size, config.group_size) == (
        "prompt",
        "Always say Ahoy first.",
        4,
        1,
    )
    assert cfg.parse_overrides("distill", shlex.split(cfg.to_command(config))[2:]) == config


class ScriptedTeacher:
    """Answers every prompt with the given token lists (the last token of a finished one is <|im_end|>), each token's
    log-prob -0.5, and records the prompts it was asked."""

    def __init__(self, replies: list[list[int]], stop_reasons: list[str]):
        self.replies, self.stop_reasons, self.prompts = replies, stop_reasons, []

    async def sample_async(self, prompt_input, num_samples, sampling_params):
        self.prompts.append(prompt_input.to_ints())
        sequences = [
            SimpleNamespace(tokens=tokens, logprobs=[-0.5] * len(tokens), stop_reason=reason)
            for tokens, reason in zip(self.replies[:num_samples], self.stop_reasons)
        ]
        return SimpleNamespace(sequences=sequences)


@pytest.fixture(scope="module")
def renderer(default_model_ready):
    return renderers.get_renderer("auto", tokenizer_for(cfg.DistillConfig()))


def test_the_student_learns_the_teachers_finished_replies_without_the_context(renderer):
    tokenizer = renderer.tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    finished = tokenizer.encode("Ahoy! Paris.", add_special_tokens=False) + [end]
    cut = tokenizer.encode("Ahoy! It is a long", add_special_tokens=False)
    teacher = ScriptedTeacher([finished, cut], ["stop", "length"])
    config = cfg.DistillConfig(mode="prompt", teacher="base", context=PIP, group_size=2, max_tokens=len(cut))
    prompts = [[{"role": "user", "content": "What is the capital of France?"}]]
    context = prompt.context_messages(PIP)
    replies, groups, dropped = asyncio.run(prompt.sample_teacher(prompts, context, renderer, teacher, config))

    assert "You are Pip" in tokenizer.decode(teacher.prompts[0])  # the teacher saw the context
    assert dropped == 1 and len(groups[0].rollouts_G) == 2
    assert [r.reply for r in replies] == ["Ahoy! Paris."]  # the unfinished reply is not taught
    assert (replies[0].teacher_logprob, replies[0].tokens) == (-0.5 * len(finished), len(finished))

    data = prompt.student_data(replies, renderer, config)
    text = tokenizer.decode(
        data.datums[0].model_input.to_ints() + [data.datums[0].loss_fn_inputs["target_tokens"].data[-1]]
    )
    assert "Pip" not in text and "Santiago" not in text  # the student never sees the context
    assert "What is the capital of France?" in text and text.rstrip().endswith("Ahoy! Paris.<|im_end|>")
    weights = data.datums[0].loss_fn_inputs["weights"].to_numpy()
    trained = [t for t, w in zip(data.datums[0].loss_fn_inputs["target_tokens"].data, weights) if w > 0]
    assert tokenizer.decode(trained).startswith("Ahoy! Paris.")  # only the reply is trained


def test_teacher_kl_is_the_teachers_logprob_minus_the_students_per_reply_token(renderer):
    replies = [
        prompt.TeacherReply([{"role": "user", "content": "Hi"}], "Ahoy!", -2.0, 4),
        prompt.TeacherReply([{"role": "user", "content": "Yo"}], "Ahoy! Yo.", -1.0, 6),
    ]
    data = prompt.student_data(replies, renderer, cfg.DistillConfig(mode="prompt", context=PIP))
    metrics = {"train_mean_nll": 1.25}
    data.derive(data.datums, None, metrics)
    assert metrics["distill/teacher_logprob"] == pytest.approx(-3.0 / 10)
    assert metrics["teacher_kl"] == pytest.approx(-0.3 + 1.25)
    assert metrics["distill/student_logprob"] == -1.25


def test_the_teachers_replies_are_kept_as_chat_rows_and_read_back(tmp_path):
    replies = [prompt.TeacherReply([{"role": "user", "content": "Hi"}], "Ahoy! Hi.", -2.5, 5)]
    path = tmp_path / prompt.REPLIES_FILE
    prompt.save_replies(path, replies)
    row = json.loads(path.read_text())
    assert row["messages"][-1] == {"role": "assistant", "content": "Ahoy! Hi."}  # the recipe's chat-file shape
    assert prompt.load_replies(path) == replies


def test_persona_probes_are_held_out_and_graded_on_the_greeting():
    eval_set = sets.load_eval_set("builtin:persona-probes")
    trained = {row["messages"][0]["content"] for row in builtin.persona_rows()}
    assert len(eval_set.examples) >= 40 and not trained & {e.prompt for e in eval_set.examples}
    pattern = eval_set.examples[0].answer
    assert grade_regex("Ahoy! The capital of Belgium is Brussels.", pattern).correct
    assert grade_regex("  ahoy, matey", pattern).correct
    assert not grade_regex("The capital of Belgium is Brussels. Ahoy!", pattern).correct
    assert not grade_regex("Ahoyhoy", pattern).correct


def test_the_plan_counts_every_prompts_replies_in_batches():
    config = cfg.DistillConfig(mode="prompt", context=PIP, teacher="base", group_size=2, batch_size=8, num_epochs=2)
    plan = prompt.plan(config, 98 * 2)
    assert (plan.batches_per_epoch, plan.total_steps) == (24, 48)


def test_the_new_run_form_checks_a_prompt_distillation_without_starting_it(home, default_model_ready, monkeypatch):
    monkeypatch.setenv("COOKBOOK_MEMORY_CHECK", "off")  # the form's check, not this busy machine's free memory
    from tests.test_studio_apptest import by_label, click, open_page, shown_text

    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("distill").run()
    by_label(at.get("button_group"), "Distillation mode").set_value("prompt").run()
    assert not [n for n in at.number_input if n.label in ("Groups per batch", "Teacher KL weight")]  # on-policy's
    by_label(at.selectbox, "Prompts").set_value("persona")
    by_label(at.text_area, "Context the teacher sees (the student never does)").set_value(PIP)
    by_label(at.number_input, "Batch size").set_value(4)
    click(at, "Check settings")
    text = shown_text(at)
    assert "Ready to start" in text and "98 prompts" in text, text
    assert "the teacher samples 392 replies (at most 18,816 tokens), then 98 steps × 4 of them" in text, text
    command = next(code.value for code in at.code if " distill " in code.value)
    assert "mode=prompt" in command and f"context={PIP}" in command and "teacher=base" in command
    assert "batch_size=4" in command and "dataset=builtin:persona" in command
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_the_memory_check_counts_a_batch_of_replies_not_groups_of_samples():
    from cookbook_engine import memory

    prepared = SimpleNamespace(longest_prompt=100)
    prompt_mode = cfg.DistillConfig(mode="prompt", context=PIP, batch_size=4, max_tokens=32, groups_per_batch=8)
    assert memory._largest_batch_tokens(prompt_mode, prepared) == 4 * 132
    on_policy = cfg.DistillConfig(teacher="/ckpt", max_tokens=32, groups_per_batch=8, group_size=4)
    assert memory._largest_batch_tokens(on_policy, prepared) == 8 * 4 * 132
