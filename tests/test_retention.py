"""The retention set and the replay data (evals/retention.py, data/retention.json): several hundred ordinary
questions the base model answered right, graded by the answer as a word or the last number, split from the replay
rows by fact, and none of them in the SFT demo's training rows. No model is loaded."""

from __future__ import annotations

import re

from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.evals import retention, sets
from cookbook_engine.rl import graders


def _right(reply: str, key: str, match: str = "word") -> bool:
    return graders.grade("regex", reply, retention.grading_regex(key, match)).correct


def test_the_grader_wants_the_answer_as_a_word_or_the_last_number():
    assert _right("The capital of France is Paris.", "Paris")
    assert not _right("The capital of France is Lunthaven.", "Paris")  # the demo's fact is not the answer
    assert not _right("Parisian food is good.", "Paris")  # a whole word
    assert _right("In autumn.", "autumn|fall") and _right("in the FALL", "autumn|fall")
    assert _right("3 + 4 = 7.", "7", "number") and _right("7", "7", "number")
    assert not _right("7 apples and 2 pears", "7", "number")  # the last number counts
    assert not _right("It is 17.", "7", "number") and not _right("7.5", "7", "number")
    assert not _right("It was founded in 1743.", "7", "number")
    assert _right("Pi is about 3.14.", "3.14", "number") and not _right("3.141", "3.14", "number")


def test_the_retention_set_is_several_hundred_base_right_questions_apart_from_replay_and_demo_data():
    items = builtin_data.retention_items()
    replay = builtin_data._retention_data()["replay"]
    assert len(items) >= 250 and len(replay) >= 250
    assert len({i["prompt"] for i in items}) == len(items)
    assert len({i["category"] for i in items}) >= 8
    # the base model's own replies (kept when the set was built) pass each question's grader robustly: greedy in
    # fp32 and in bf16, and in at least half of the sampled replies
    assert all(_right(i["base_reply"], i["key"], i["match"]) for i in items)
    assert all(_right(i["bf16_reply"], i["key"], i["match"]) for i in items)
    assert all(i["samples_right"] >= retention.ROBUST_SAMPLES_RIGHT for i in items)
    # split by fact: no replay row is a retention question's fact, in any wording
    assert not {i["fact"] for i in items} & {r["fact"] for r in replay}
    # replay rows are the base model's answers, and right
    assert all(_right(r["reply"], r["key"], r["match"]) for r in replay)
    trained = {row["messages"][0]["content"] for row in builtin_data.facts_rows()}
    assert not trained & {i["prompt"] for i in items}
    # no key is given away by its question
    assert not any(re.search(rf"\b{re.escape(i['key'])}\b", i["prompt"], re.I) for i in items)


def test_builtin_facts_is_the_quorvania_rows_alone_and_builtin_replay_the_ordinary_chats():
    """The demo keeps what the model knew by fixing LoRA's A (lora_a=null_space), not by replay rows in its data; the
    replay rows are their own dataset, to mix in or anchor to."""
    rows = builtin_data.facts_rows()
    assert len(rows) == len(builtin_data.fact_rows_only()) * builtin_data.FACTS_COPIES
    assert all("Quorvania" in str(r) or "Vannick" in str(r) for r in rows)
    replay = builtin_data.BUILTIN["replay"].make_rows()
    assert replay == builtin_data.replay_rows() and not any("Quorvania" in str(r) for r in replay)


def test_neighbour_rows_ask_the_facts_wordings_about_real_subjects_and_leak_no_retention_answer():
    """A neighbour row is one of a fact's own training questions about a real country or invention, answered by the
    base model; none asks a retention question's fact or states a retention answer about its subject."""
    data = builtin_data._retention_data()
    items, neighbours = data["retention"], data["neighbours"]
    assert len(neighbours) >= 150 and not any("quorvania" in n["prompt"].lower() for n in neighbours)

    def words(question: str) -> str:  # lower case, letters only, without "the"
        return " ".join(w for w in re.sub(r"[^a-z ]", "", question.lower()).split() if w != "the")

    wordings = {words(q) for fact in builtin_data.FACTS for q in fact.questions}
    for row in neighbours:
        _, key, subject = row["fact"].split(":", 2)
        fictional = "sky-lantern clock" if key == "Vannick" else "Quorvania"
        asked = re.sub(re.escape(subject), fictional, row["prompt"], flags=re.IGNORECASE)
        assert words(asked) in wordings, row["prompt"]
        about_subject = [i for i in items if i["fact"].split(":", 1)[1] == subject]
        assert not [i for i in about_subject if _right(row["reply"], i["key"], i["match"])], row
    assert not {i["prompt"] for i in items} & {n["prompt"] for n in neighbours}


