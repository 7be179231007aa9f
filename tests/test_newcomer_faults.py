"""Faults a newcomer met in the studio (issue 27, items 2-12), each under Streamlit's AppTest as a person meets it.
Runs are recorded in storage directly and conversations are set in the session as the Chat page leaves them, so no
model loads and these run in seconds; the ones that need a model replying live in tests/test_browser_chat_stop.py."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest
from test_pages_keep_their_run import chat_page, make_run
from test_studio_apptest import by_label, click, open_page

from app import conversation, state_keys
from cookbook_engine import chat
from cookbook_engine.data import from_chat as chat_data
from cookbook_engine.runs import get_manager

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def upload(rows_text: str, name: str) -> AppTest:
    at = open_page("datasets")
    at.file_uploader[0].upload(f"{name}.jsonl", rows_text.encode()).run()
    by_label(at.text_input, "Name").set_value(name)
    return click(at, "Validate and add")


def test_item6_a_json_syntax_error_does_not_hide_the_other_bad_rows(home):
    lines = [
        json.dumps(GOOD),
        "{oops",  # line 2: not JSON
        json.dumps({"messages": [{"role": "wizard", "content": "x"}]}),  # line 3: unknown role
        json.dumps(GOOD),
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),  # line 5: nothing to train on
        json.dumps({"messages": "not a list"}),  # line 6
    ]
    at = upload("\n".join(lines), "four-bad-lines")
    shown = "\n".join(c.value for c in at.code)
    assert "4 problems" in shown, shown
    for line in (2, 3, 5, 6):
        assert f"line {line}:" in shown, shown
    assert shown.index("line 2:") < shown.index("line 3:") < shown.index("line 6:")  # in the file's order


def test_item12_an_upload_with_two_user_turns_in_a_row_is_refused(home):
    two_users = {
        "messages": [
            {"role": "user", "content": "first question"},
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": "an answer"},
        ]
    }
    at = upload(json.dumps(two_users), "two-users")
    assert any("both from the user" in c.value for c in at.code), [c.value for c in at.code]


def finished(text: str, reply: str, finish: str = "stop") -> conversation.Turn:
    return conversation.Turn(text, {"a": conversation.PaneReply(chat.base_target(), chat.Reply(reply, finish=finish))})


def test_item12_a_stopped_empty_reply_leaves_no_two_user_turns_in_a_row(home):
    turns = [finished("Q1", "", "stopped"), finished("Q2", "A2"), finished("Q3", "", "stopped")]
    saved = conversation.conversation(turns, "a")
    assert [m["role"] for m in saved] == ["user", "assistant"] and saved[0]["content"] == "Q2"
    seen = conversation.messages_for(turns, "a", 2)  # what the model answering Q3 is sent
    assert [m["role"] for m in seen] == ["user", "assistant", "user"]


def test_item3_adding_turns_starts_on_a_new_dataset_and_never_grows_an_upload_unasked(home):
    store = get_manager().store
    chat_data.append_rows(store, "my-training-file", "chat", [GOOD])  # a person's own dataset
    at = chat_page({state_keys.CHAT_HISTORY: [finished("What is 2+2?", "4")]})
    assert by_label(at.selectbox, "Dataset").value == "New dataset…"
    by_label(at.text_input, "New dataset name").set_value("my-training-file").run()
    click(at, "Add 1 turn")
    assert any("exists" in e.value for e in at.error)
    rows = next(d for d in store.list_datasets() if d["name"] == "my-training-file")["num_rows"]
    assert rows == 1  # the user's file is unchanged


def test_item3_side_by_side_starts_with_the_runs_weights_beside_the_base_model(home):
    make_run(home, "sl-one", "the-run")
    at = chat_page({state_keys.CHAT_TARGET_REQUEST: "sl-one"})
    by_label(at.toggle, "Side by side").set_value(True).run()
    left, right = by_label(at.selectbox, "Left model").value, by_label(at.selectbox, "Right model").value
    assert "sl-one" in left and right.startswith("base:"), (left, right)


def test_item10_deleting_an_export_asks_first(home):
    from cookbook_engine import export

    gguf = export.exports_dir() / "the-run-final-q8_0.gguf"
    gguf.write_bytes(b"0" * 2048)
    at = open_page("checkpoints")
    assert not [b for b in at.button if b.label == "Delete"]  # no one-click delete
    assert gguf.exists()
    confirm = [b for b in at.button if b.label.startswith("Delete 2")]
    assert len(confirm) == 1  # inside the export's Delete popover, with the size it frees
    confirm[0].click().run()
    assert not gguf.exists() and any("Deleted the export" in s.value for s in at.success)


def test_item9_the_sidebar_follows_the_default_model_on_every_page(home, monkeypatch):
    from test_studio_apptest import fire_timers, open_page_with_timers

    from app import state

    monkeypatch.setattr(state, "default_model_status", lambda: (state.ModelState.PREPARING, "being prepared"))
    at, timers = open_page_with_timers("chat")  # a page with no refresh of its own
    assert any("being prepared" in c.value for c in at.sidebar.caption)
    assert timers, "the sidebar's status must refresh by itself while the model is being prepared"
    monkeypatch.setattr(state, "default_model_status", lambda: (state.ModelState.READY, "ready"))
    fire_timers(at, timers)
    assert not any("being prepared" in c.value for c in at.sidebar.caption)


def test_item9_the_disk_line_follows_a_delete_at_once(home):
    import shutil

    folder = home / "runs" / "sl-big"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"0" * 3_000_000)
    at = open_page()
    assert any("runs 3.0 MB" in c.value for c in at.caption), [c.value for c in at.caption]
    shutil.rmtree(folder)
    at = open_page()
    assert not any("runs 3.0 MB" in c.value for c in at.caption)


def test_item8_a_sweep_is_built_and_checked_from_the_form_and_the_yaml(home):
    from cookbook_engine.evals import sweeps

    at = open_page("sweeps")
    form_check, yaml_check = [b for b in at.button if b.label == "Check"]
    form_check.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Ready to start: 3 members" in s.value for s in at.success), [s.value for s in at.success]
    yaml_text = next(c.value for c in at.code if "learning_rate" in c.value)
    spec = sweeps.parse_text(yaml_text)
    assert spec["grid"] == {"learning_rate": [3e-4, 1e-3, 3e-3]} and spec["base"]["dataset"] == "builtin:facts"
    assert sweeps.EvalStore().list_sweeps() == []  # checked, not started

    [b for b in at.button if b.label == "Check"][1].click().run()
    assert any("Ready to start: 3 members" in s.value for s in at.success)
    by_label(at.text_area, "Sweep (YAML)").set_value("kind: sl\ngrid: {learning_rate: [1e-3]}\nbase: {lora_rank: -1}")
    [b for b in at.button if b.label == "Check"][1].click().run()
    assert any("lora_rank=-1: must be at least 1" in e.value.replace("\\", "") for e in at.error)
