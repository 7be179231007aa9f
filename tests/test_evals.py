"""Evaluation promises that need no model: interval and pass@k arithmetic, label parsing and classification scores,
preference accuracy counted strictly with ties apart (the evaluators and DPO's training metric alike), the
evaluators' grading through a scripted sampling client, eval set loading, stored results and their reuse, the
leaderboard and disagreement tables, and `cookbook eval`'s bad-input exits. Real-model evaluations are in
tests/test_evals_model.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from dataclasses import asdict

import pandas as pd
import pytest
import torch

from cookbook_engine.evals import evaluators, report, sets, stats
from cookbook_engine.evals.evaluators import EvalSettings
from cookbook_engine.evals.sets import ClassificationExample, EvalSet, GenerationExample

# ------------------------------------------------------------------------------------------------ statistics


def test_wilson_interval_matches_published_values():
    assert stats.wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert stats.wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert stats.wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)
    low, high = stats.wilson_interval(50, 100)
    wide_low, wide_high = stats.wilson_interval(5, 10)
    assert wide_low < low < 0.5 < high < wide_high  # more examples, narrower interval


def test_pass_at_k_is_the_unbiased_estimator():
    for n, c, k in [(5, 2, 1), (5, 2, 2), (5, 2, 3), (10, 3, 5), (4, 0, 2), (4, 4, 1)]:
        draws = list(itertools.combinations([True] * c + [False] * (n - c), k))
        brute = sum(any(draw) for draw in draws) / len(draws)
        assert stats.pass_at_k(n, c, k) == pytest.approx(brute), (n, c, k)
    assert stats.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    with pytest.raises(ValueError, match="k <= n"):
        stats.pass_at_k(2, 1, 3)


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = [0.0, 1.0] * 20
    first = stats.bootstrap_interval(values, stats.mean)
    assert first == stats.bootstrap_interval(values, stats.mean)
    assert first[0] < 0.5 < first[1]


def test_classification_scores_count_unparseable_replies_as_misses():
    labels = ["negative", "positive"]
    truths = ["positive", "positive", "positive", "negative", "negative", "negative"]
    predictions = ["positive", "positive", None, "negative", "positive", None]
    metrics = {m.name: m for m in stats.classification_metrics(labels, truths, predictions)}
    assert metrics["accuracy"].value == pytest.approx(3 / 6) and metrics["accuracy"].n == 6
    assert metrics["unparseable"].value == pytest.approx(2 / 6)
    assert metrics["precision/positive"].value == pytest.approx(2 / 3) and metrics["precision/positive"].n == 3
    assert metrics["recall/positive"].value == pytest.approx(2 / 3)
    assert metrics["precision/negative"].value == 1.0 and metrics["recall/negative"].value == pytest.approx(1 / 3)
    f1_positive, f1_negative = 2 / 3, 2 * (1 * 1 / 3) / (1 + 1 / 3)
    assert metrics["macro_f1"].value == pytest.approx((f1_positive + f1_negative) / 2)
    confusion = metrics["accuracy"].details["confusion"]
    assert confusion["negative"] == {"negative": 1, "positive": 1, stats.UNPARSEABLE: 1}
    assert all(m.low <= m.value <= m.high for m in metrics.values())


def test_a_label_is_parsed_only_when_the_reply_names_exactly_one():
    labels = ["negative", "positive"]
    assert evaluators.parse_label("Positive.", labels) == "positive"
    assert evaluators.parse_label("The sentiment is NEGATIVE", labels) == "negative"
    assert evaluators.parse_label("It is neutral", labels) is None
    assert evaluators.parse_label("positive or negative?", labels) is None
    assert evaluators.parse_label("positively", labels) is None  # whole words only
    assert evaluators.classification_prompt("Review: fine", labels).endswith("Answer with one of: negative, positive.")


def test_preference_accuracy_is_strict_and_ties_are_counted_apart():
    metrics = {m.name: m for m in evaluators.preference_metrics("", [2.0, -1.0, 0.0, 0.0005, 3.0], 1e-3)}
    assert metrics["accuracy"].value == pytest.approx(2 / 5)
    assert metrics["ties"].value == pytest.approx(2 / 5)
    assert metrics["margin"].value == pytest.approx(4.0005 / 5)


def test_dpo_training_accuracy_counts_like_the_evaluators():
    from cookbook_engine.dpo.loop import dpo_loss

    zero = torch.zeros(4)
    _, at_start = dpo_loss(zero, zero, zero, zero, beta=0.1)  # policy = reference: every pair a tie
    assert at_start["accuracy"] == 0.0 and at_start["ties"] == 1.0
    _, later = dpo_loss(torch.tensor([1.0, 0.0, -2.0, 0.0]), zero, zero, zero, beta=0.1)
    assert later["accuracy"] == 0.25 and later["ties"] == 0.5


# ------------------------------------------------------------------------------------------------ evaluators


class ScriptedTokenizer:
    """Token i is the i-th distinct string seen; decode joins strings."""

    def __init__(self):
        self.vocab: list[str] = ["<stop>"]

    def token(self, text: str) -> int:
        if text not in self.vocab:
            self.vocab.append(text)
        return self.vocab.index(text)


class ScriptedRenderer:
    """A renderer over ScriptedTokenizer: the prompt is one token per message; replies are one token each."""

    def __init__(self, tokenizer: ScriptedTokenizer):
        self.tokenizer = tokenizer

    def build_generation_prompt(self, messages):
        from tinker import types

        return types.ModelInput.from_ints([self.tokenizer.token(m["content"]) for m in messages])

    def get_stop_sequences(self):
        return [0]

    def parse_response(self, tokens):
        return {"role": "assistant", "content": "".join(self.tokenizer.vocab[t] for t in tokens if t)}, 0 in tokens

    def build_supervised_example(self, messages, train_on_what=None):
        tokens = [self.tokenizer.token(m["content"]) for m in messages]
        return tokens, [0.0] * (len(tokens) - 1) + [1.0]


class ScriptedClient:
    """A sampling client that answers each prompt from a table and gives each reply token a fixed log-prob."""

    def __init__(self, tokenizer: ScriptedTokenizer, replies: dict[str, list[str]], logprobs: dict[str, float]):
        self.tokenizer, self.replies, self.logprobs = tokenizer, replies, logprobs
        self.requests = []

    async def sample_async(self, prompt, num_samples, params):
        from tinker import types

        self.requests.append((prompt.to_ints(), num_samples, params))
        text = self.tokenizer.vocab[prompt.to_ints()[-1]]
        answers = self.replies[text][:num_samples]
        return types.SampleResponse(
            sequences=[
                types.SampledSequence(
                    stop_reason="stop",
                    sequence_id=a,
                    _tokens_list=[self.tokenizer.token(a), 0],
                    _logprobs_list=[0.0, 0.0],
                )
                for a in answers
            ]
        )

    async def compute_logprobs_async(self, prompt):
        tokens = prompt.to_ints()
        return [None] + [self.logprobs.get(self.tokenizer.vocab[t], -1.0) for t in tokens[1:]]


def run(coro):
    return asyncio.run(coro)


def test_generation_is_graded_by_the_named_grader_greedy_and_seeded():
    tokenizer = ScriptedTokenizer()
    client = ScriptedClient(tokenizer, {"7+5?": ["It is 12"], "capital?": ["Paris"], "3*3?": ["ten"]}, {})
    eval_set = EvalSet(
        "t",
        "generation",
        "",
        [
            GenerationExample("7+5?", "12", "numeric"),
            GenerationExample("capital?", "lunthaven", "contains"),
            GenerationExample("3*3?", "9", "numeric"),
        ],
        max_tokens=16,
    )
    result = run(evaluators.evaluate(client, ScriptedRenderer(tokenizer), eval_set, EvalSettings(seed=3)))
    assert [r.correct for r in result.examples] == [True, False, False]
    assert [r.output for r in result.examples] == ["It is 12", "Paris", "ten"]
    accuracy = result.metric("accuracy")
    assert accuracy.value == pytest.approx(1 / 3) and accuracy.n == 3
    assert (accuracy.low, accuracy.high) == pytest.approx(stats.wilson_interval(1, 3))
    params = client.requests[0][2]
    assert params.temperature == 0 and params.seed == 3 and params.max_tokens == 16 and params.stop == [0]


def test_several_samples_per_prompt_give_pass_at_k():
    tokenizer = ScriptedTokenizer()
    client = ScriptedClient(tokenizer, {"a?": ["1", "2", "1", "3"], "b?": ["0", "0", "0", "0"]}, {})
    eval_set = EvalSet(
        "t", "generation", "", [GenerationExample("a?", "1", "exact"), GenerationExample("b?", "1", "exact")]
    )
    result = run(evaluators.evaluate(client, ScriptedRenderer(tokenizer), eval_set, EvalSettings(samples=4)))
    assert result.metric("pass@1").value == pytest.approx((2 / 4 + 0) / 2)
    assert result.metric("pass@4").value == pytest.approx((1 + 0) / 2)
    assert client.requests[0][2].temperature == evaluators.SAMPLING_TEMPERATURE
    assert result.examples[0].details["passed"] == 2 and result.examples[0].details["outputs"][1] == "2"


def test_classification_evaluator_reports_unparseable_replies():
    tokenizer = ScriptedTokenizer()
    prompts = {
        "good positive or negative": ["Positive"],
        "bad positive or negative": ["neutral"],
        "meh positive or negative": ["negative"],
    }
    client = ScriptedClient(tokenizer, prompts, {})
    examples = [
        ClassificationExample("good positive or negative", "positive"),
        ClassificationExample("bad positive or negative", "negative"),
        ClassificationExample("meh positive or negative", "positive"),
    ]
    eval_set = EvalSet("t", "classification", "", examples, labels=["negative", "positive"], max_tokens=8)
    result = run(evaluators.evaluate(client, ScriptedRenderer(tokenizer), eval_set))
    assert [r.parsed for r in result.examples] == ["positive", None, "negative"]
    assert result.metric("accuracy").value == pytest.approx(1 / 3)
    assert result.metric("unparseable").value == pytest.approx(1 / 3)


class BatchingClient(ScriptedClient):
    """A client that also takes several prompts in one request, as the local backend's sample_many does."""

    def __init__(self, *args):
        super().__init__(*args)
        self.batches: list[int] = []

    async def sample_many_async(self, prompts, num_samples, params):
        self.batches.append(len(prompts))
        return [await self.sample_async(prompt, num_samples, params) for prompt in prompts]


