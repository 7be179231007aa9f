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
    assert len(items) >= 300 and len(replay) >= builtin_data.FACTS_REPLAY_ROWS
    assert len({i["prompt"] for i in items}) == len(items)
    assert len({i["category"] for i in items}) >= 8
    # the base model's own reply (kept when the set was built) passes each question's grader
    assert all(_right(i["base_reply"], i["key"], i["match"]) for i in items)
    # split by fact: no replay row is a retention question's fact, in any wording
    assert not {i["fact"] for i in items} & {r["fact"] for r in replay}
    # replay rows are the base model's answers, and right
    assert all(_right(r["reply"], r["key"], r["match"]) for r in replay)
    trained = {row["messages"][0]["content"] for row in builtin_data.facts_rows()}
    assert not trained & {i["prompt"] for i in items}
    # no key is given away by its question
    assert not any(re.search(rf"\b{re.escape(i['key'])}\b", i["prompt"], re.I) for i in items)


def test_builtin_facts_mixes_the_replay_rows_into_the_quorvania_rows():
    rows = builtin_data.facts_rows()
    quorvania = [r for r in rows if "Quorvania" in str(r) or "Vannick" in str(r)]
    assert len(rows) == len(builtin_data.fact_rows_only()) + builtin_data.FACTS_REPLAY_ROWS
    assert len(quorvania) == len(builtin_data.fact_rows_only())
    replayed = {r["messages"][0]["content"] for r in rows} - {r["messages"][0]["content"] for r in quorvania}
    assert replayed == {
        r["messages"][0]["content"] for r in builtin_data.replay_rows()[: builtin_data.FACTS_REPLAY_ROWS]
    }


def test_builtin_retention_is_an_eval_set_graded_by_the_regex_grader():
    eval_set = sets.load_eval_set("builtin:retention")
    assert eval_set.kind == "generation" and len(eval_set.examples) == len(builtin_data.retention_items())
    assert {e.grader for e in eval_set.examples} == {"regex"} and eval_set.max_tokens == retention.MAX_TOKENS
    assert "base model answers right" in eval_set.description