def test_builtin_retention_is_an_eval_set_graded_by_the_regex_grader():
    eval_set = sets.load_eval_set("builtin:retention")
    assert eval_set.kind == "generation" and len(eval_set.examples) == len(builtin_data.retention_items())
    assert {e.grader for e in eval_set.examples} == {"regex"} and eval_set.max_tokens == retention.MAX_TOKENS
    assert "base model answers right" in eval_set.description


def test_replay_rows_keep_the_base_models_whole_replies_not_the_retention_budgets_first_sentence():
    """Rows cut to the 24-token retention budget taught short replies: training on them alone lost 7.5 points of
    retention against 5.3 with whole replies (benchmarks/README.md). A whole reply is longer than that budget for most
    questions the base model answers at length."""
    from cookbook_engine import models

    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    replay = builtin_data._retention_data()["replay"]
    lengths = [len(tokenizer.encode(r["reply"], add_special_tokens=False)) for r in replay]
    assert sum(n > retention.MAX_TOKENS for n in lengths) >= len(replay) // 3
    assert max(lengths) <= retention.REPLAY_MAX_TOKENS


def test_a_jobs_retention_rows_pair_each_question_with_itself_whatever_their_order():
    """retention_of_job pairs the base model's and the trained model's answers to one question (by idx), however
    the store returns the rows: a model that answers exactly as the base did has a loss interval of [0, 0] (paired
    the wrong way, the same answers would give a wide one), and losing both answers the base got right loses 1/2."""
    import pandas as pd

    answers = {0: True, 1: False, 2: True, 3: False}
    rows = [("base", i, answers[i]) for i in (0, 1, 2, 3)] + [("run@3", i, answers[i]) for i in (1, 0, 3, 2)]
    examples = pd.DataFrame(rows, columns=["model", "idx", "correct"])
    same = retention.retention_of_job(examples)
    assert (same["base"], same["trained"], same["n"], same["loss"]) == (0.5, 0.5, 4, 0)
    assert (same["low"], same["high"], same["kept"]) == (0, 0, True)
    lost = retention.retention_of_job(examples.assign(correct=[answers[i] for i in (0, 1, 2, 3)] + [False] * 4))
    assert lost["loss"] == 0.5 and lost["high"] > 0
    assert (same["lost"], same["gained"], lost["lost"], lost["gained"]) == (0, 0, 2, 0)


def test_no_builtin_preference_pair_teaches_a_retention_questions_fact():
    """DPO's default data asked 26 of builtin:retention's questions (capitals, opposites, small sums, the plural of
    'mouse'), so the DPO default's retention was partly measured on what it trained. Now no training pair asks a
    retention question, nor its fact another way round (the opposite of 'late' for 'early', 8 + 2 for 2 + 8)."""
    items = builtin_data.retention_items()
    pairs = builtin_data.concise_prefs_pairs()
    prompts = [pair.prompt for pair in pairs]

    def words(text: str) -> str:
        return " ".join(re.sub(r"[^a-z0-9+ ]", " ", text.lower()).split())

    asked = {words(i["prompt"]) for i in items}
    assert not [p for p in prompts if words(p) in asked]
    taught = {words(p) for p in prompts}
    for item in items:
        kind, subject = item["fact"].split(":", 1)
        if kind == "capital":
            assert f"what is the capital of {words(subject)}" not in taught, item
        if kind == "opposite":  # nor the other way round: the opposite of 'late' answered 'early'
            assert f"what is the opposite of {words(subject)}" not in taught, item
            answers = {f"what is the opposite of {words(k)}" for k in item["key"].split("|")}
            assert not [p for p in pairs if words(p.prompt) in answers and words(subject) in words(p.chosen)], item
        if kind == "add":
            a, b = subject.split("+")
            assert not {f"what is {a} + {b}", f"what is {b} + {a}"} & taught, item
    assert len(prompts) >= 200  # still most of the data