def test_a_client_that_batches_prompts_gets_them_in_batches_with_the_same_results(monkeypatch):
    tokenizer = ScriptedTokenizer()
    answers = {f"{i}+1?": [str(i + 1 if i % 3 else i)] for i in range(7)}  # every third reply wrong
    answers_right = {q: [str(int(q.split("+")[0]) + 1)] for q in answers}
    eval_set = EvalSet("t", "generation", "", [GenerationExample(q, a[0], "exact") for q, a in answers_right.items()])
    monkeypatch.setattr(evaluators, "BATCH_PROMPTS", 3)
    advanced = []
    progress = evaluators.Progress(advance=advanced.append)
    one_by_one = run(evaluators.evaluate(ScriptedClient(tokenizer, answers, {}), ScriptedRenderer(tokenizer), eval_set))
    batching = BatchingClient(tokenizer, answers, {})
    batched = run(evaluators.evaluate(batching, ScriptedRenderer(tokenizer), eval_set, progress=progress))
    assert batching.batches == [3, 3, 1] and sorted(advanced) == [1, 3, 3]
    assert [(r.index, r.output, r.correct) for r in batched.examples] == [
        (r.index, r.output, r.correct) for r in one_by_one.examples
    ]
    assert [r.correct for r in batched.examples] == [i % 3 != 0 for i in range(7)]


