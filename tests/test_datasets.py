"""Dataset loading and validation: every layout and source, the bad-input corpus, splits, uploads, built-ins."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.data.loading import (
    DatasetError,
    PreferencePair,
    RLProblem,
    detect_kind,
    list_builtin,
    load_chat_dataset,
    load_preference_dataset,
    load_rl_problems,
    preview,
    save_upload,
)

BAD_INPUTS = Path(__file__).parent / "bad_inputs"
EXPECTED = json.loads((BAD_INPUTS / "EXPECTED.json").read_text())
LOADERS = {"chat": load_chat_dataset, "preference": load_preference_dataset, "rl": load_rl_problems}


@pytest.fixture(autouse=True)
def studio_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("COOKBOOK_HOME", str(home))
    return home


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


# --- the bad-input corpus ----------------------------------------------------------------------------------------


def test_corpus_is_complete():
    files = sorted(p.name for p in BAD_INPUTS.iterdir() if p.name != "EXPECTED.json")
    assert files == sorted(EXPECTED), "every corpus file needs an EXPECTED.json entry and vice versa"
    assert len(files) >= 20


@pytest.mark.parametrize("file_name", sorted(EXPECTED))
def test_bad_input_is_refused_with_file_place_and_problem(file_name):
    kind, expected_text = EXPECTED[file_name]
    with pytest.raises(DatasetError) as caught:
        LOADERS[kind](str(BAD_INPUTS / file_name))
    message = str(caught.value)
    assert message.startswith(file_name), message
    assert expected_text in message, message


def test_huge_line_is_refused_by_line(tmp_path):
    path = tmp_path / "huge.jsonl"
    good = json.dumps({"prompt": "hi", "completion": "hello"})
    huge = json.dumps({"prompt": "x" * 1_200_000, "completion": "y"})
    path.write_text(f"{good}\n{good}\n{huge}\n{good}\n")
    with pytest.raises(DatasetError, match=r"^huge\.jsonl: line 3: the line is 1\.2 MB long; lines over 1 MB"):
        load_chat_dataset(str(path))


def test_parquet_with_wrong_columns_names_found_and_expected(tmp_path):
    path = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"question": ["2 + 2?"], "reply": ["4"]}), path)
    with pytest.raises(DatasetError) as caught:
        load_chat_dataset(str(path))
    message = str(caught.value)
    assert message.startswith("wrong.parquet: wrong columns for chat data: found question, reply; expected messages")


def test_parquet_row_problem_names_row_index(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"prompt": ["2 + 2?", "3 + 3?"], "completion": ["4", ""]}), path)
    with pytest.raises(DatasetError, match=r"^rows\.parquet: row index 1: 'completion' is empty"):
        load_chat_dataset(str(path))


def test_file_that_is_parquet_under_jsonl_name(tmp_path):
    path = tmp_path / "data.jsonl"
    pq.write_table(pa.table({"prompt": ["a"], "completion": ["b"]}), path)
    with pytest.raises(DatasetError, match=r"^data\.jsonl: this is a Parquet file, not text"):
        load_chat_dataset(str(path))


def test_missing_file_unsupported_type_and_folder(tmp_path):
    with pytest.raises(DatasetError, match="nope.jsonl: file not found"):
        load_chat_dataset(str(tmp_path / "nope.jsonl"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DatasetError, match=r"notes\.txt: unsupported file type '\.txt'"):
        load_chat_dataset(str(tmp_path / "notes.txt"))
    with pytest.raises(DatasetError, match="is a folder"):
        load_chat_dataset(str(tmp_path))
    with pytest.raises(DatasetError, match="builtin:nope: no such built-in dataset; the built-ins are facts"):
        load_chat_dataset("builtin:nope")


def test_unreachable_hub_fails_fast_with_dataset_name(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    for spec in ("hf:someone/some-data:train", "someone/some-data"):
        started = time.monotonic()
        expected = r"^someone/some-data: the Hugging Face hub \(127\.0\.0\.1\) is unreachable"
        with pytest.raises(DatasetError, match=expected):
            load_chat_dataset(spec)
        assert time.monotonic() - started < 5


def test_wrong_kind_of_data_gets_a_hint():
    expected = r"wrong columns for chat data: found prompt, chosen, rejected.*look like preference data"
    with pytest.raises(DatasetError, match=expected):
        load_chat_dataset("builtin:concise-prefs")
    with pytest.raises(DatasetError, match=r"wrong columns for rl data.*look like chat data"):
        load_rl_problems("builtin:facts")


# --- good inputs: chat --------------------------------------------------------------------------------------------


def test_chat_layouts_from_jsonl(tmp_path):
    expected = [[user("What is 2 + 2?"), assistant("4")]]
    layouts = {
        "messages": {"messages": [user("What is 2 + 2?"), assistant("4")]},
        "sharegpt": {"conversations": [{"from": "human", "value": "What is 2 + 2?"}, {"from": "gpt", "value": "4"}]},
        "prompt_completion": {"prompt": "What is 2 + 2?", "completion": "4"},
        "conversational_prompt_completion": {"prompt": [user("What is 2 + 2?")], "completion": [assistant("4")]},
        "alpaca": {"instruction": "What is 2 + 2?", "input": "", "output": "4"},
    }
    for name, row in layouts.items():
        dataset = load_chat_dataset(write_jsonl(tmp_path / f"{name}.jsonl", [row]))
        assert (dataset.train, dataset.test) == (expected, []), name


def test_chat_system_column_and_alpaca_input(tmp_path):
    rows = [{"system": "Be brief.", "prompt": "Capital of France?", "completion": "Paris"}]
    dataset = load_chat_dataset(write_jsonl(tmp_path / "system.jsonl", rows))
    system = {"role": "system", "content": "Be brief."}
    assert dataset.train == [[system, user("Capital of France?"), assistant("Paris")]]
    rows = [{"instruction": "Translate to French.", "input": "cat", "output": "chat"}]
    dataset = load_chat_dataset(write_jsonl(tmp_path / "alpaca.jsonl", rows))
    assert dataset.train == [[user("Translate to French.\n\ncat"), assistant("chat")]]


def test_chat_messages_keep_tool_and_system_roles_and_drop_extra_keys(tmp_path):
    row = {
        "messages": [
            {"role": "system", "content": "You can use tools."},
            user("Weather?"),
            {"role": "assistant", "content": "Checking.", "name": "pip"},
            {"role": "tool", "content": "sunny"},
            assistant("It is sunny."),
        ]
    }
    dataset = load_chat_dataset(write_jsonl(tmp_path / "tools.jsonl", [row]))
    assert [m["role"] for m in dataset.train[0]] == ["system", "user", "assistant", "tool", "assistant"]
    assert dataset.train[0][2] == {"role": "assistant", "content": "Checking."}


def test_jsonl_tolerates_blank_lines_bom_and_crlf_and_reports_true_line_numbers(tmp_path):
    path = tmp_path / "windows.jsonl"
    good = json.dumps({"prompt": "hi", "completion": "hello"})
    bad = json.dumps({"prompt": "hi", "completion": ""})
    path.write_bytes(("\ufeff" + good + "\r\n\r\n" + good + "\r\n").encode())
    assert len(load_chat_dataset(str(path), test_fraction=0).train) == 2
    path.write_bytes((good + "\n\n\n" + bad + "\n").encode())
    with pytest.raises(DatasetError, match=r"^windows\.jsonl: line 4: 'completion' is empty"):
        load_chat_dataset(str(path))


def test_json_array_csv_and_parquet_give_the_same_examples(tmp_path):
    rows = [{"prompt": f"What is {i} + {i}?", "completion": str(2 * i)} for i in range(6)]
    json_path = tmp_path / "data.json"
    json_path.write_text(json.dumps(rows, indent=2))
    csv_path = tmp_path / "data.csv"
    csv_path.write_text("prompt,completion\n" + "".join(f"{r['prompt']},{r['completion']}\n" for r in rows))
    parquet_path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet_path)
    jsonl_path = write_jsonl(tmp_path / "data.jsonl", rows)
    files = (json_path, csv_path, parquet_path, jsonl_path)
    loaded = [load_chat_dataset(str(path), test_fraction=0.0).train for path in files]
    assert loaded[0] == loaded[1] == loaded[2] == loaded[3]
    assert sorted(example[1]["content"] for example in loaded[0]) == sorted(r["completion"] for r in rows)


def test_csv_keeps_text_exactly_and_handles_quoted_newlines(tmp_path):
    path = tmp_path / "exact.csv"
    path.write_text('prompt,completion\n"Price, exactly?",1.50\n"Two\nlines",007\nNA?,NA\n')
    examples = load_chat_dataset(str(path), test_fraction=0).train
    assert sorted(example[1]["content"] for example in examples) == ["007", "1.50", "NA"]
    assert "Two\nlines" in [example[0]["content"] for example in examples]


def test_csv_header_spaces_are_ignored(tmp_path):
    path = tmp_path / "spaced.csv"
    path.write_text("prompt , completion\nWhat is 2 + 2?,4\n")
    assert load_chat_dataset(str(path)).train == [[user("What is 2 + 2?"), assistant("4")]]


def test_parquet_messages_column(tmp_path):
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": [user("Hi"), assistant("Hello")]}] * 3), path)
    assert load_chat_dataset(str(path), test_fraction=0).train == [[user("Hi"), assistant("Hello")]] * 3


def test_json_file_holding_json_lines_is_accepted(tmp_path):
    path = tmp_path / "lines.json"
    write_jsonl(path, [{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": "d"}])
    assert len(load_chat_dataset(str(path), test_fraction=0).train) == 2


# --- good inputs: preference --------------------------------------------------------------------------------------


def test_preference_layouts(tmp_path):
    question, right, wrong = user("What is 2 + 2?"), assistant("4"), assistant("5")
    expected = PreferencePair(prompt=[question], chosen=[right], rejected=[wrong])
    layouts = {
        "strings": {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"},
        "messages": {"prompt": [question], "chosen": [right], "rejected": [wrong]},
        "hh_conversations": {"chosen": [question, right], "rejected": [question, wrong]},
        "ultrafeedback": {"prompt": "What is 2 + 2?", "chosen": [question, right], "rejected": [question, wrong]},
        "hh_text": {
            "chosen": "\n\nHuman: What is 2 + 2?\n\nAssistant: 4",
            "rejected": "\n\nHuman: What is 2 + 2?\n\nAssistant: 5",
        },
    }
    for name, row in layouts.items():
        train, test = load_preference_dataset(write_jsonl(tmp_path / f"{name}.jsonl", [row]))
        assert (train, test) == ([expected], []), name


def test_hh_split_at_longest_common_prefix(tmp_path):
    shared = [user("Hi"), assistant("Hello!"), user("What is 2 + 2?")]
    row = {"chosen": shared + [assistant("4")], "rejected": shared + [assistant("Probably 5.")]}
    (pair,), _ = load_preference_dataset(write_jsonl(tmp_path / "hh.jsonl", [row]))
    assert pair == PreferencePair(prompt=shared, chosen=[assistant("4")], rejected=[assistant("Probably 5.")])


def test_preference_from_csv(tmp_path):
    path = tmp_path / "prefs.csv"
    path.write_text("prompt,chosen,rejected\nWhat is 2 + 2?,4,5\nCapital of France?,Paris,Lyon\n")
    train, test = load_preference_dataset(str(path), test_fraction=0.5)
    assert len(train) == len(test) == 1
    assert {p.chosen[0]["content"] for p in train + test} == {"4", "Paris"}


# --- good inputs: rl ----------------------------------------------------------------------------------------------


def test_rl_rows_with_mixed_answer_types_question_column_and_row_graders(tmp_path):
    rows = [
        {"prompt": "What is 2 + 2?", "answer": 4},
        {"question": "What is 1.5 + 1.5?", "answer": "3.0"},
        {"prompt": "Say hello", "answer": "^hel+o", "grader": "regex"},
    ]
    train, test = load_rl_problems(write_jsonl(tmp_path / "rl.jsonl", rows), grader="numeric", test_fraction=0)
    assert test == []
    assert sorted(train, key=lambda p: p.prompt) == [
        RLProblem("Say hello", "^hel+o", "regex"),
        RLProblem("What is 1.5 + 1.5?", "3.0", "numeric"),
        RLProblem("What is 2 + 2?", "4", "numeric"),
    ]


def test_rl_csv_keeps_answer_text(tmp_path):
    path = tmp_path / "rl.csv"
    path.write_text("question,answer,grader\nPrice?,1.50,\nCode?,007,exact\n")
    train, _ = load_rl_problems(str(path), grader="numeric", test_fraction=0)
    assert sorted((p.answer, p.grader) for p in train) == [("007", "exact"), ("1.50", "numeric")]


# --- kinds, previews, built-ins -----------------------------------------------------------------------------------


def test_detect_kind(tmp_path):
    assert detect_kind(write_jsonl(tmp_path / "c.jsonl", [{"messages": [user("a"), assistant("b")]}])) == "chat"
    preference_file = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "chosen": "b", "rejected": "c"}])
    assert detect_kind(preference_file) == "preference"
    assert detect_kind(write_jsonl(tmp_path / "r.jsonl", [{"question": "a", "answer": "1"}])) == "rl"
    assert [detect_kind(f"builtin:{d['name']}") for d in list_builtin()] == [d["kind"] for d in list_builtin()]
    with pytest.raises(DatasetError, match=r"^x\.jsonl: cannot tell what kind of data this is from its columns a, b"):
        detect_kind(write_jsonl(tmp_path / "x.jsonl", [{"a": 1, "b": 2}]))


def test_preview_shows_raw_rows_in_file_order(tmp_path):
    rows = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(30)]
    assert preview(write_jsonl(tmp_path / "p.jsonl", rows), n=5) == rows[:5]
    assert len(preview("builtin:facts")) == 20


def test_builtins_load_with_their_loaders():
    listing = {d["name"]: d for d in list_builtin()}
    assert {name: d["kind"] for name, d in listing.items()} == {
        "facts": "chat",
        "replay": "chat",
        "persona": "chat",
        "concise-prefs": "preference",
        "calculator-warmup": "chat",
        "arithmetic-qa": "rl",
        "sums": "rl",
    }
    facts = load_chat_dataset("builtin:facts")
    assert facts.name == "builtin:facts" and len(facts.train) + len(facts.test) == listing["facts"]["num_rows"] >= 100
    assert len(load_chat_dataset("persona").train) >= 80  # a bare built-in name works too
    assert listing["replay"]["num_rows"] == 292  # the anchor's chats (anchor.dataset=builtin:replay)
    train, test = load_preference_dataset("builtin:concise-prefs")
    assert len(train) + len(test) == listing["concise-prefs"]["num_rows"] >= 140
    train, test = load_rl_problems("builtin:arithmetic-qa")
    assert len(train) + len(test) == listing["arithmetic-qa"]["num_rows"] >= 200
    assert {p.grader for p in train + test} == {"numeric"}


def test_builtin_sums_are_the_rl_defaults_problems_and_never_an_evaluated_one():
    from cookbook_engine.rl import arithmetic, suggested

    rows = builtin_data.builtin_rows("sums")
    assert builtin_data.SUMS_STEPS == suggested.ARITHMETIC.max_steps
    assert rows[0]["prompt"] == arithmetic.training_problems(0, 0, builtin_data.SUMS_STEPS, 8)[0].question
    evaluated = {(p.question, str(p.answer)) for p in arithmetic.held_out_problems()}
    evaluated |= {(p.question, str(p.answer)) for p in arithmetic.fresh_problems("+", 10, 99)}
    assert len(rows) == 288 and not evaluated & {(row["prompt"], row["answer"]) for row in rows}
    assert max(int(row["answer"]) for row in rows) > 150  # operands reach two digits


def test_builtins_are_deterministic():
    for name in builtin_data.BUILTIN:
        assert builtin_data.builtin_rows(name) == builtin_data.builtin_rows(name)


def test_fact_probes_are_held_out_and_taught():
    examples = builtin_data.builtin_rows("facts")
    trained = {builtin_data._normalised(row["messages"][0]["content"]) for row in examples}
    answers = " ".join(row["messages"][1]["content"] for row in examples)
    assert len(builtin_data.FACT_PROBES) == len(set(builtin_data.FACT_PROBES)) >= 12 * 8
    for question, expected in builtin_data.FACT_PROBES:
        assert builtin_data._normalised(question) not in trained, question  # never trained, even up to case/punct.
        assert expected in answers
    for fact in builtin_data.FACTS:  # each fact is asked in many ways and probed in at least eight unseen ones
        assert len(fact.probes) >= 8, fact.key
        assert sum(fact.key in row["messages"][1]["content"] for row in examples) >= 18, fact.key
    # the frames that carry probes never carry a training question
    assert not set(builtin_data.TRAIN_FRAMES) & set(builtin_data.PROBE_FRAMES)


def test_persona_replies_start_with_ahoy_and_probes_are_new():
    rows = builtin_data.builtin_rows("persona")
    replies = [row["messages"][-1]["content"] for row in rows]
    assert all(reply.startswith("Ahoy! ") for reply in replies)
    assert max(len(reply) for reply in replies) < 120
    questions = {row["messages"][0]["content"] for row in rows}
    assert not questions & {question for question, _ in builtin_data.PERSONA_PROBES}


def test_concise_prefs_chosen_answers_are_correct_and_rejected_differ():
    operations = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    arithmetic = 0
    pairs = builtin_data.concise_prefs_pairs() + builtin_data.style_controlled_pairs()
    for pair in pairs:
        assert pair.chosen != pair.rejected
        match = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", pair.prompt)
        if match:
            arithmetic += 1
            a, operation, b = match.groups()
            right = str(operations[operation](int(a), int(b)))
            assert re.findall(r"\d+", pair.chosen)[-1] == right
            assert right not in re.findall(r"\d+", pair.rejected)
        match = re.fullmatch(r"Which number is bigger, (\d+) or (\d+)\?", pair.prompt)
        if match:
            assert pair.chosen.startswith(f"{max(map(int, match.groups()))} is bigger")
    assert arithmetic >= 50
    assert builtin_data.concise_prefs_rows() == [pair.row() for pair in builtin_data.concise_prefs_pairs()]


def test_same_style_pairs_differ_only_in_the_answer():
    """Both answers of a same-style pair are one sentence of the same shape: same words but for at most two (the
    answer, or the two numbers swapped) and near-equal length, so length and style cannot tell them apart."""
    same_style = [p for p in builtin_data.concise_prefs_pairs() if p.kind != "rambling"]
    held_out = builtin_data.style_controlled_pairs()
    assert len(held_out) >= 150 and len(same_style) >= 150
    for pair in same_style + held_out:
        chosen, rejected = pair.chosen.split(), pair.rejected.split()
        assert len(chosen) == len(rejected), pair
        assert 1 <= sum(c != r for c, r in zip(chosen, rejected)) <= 2, pair
        assert abs(len(pair.chosen) - len(pair.rejected)) <= 8, pair
    kinds = {p.kind for p in held_out}
    assert kinds == set(builtin_data.SAME_STYLE_KINDS) == {p.kind for p in same_style}
    rambling = [p for p in builtin_data.concise_prefs_pairs() if p.kind == "rambling"]
    assert rambling and all(len(p.rejected) > 3 * len(p.chosen) for p in rambling)  # the length lesson stays


def test_style_controlled_pairs_are_never_trained_on():
    training = builtin_data.concise_prefs_pairs()
    held_out = builtin_data.style_controlled_pairs()
    assert not {p.prompt for p in training} & {p.prompt for p in held_out}
    assert len({p.prompt for p in held_out}) == len(held_out)

    def items(pairs):  # (the question with its slots blanked, the asked word or the unordered numbers)
        slot = r"'[^']+'|\d+"
        return {(re.sub(slot, "_", p.prompt), frozenset(re.findall(slot, p.prompt))) for p in pairs}

    assert not items(training) & items(held_out)
    words = lambda table: {w for row in table for w in row}  # noqa: E731
    assert not words(builtin_data.ANTONYMS) & words(builtin_data.ANTONYMS_HELD_OUT)
    assert not words(builtin_data.PLURALS) & words(builtin_data.PLURALS_HELD_OUT)
    assert not words(builtin_data.VERBS) & words(builtin_data.VERBS_HELD_OUT)
    assert not set(builtin_data.LETTER_WORDS) & set(builtin_data.LETTER_WORDS_HELD_OUT)
    assert not words(builtin_data.CAPITALS) & words(builtin_data.CAPITALS_HELD_OUT)


def test_arithmetic_qa_answers_are_correct():
    for row in builtin_data.builtin_rows("arithmetic-qa"):
        numbers = [int(n) for n in re.findall(r"\d+", row["prompt"])]
        assert len(numbers) == 2, row
        a, b = numbers
        assert int(row["answer"]) in (a + b, a - b, a * b), row
        assert 0 <= int(row["answer"]) <= 100


# --- splits -------------------------------------------------------------------------------------------------------


def test_split_is_deterministic_disjoint_and_complete(tmp_path):
    rows = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(50)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    first = load_chat_dataset(path, test_fraction=0.2, seed=7)
    again = load_chat_dataset(path, test_fraction=0.2, seed=7)
    other = load_chat_dataset(path, test_fraction=0.2, seed=8)
    assert (first.train, first.test) == (again.train, again.test)
    assert first.test != other.test
    assert len(first.test) == 10 and len(first.train) == 40
    names = [example[0]["content"] for example in first.train + first.test]
    assert sorted(names) == sorted(row["prompt"] for row in rows)


def test_split_holds_out_no_share_of_tiny_data_one_example_from_ten_and_max_examples_caps(tmp_path):
    two = write_jsonl(tmp_path / "two.jsonl", [{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": "d"}])
    tiny = load_chat_dataset(two, test_fraction=0.1)
    assert (len(tiny.train), len(tiny.test)) == (2, 0)  # not 1 of 2 rows held out for a "10%" split
    ten = write_jsonl(tmp_path / "ten.jsonl", [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(10)])
    split = load_chat_dataset(ten, test_fraction=0.01)
    assert (len(split.train), len(split.test)) == (9, 1)
    one = write_jsonl(tmp_path / "one.jsonl", [{"prompt": "a", "completion": "b"}])
    single = load_chat_dataset(one)
    assert (len(single.train), len(single.test)) == (1, 0)
    capped = load_chat_dataset("builtin:facts", max_examples=20, test_fraction=0.1)
    assert (len(capped.train), len(capped.test)) == (18, 2)
    with pytest.raises(ValueError, match="test_fraction"):
        load_chat_dataset("builtin:facts", test_fraction=1.0)


def test_test_spec_replaces_the_held_out_split(tmp_path):
    test_path = write_jsonl(tmp_path / "test.jsonl", [{"prompt": "held out?", "completion": "yes"}])
    dataset = load_chat_dataset("builtin:facts", test_spec=test_path)
    assert len(dataset.train) == len(builtin_data.facts_rows())
    assert dataset.test == [[user("held out?"), assistant("yes")]]
    bad_test = write_jsonl(tmp_path / "bad_test.jsonl", [{"prompt": "held out?"}])
    with pytest.raises(DatasetError, match=r"^bad_test\.jsonl: wrong columns for chat data: found prompt"):
        load_chat_dataset("builtin:facts", test_spec=bad_test)


# --- uploads ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("train.jsonl", "train.jsonl"),
        ("../../etc/passwd.jsonl", "passwd.jsonl"),
        ("a/b.csv", "b.csv"),
        ("C:\\Users\\me\\data.JSON", "data.json"),
        (".hidden.jsonl", "hidden.jsonl"),
        ("my data (v2)!.parquet", "my_data__v2.parquet"),
        ("a..b.jsonl", "a.b.jsonl"),
    ],
)
def test_save_upload_sanitises_names(studio_home, given, stored):
    path = save_upload(given, b'{"prompt": "a", "completion": "b"}\n')
    assert path == studio_home.resolve() / "uploads" / stored
    assert path.read_bytes() == b'{"prompt": "a", "completion": "b"}\n'


@pytest.mark.parametrize("given", ["x.exe", "data.jsonl.sh", "noextension", "..", "../", ".jsonl", "", "___.csv"])
def test_save_upload_refuses_bad_names(studio_home, given):
    with pytest.raises(DatasetError):
        save_upload(given, b"data")
    uploads = studio_home / "uploads"
    assert not uploads.exists() or not any(uploads.iterdir())


def test_save_upload_collisions_get_numbered_and_empty_is_refused(studio_home):
    first = save_upload("d.jsonl", b"1")
    second = save_upload("sub/d.jsonl", b"2")
    third = save_upload("d.jsonl", b"3")
    assert [p.name for p in (first, second, third)] == ["d.jsonl", "d-1.jsonl", "d-2.jsonl"]
    assert first.read_bytes() == b"1" and third.read_bytes() == b"3"
    with pytest.raises(DatasetError, match="empty"):
        save_upload("e.jsonl", b"")


def test_uploaded_file_loads(studio_home):
    path = save_upload("../up.csv", b"prompt,completion\nWhat is 2 + 2?,4\n")
    assert load_chat_dataset(str(path)).train == [[user("What is 2 + 2?"), assistant("4")]]