def test_preference_and_nll_evaluators_score_log_likelihoods():
    from cookbook_engine.data.loading import PreferencePair

    tokenizer = ScriptedTokenizer()
    client = ScriptedClient(tokenizer, {}, {"short": -1.0, "long": -5.0, "same": -2.0})
    user = [{"role": "user", "content": "q"}]
    pairs = [
        PreferencePair(user, [{"role": "assistant", "content": "short"}], [{"role": "assistant", "content": "long"}]),
        PreferencePair(user, [{"role": "assistant", "content": "same"}], [{"role": "assistant", "content": "same"}]),
    ]
    renderer = ScriptedRenderer(tokenizer)
    result = run(evaluators.evaluate(client, renderer, EvalSet("p", "preference", "", pairs)))
    assert [r.parsed for r in result.examples] == ["chosen", "tie"]
    assert result.metric("accuracy").value == 0.5 and result.metric("ties").value == 0.5
    with_reference = run(
        evaluators.evaluate(client, renderer, EvalSet("p", "preference", "", pairs), reference_client=client)
    )
    assert with_reference.metric("reward_ties").value == 1.0  # the policy is its own reference

    chats = [
        sets.ChatExample((user[0], {"role": "assistant", "content": "short"})),
        sets.ChatExample((user[0], {"role": "assistant", "content": "long"})),
    ]
    nll = run(evaluators.evaluate(client, renderer, EvalSet("n", "nll", "", chats)))
    assert nll.metric("nll").value == pytest.approx(3.0) and nll.metric("ppl").value == pytest.approx(math.exp(3))


def test_a_cancelled_evaluation_stops():
    tokenizer = ScriptedTokenizer()
    client = ScriptedClient(tokenizer, {"a?": ["1"]}, {})
    eval_set = EvalSet("t", "generation", "", [GenerationExample("a?", "1", "exact")] * 5)
    progress = evaluators.Progress(cancelled=lambda: True)
    with pytest.raises(evaluators.EvalCancelled):
        run(evaluators.evaluate(client, ScriptedRenderer(tokenizer), eval_set, progress=progress))
    assert client.requests == []


# ------------------------------------------------------------------------------------------------ eval sets


def test_builtin_eval_sets_load_with_descriptions_and_a_balanced_sentiment_set():
    listed = {row["name"]: row for row in sets.list_builtin()}
    assert set(listed) == {f"builtin:{name}" for name in sets.BUILTIN_SETS}
    assert all(row["description"] and row["examples"] > 0 for row in listed.values())
    sentiment = sets.load_eval_set("builtin:sentiment")
    counts = pd.Series([e.label for e in sentiment.examples]).value_counts()
    assert len(sentiment.examples) >= 200 and counts["positive"] == counts["negative"]
    assert len({e.prompt for e in sentiment.examples}) == len(sentiment.examples)
    probes = {e.prompt for e in sets.load_eval_set("builtin:facts-probes").examples}
    from cookbook_engine.data.builtin import facts_rows

    trained = {row["messages"][0]["content"] for row in facts_rows()}
    assert not probes & trained  # held out: never in the training rows
    assert len(sets.load_eval_set("builtin:arithmetic", max_examples=5).examples) == 5


def test_eval_set_files_are_recognised_by_their_columns(tmp_path):
    def write(name, rows):
        path = tmp_path / name
        path.write_text("\n".join(json.dumps(r) for r in rows))
        return str(path)

    classification = write("c.jsonl", [{"prompt": "x", "label": "a"}, {"prompt": "y", "label": "b"}])
    generation = write("g.jsonl", [{"prompt": "2+2?", "answer": "4", "grader": "numeric"}])
    preference = write("p.jsonl", [{"prompt": "q", "chosen": "yes", "rejected": "no"}])
    chat = write(
        "n.jsonl", [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    )
    assert sets.load_eval_set(classification).labels == ["a", "b"]
    assert [sets.load_eval_set(p).kind for p in (generation, preference, chat)] == ["generation", "preference", "nll"]
    one_label = write("one.jsonl", [{"prompt": "x", "label": "a"}])
    with pytest.raises(sets.EvalSetError, match="one.jsonl.*at least two labels"):
        sets.load_eval_set(one_label)
    with pytest.raises(sets.EvalSetError, match="builtin:nope: no such built-in"):
        sets.load_eval_set("builtin:nope")


# ------------------------------------------------------------------------------------------------ storage, tables


def _result(accuracy: float) -> evaluators.EvalResult:
    examples = [
        evaluators.ExampleRow(
            i, f"q{i}", "a", "a" if i < accuracy * 4 else "b", float(i < accuracy * 4), i < accuracy * 4
        )
        for i in range(4)
    ]
    metric = stats.proportion("accuracy", [e.correct for e in examples])
    return evaluators.EvalResult("builtin:t", "generation", [metric], examples, 1.0)


def test_results_are_stored_per_example_and_reused_by_an_identical_job(home):
    from cookbook_engine.evals import jobs, targets
    from storage.evals import EvalStore

    store = EvalStore()
    target = targets.ModelTarget("base", "base", "m")
    store.create_job("e1", name="e1", models=["base"], eval_sets=["builtin:t"], settings={}, total=4)
    jobs.save(store, "e1", target, "key-1", _result(0.5))
    assert store.reuse_result("e2", "base", "builtin:t", "key-1", "base") is None  # e1 not completed yet
    store.update_job("e1", status="completed")
    store.create_job("e2", name="e2", models=["base"], eval_sets=["builtin:t"], settings={}, total=4)
    assert store.reuse_result("e2", "base", "builtin:t", "key-1", "base") == "e1"
    assert store.reuse_result("e2", "base", "builtin:t", "other-key", "base") is None
    copied = store.metrics(["e2"])
    assert copied[["metric", "value", "n"]].values.tolist() == [["accuracy", 0.5, 4]]
    examples = store.examples("e2")
    assert examples["output"].tolist() == ["a", "a", "b", "b"] and examples["correct"].tolist() == [1, 1, 0, 0]
    assert store.results(["e2"])[0]["reused_from"] == "e1"


def test_result_keys_change_with_weights_set_and_settings(tmp_path):
    from cookbook_engine.evals import jobs, targets

    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"1")
    target = targets.ModelTarget("x", "x", "m", str(folder))
    eval_set = sets.load_eval_set("builtin:facts-probes", max_examples=3)
    key = jobs.result_key(target, eval_set, EvalSettings())
    assert key == jobs.result_key(target, eval_set, EvalSettings(concurrency=2))
    assert key != jobs.result_key(target, eval_set, EvalSettings(seed=1))
    assert key != jobs.result_key(target, sets.load_eval_set("builtin:facts-probes", max_examples=4), EvalSettings())
    (folder / "adapter_model.safetensors").write_bytes(b"22")
    assert key != jobs.result_key(target, eval_set, EvalSettings())
    live = targets.ModelTarget("r@live", "r@live", "m", live=True)
    assert jobs.result_key(live, eval_set, EvalSettings()) != jobs.result_key(live, eval_set, EvalSettings())


def test_leaderboard_marks_the_best_model_and_disagreements_list_differing_examples():
    rows = [
        ("base", "builtin:f", "accuracy", 0.2),
        ("sft", "builtin:f", "accuracy", 0.8),
        ("base", "builtin:n", "nll", 3.0),
        ("sft", "builtin:n", "nll", 1.0),
    ]
    metrics = pd.DataFrame(
        [
            {"model": m, "eval_set": s, "metric": k, "value": v, "low": v - 0.1, "high": v + 0.1, "n": 10}
            for m, s, k, v in rows
        ]
    )
    wide = report.leaderboard(metrics, {"builtin:f": "generation", "builtin:n": "nll"})
    assert wide.set_index("model").loc["sft", "f · accuracy"].startswith("★ 0.800 [0.700, 0.900]")
    assert wide.set_index("model").loc["sft", "n · nll"].startswith("★")  # lower is better
    assert not wide.set_index("model").loc["base", "f · accuracy"].startswith("★")
    examples = pd.DataFrame(
        [asdict(e) | {"model": "base", "idx": e.index} for e in _result(0.25).examples]
        + [asdict(e) | {"model": "sft", "idx": e.index} for e in _result(0.75).examples]
    )
    differ = report.disagreements(examples, "base", "sft")
    assert differ["idx"].tolist() == [1, 2] and differ["sft correct"].tolist() == [True, True]
    side = report.answers_side_by_side(examples)
    assert list(side.columns) == [
        "idx",
        "prompt",
        "reference",
        "base · output",
        "base · correct",
        "sft · output",
        "sft · correct",
    ]


def test_cookbook_eval_rejects_bad_input_with_exit_code_2(home, capsys):
    from cookbook_engine.cli import main

    assert main(["eval", "evals=builtin:facts-probes"]) == 2
    assert "models: required" in capsys.readouterr().err
    assert main(["eval", "models=base", "evals=builtin:nope"]) == 2
    assert "builtin:nope: no such built-in eval set" in capsys.readouterr().err
    assert main(["eval", "models=no-such-run", "evals=builtin:facts-probes"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    assert main(["eval", "models=base", "evals=builtin:sentiment", "samples=0"]) == 2
    assert "samples=0: must be at least 1" in capsys.readouterr().err
    assert main(["eval", "models=base", "evals=builtin:sentiment", "colour=red"]) == 2
    assert "colour: unknown setting" in capsys.readouterr().err


def test_a_run_naming_an_unknown_eval_set_is_refused_before_it_starts(home, capsys):
    from cookbook_engine.cli import main
    from cookbook_engine.config import SLConfig, validate
    from cookbook_engine.evals.in_training import short_name

    assert any("builtin:nope: no such built-in eval set" in p for p in validate(SLConfig(evals="builtin:nope")))
    assert main(["sl", "evals=builtin:facts-probes,builtin:nope", "--dry-run"]) == 2
    assert "evals: builtin:nope" in capsys.readouterr().err
    assert short_name("builtin:facts-probes") == "facts-probes" and short_name("/data/my-set.jsonl") == "my-set"


def test_fresh_arithmetic_sets_are_drawn_apart_from_the_held_out_set():
    from cookbook_engine.rl.arithmetic import fresh_problems, held_out_problems, is_held_out

    held = {p.question for p in held_out_problems()}
    for name, op in (("arithmetic-fresh", "+"), ("arithmetic-subtraction", "-")):
        eval_set = sets.load_eval_set(f"builtin:{name}")
        assert len(eval_set.examples) == 200 and not {e.prompt for e in eval_set.examples} & held
        assert all(f" {op} " in e.prompt for e in eval_set.examples)
    three = fresh_problems("+", 100, 999)
    assert len(set(three)) == 200 and all(p.a >= 100 and p.b >= 100 for p in three)
    assert not any(is_held_out(p) for p in fresh_problems("+", 10, 99))
    assert all(p.a >= p.b for p in fresh_problems("-", 10, 99))


def test_prefs_unseen_kinds_share_no_kind_or_prompt_with_the_dpo_data():
    from cookbook_engine.data import builtin, pref_kinds

    eval_set = sets.load_eval_set("builtin:prefs-unseen-kinds")
    pairs = pref_kinds.unseen_kind_pairs()
    assert len(eval_set.examples) == len(pairs) >= 200
    assert len({p.kind for p in pairs}) == len(pref_kinds.UNSEEN_KINDS) >= 12
    assert not set(pref_kinds.UNSEEN_KINDS) & set(builtin.SAME_STYLE_KINDS)
    trained = {p.prompt for p in builtin.concise_prefs_pairs()} | {p.prompt for p in builtin.style_controlled_pairs()}
    assert not trained & {p.prompt for p in pairs}
    assert all(p.chosen != p.rejected and len(p.chosen.split()) == len(p.rejected.split()) for p in pairs)
