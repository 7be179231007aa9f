"""Faults a newcomer met in the studio (issue 27, items 2-12), each under Streamlit's AppTest as a person meets it.
Runs are recorded in storage directly and conversations are set in the session as the Chat page leaves them, so no
model loads and these run in seconds; the ones that need a model replying live in tests/test_browser_chat_stop.py."""

from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest
from test_pages_keep_their_run import chat_page, make_run
from test_studio_apptest import MAIN, by_label, click, open_page

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


def test_item3_side_by_side_from_the_base_model_puts_the_newest_run_on_the_right(home):
    """The other direction: opened on the base model, side by side starts with the newest run's weights on the
    right, not the base model twice."""
    make_run(home, "sl-old", "the-old-run")
    make_run(home, "sl-new", "the-new-run")
    at = open_page("chat")
    by_label(at.toggle, "Side by side").set_value(True).run()
    left, right = by_label(at.selectbox, "Left model").value, by_label(at.selectbox, "Right model").value
    assert left.startswith("base:") and "sl-new" in right, (left, right)


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


def test_item5_the_new_run_form_has_eval_sets_and_duplicate_keeps_them(home):
    at = open_page("new_run")
    evals = by_label(at.multiselect, "Eval sets (validation)")
    assert "builtin:facts-probes" in evals.options and evals.value == []
    at = AppTest.from_file(str(MAIN), default_timeout=60)
    at.run()
    at.session_state[state_keys.NEW_RUN_BASE] = {
        "kind": "sl",
        "config": {"dataset": "builtin:facts", "evals": "builtin:facts-probes,builtin:facts-nll"},
        "name": "with-evals",
    }
    at.session_state[state_keys.FORM_GENERATION] = 5
    at.switch_page("../pages/new_run.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert by_label(at.multiselect, "Eval sets (validation)").value == ["builtin:facts-probes", "builtin:facts-nll"]


def test_the_new_run_form_keeps_each_algorithms_settings_across_algorithm_and_page_switches(home):
    """A newcomer set up an RL run, glanced at the SL form and came back: every edit was gone (each algorithm's
    widgets are dropped while another's are drawn). Now the form holds each algorithm's last settings for the
    session, and "Reset to defaults" puts them back."""
    at = open_page("new_run")
    assert "Reset to defaults" not in [b.label for b in at.button]  # nothing edited yet
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    by_label(at.get("button_group"), "Environment").set_value("code").run()
    by_label(at.number_input, "Max steps").set_value(7).run()
    by_label(at.selectbox, "LoRA on MLP").set_value(False).run()  # entered, never checked
    by_label(at.get("button_group"), "Algorithm").set_value("sl").run()
    assert by_label(at.number_input, "Max steps").value != 7  # SL's own form
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    assert by_label(at.get("button_group"), "Environment").value == "code"
    assert by_label(at.number_input, "Max steps").value == 7
    assert by_label(at.selectbox, "LoRA on MLP").value is False
    at.switch_page("../pages/runs.py").run()
    at.switch_page("../pages/new_run.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert by_label(at.get("button_group"), "Algorithm").value == "rl"  # the algorithm the form showed last
    assert by_label(at.number_input, "Max steps").value == 7
    click(at, "Reset to defaults")
    assert by_label(at.get("button_group"), "Algorithm").value == "rl"
    assert by_label(at.get("button_group"), "Environment").value == "arithmetic"
    assert by_label(at.number_input, "Max steps").value != 7
    assert by_label(at.selectbox, "LoRA on MLP").value is None  # auto
    assert "Reset to defaults" not in [b.label for b in at.button]


def test_item11_the_rl_form_keeps_ppo_clip_fields_apart_as_ppo_only(home):
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    assert by_label(at.selectbox, "Loss").value == "importance_sampling"
    [ppo] = [e for e in at.expander if "ppo" in e.label.lower()]
    assert "only when the loss is ppo" in ppo.label
    clip_labels = {n.label for n in ppo.number_input}
    assert len(clip_labels) == 2 and all("clip" in label.lower() for label in clip_labels), clip_labels


def running_run(home, run_id: str, steps: dict[int, dict[str, float]]) -> None:
    store = get_manager().store
    make_run(home, run_id, run_id, store)
    store.claim_run(run_id)  # running, owned by this (live) process
    store.update_run(run_id, step=len(steps), total_steps=3)
    for step, metrics in steps.items():
        store.log_metrics(run_id, step, metrics)


def test_item7_the_run_page_reads_plainly_from_the_first_step(home):
    running_run(home, "sl-starting", {})
    at = open_page("run", run="sl-starting")
    assert any("The first step is running (started" in i.value for i in at.info), [i.value for i in at.info]
    assert "known after the first step" in "\n".join(c.value for c in at.caption)

    one = {"train_mean_nll": 2.3456789, "learning_rate": 0.0005, "epoch": 0.0, "time/total": 40.0}
    running_run(home, "sl-one-step", {0: one})
    at = open_page("run", run="sl-one-step")
    assert "left" in "\n".join(c.value for c in at.caption)  # one step is enough for a first estimate
    two = {**one, "train_mean_nll": 2.0, "time/total": 44.0}
    running_run(home, "sl-two-steps", {0: one, 1: two})
    at = open_page("run", run="sl-two-steps")
    cards = {m.label: m.value for m in at.metric}
    assert cards["Training loss (NLL)"] == "2" and cards["Learning rate"] == "0.0005", cards
    charts = {
        json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec) for c in at.get("plotly_chart")
    }
    lr = next(spec for title, spec in charts.items() if "earning rate" in title)
    low, high = lr["layout"]["yaxis"]["range"]
    assert low < 0.0005 < high and high - low < 0.001  # the flat line sits mid-axis, not on 0 of -0.5..1
    assert at.get("progress")[0].proto.text == "2 of 3 steps done"  # a count, beside charts of step indexes
    assert lr["layout"]["xaxis"]["title"]["text"] == "step (0 = the first)"
    assert not any("epoch" in title.lower() for title in charts)  # a flat epoch=0 is a caption, not a chart
    assert any("Unchanged:" in c.value and "epoch = 0" in c.value for c in at.caption)


def test_item4_evaluate_shows_time_left_narrow_marks_and_whole_lineage_buttons(home):
    from datetime import timedelta

    from storage.db import utcnow
    from storage.evals import EvalStore

    store = EvalStore()
    store.create_job(
        "ev-run", name="running-eval", models=["base"], eval_sets=["builtin:facts-probes"], settings={}, total=240
    )
    store.update_job("ev-run", status="running", done=80, started_at=utcnow() - timedelta(seconds=120))
    at = open_page("evaluate", eval="ev-run")
    progress = at.get("progress")[0].proto.text
    assert "80 of 240 examples" in progress and re.search(r"about 4 min \d\d s left", progress), progress

    import pandas as pd

    from app.widgets import answer_columns

    table = pd.DataFrame(
        columns=["idx", "prompt", "reference", "base · output", "base · correct", "ckpt · output", "ckpt · correct"]
    )
    widths = {name: spec["width"] for name, spec in answer_columns(table).items()}
    assert widths["base · correct"] == widths["ckpt · correct"] == "small" and widths["ckpt · output"] == "medium"


def test_item11_the_run_log_says_when_a_checkpoint_is_saved(tmp_path):
    import asyncio
    from types import SimpleNamespace

    from cookbook_engine.training.common import save_checkpoint

    async def saved(path: str):
        async def result():
            return SimpleNamespace(path=path)

        return result()

    client = SimpleNamespace(
        save_state_async=lambda name: saved(f"/state/{name}"), save_weights_for_sampler_async=lambda name: saved("/w")
    )
    notes: list[str] = []
    ctx = SimpleNamespace(logger=SimpleNamespace(log_checkpoint=lambda **_: None), note=notes.append)
    asyncio.run(save_checkpoint(client, ctx, step=20, name="000020", loop_state={}))
    asyncio.run(save_checkpoint(client, ctx, step=25, name="final", loop_state={}, final=True))
    assert notes == ["saved step 20: checkpoint 000020", "saved step 25 (final): checkpoint final"]


def test_the_sweeps_page_draws_while_another_apptest_has_cleared_streamlits_runtime(home, monkeypatch):
    """AppTests drawing pages in parallel threads (benchmarks/pages_beside_training.py) each set and then clear
    Streamlit's one Runtime; a page drawn while it is cleared gets no form ids in its widgets' ids, and the Sweeps
    page's two forms, each with a Check and a Start sweep button, raised StreamlitDuplicateElementKey."""
    from streamlit import runtime

    monkeypatch.setattr(runtime, "exists", lambda: False)  # what a page sees while another AppTest has cleared it
    at = open_page("sweeps")
    assert [b.label for b in at.button].count("Check") == 2


def test_item13_while_a_run_trains_pages_draw_one_at_a_time(home, monkeypatch):
    import threading
    import time

    from app import state

    monkeypatch.setattr(type(state.manager()), "active_run_ids", lambda self: ["sl-training"])
    entered: list[float] = []

    def page() -> None:
        with state.page_slot():
            entered.append(time.monotonic())
            time.sleep(0.5)

    threads = [threading.Thread(target=page) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert abs(entered[1] - entered[0]) >= 0.45  # the second page waited for the first

    monkeypatch.setattr(type(state.manager()), "active_run_ids", lambda self: [])
    entered.clear()
    threads = [threading.Thread(target=page) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert abs(entered[1] - entered[0]) < 0.3  # nothing training: side by side


def pending_reply(text: str, panes: str = "ab") -> conversation.Turn:
    return conversation.Turn(text, {pane: conversation.PaneReply(chat.base_target()) for pane in panes})


def test_item2_a_stop_ends_its_own_reply_only_side_by_side_and_queued(home):
    turns = [pending_reply("Write a long story."), pending_reply("Name three colours.")]
    turns[0].replies["a"].reply.text = "Once upon"
    conversation.stop(turns, 0, "a")  # the left pane's Stop under the first message
    assert turns[0].replies["a"].reply.finish == "stopped" and turns[0].replies["a"].reply.text == "Once upon"
    assert conversation.pending(turns) == [(0, "b"), (1, "a"), (1, "b")]  # the right pane and the queue still come


def test_item2_the_last_message_can_be_regenerated_or_edited_and_resent(home, monkeypatch):
    turns = [finished("Q1", "A1"), finished("What is 2+2?", "5")]
    at = chat_page({state_keys.CHAT_HISTORY: turns})
    assert [b for b in at.button if b.label == "Regenerate"]
    assert by_label(at.text_area, "Your last message").value == "What is 2+2?"  # in the Edit and resend popover
    assert [b for b in at.button if b.label == "Send edited"]

    monkeypatch.setattr(conversation, "history", lambda: turns)
    conversation.resend(1, "What is 2+3?", {"a": chat.base_target()})
    assert [t.user for t in turns] == ["Q1", "What is 2+3?"]  # replaced, not added after
    assert conversation.pending(turns) == [(1, "a")] and turns[0].replies["a"].reply.text == "A1"


def test_item11_the_transcripts_step_slider_says_steps_count_from_zero(home):
    from cookbook_engine import models

    store = get_manager().store
    store.create_run(
        "rl-three",
        name="three-steps",
        kind="rl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={"env": "arithmetic"},
        log_dir=home / "runs" / "rl-three",
        status="completed",
        total_steps=3,
    )
    rows = [
        {
            "step": step,
            "group_idx": 0,
            "sample_idx": sample,
            "prompt": "1+1=",
            "completion": "2",
            "reward": float(sample),
            "advantage": sample - 0.5,
            "stop_reason": "stop",
            "metrics": {},
        }
        for step in range(3)
        for sample in (0, 1)
    ]
    store.add_transcripts("rl-three", rows)
    at = open_page("transcripts", run="rl-three")
    slider = by_label(at.select_slider, "Step (0 = the first)")
    assert slider.options == ["0", "1", "2"] and slider.value == 2  # 3 steps: indexes 0..2, named as such


def test_item8_sweep_members_link_to_their_run_pages():
    import pandas as pd

    from app import sweep_form

    table = pd.DataFrame({"member": ["base", "0", "1"], "run": ["", "sl-a", "sl-b"]})
    assert sweep_form.with_run_links(table)["run"].tolist() == ["", "run?run=sl-a", "run?run=sl-b"]


def test_chat_opened_with_a_run_in_its_address_picks_that_runs_newest_checkpoint(home):
    """/chat?run=RUN_ID (a link, a reload, the Run page's "Chat with it") chats with that run, not the base model;
    a model picked afterwards stays picked on the next rerun."""
    make_run(home, "sl-old", "the-old-run")
    make_run(home, "sl-new", "the-new-run")
    at = open_page("chat", run="sl-old")
    picker = by_label(at.selectbox, "Model")
    assert "sl-old" in picker.value and picker.value.startswith("checkpoint"), picker.value
    base = chat.base_target().key
    picker.set_value(base).run()
    assert by_label(at.selectbox, "Model").value == base  # the address does not take the picker back


def test_the_runs_table_fits_a_1440_px_window_with_the_sidebar_open(home):
    """At 1440x900 with the sidebar open the table had eleven columns in about 940 px: Age and Model were
    off-screen and CPU · RAM squeezed (issue 27). Every column has a width now and they fit together; each cell's
    longest usual text fits its column (`text_px`, with 16 px of padding); an active
    run's CPU and memory are a line under the table. tests/test_browser_runs_table.py measures it in chromium."""
    import os
    from datetime import timedelta

    from app import widgets
    from cookbook_engine import models
    from storage import utcnow

    store = get_manager().store
    store.create_run(
        "rl-20261127-101010-abcd",
        name="rl-20261127-101010-abcd",
        kind="rl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={},
        log_dir=home / "runs" / "rl",
        total_steps=120,
    )
    store.claim_run("rl-20261127-101010-abcd", os.getpid())  # this process stands in for the one training it
    for step in range(3):
        store.log_metrics("rl-20261127-101010-abcd", step, {"env/all/reward/total": 0.4375, "time/total": 12.0})
    store.update_run("rl-20261127-101010-abcd", step=3, started_at=utcnow() - timedelta(minutes=2))
    at = open_page("runs")
    row = at.dataframe[0].value.iloc[0]
    assert row["Key metric"] == "reward 0.4375" and row["Time"].endswith(" left"), row
    captions = [c.value.replace("\\", "") for c in at.caption]  # as read: markdown escapes removed
    assert any("rl-20261127-101010-abcd is training: CPU" in c and "RAM" in c for c in captions), captions

    shown = [name for name, spec in widgets.RUNS_COLUMN_CONFIG.items() if spec is not None]
    widths = {name: widgets.RUNS_COLUMN_CONFIG[name]["width"] for name in shown}
    assert all(isinstance(width, int) for width in widths.values()), widths
    assert 35 + sum(widths.values()) <= widgets.RUNS_TABLE_FITS_PX
    longest = {  # the widest text each column usually holds
        "Run": "distill-20261127-101010-abcd",  # a distillation run's default name
        "Kind": "Distill",
        "Status": "interrupted",
        "Key metric": "DPO loss 0.6931",
        "Time": "48 min 45 s left",
        "Age": "12 min ago",
        "Model": "SmolLM2-135M-Instruct",
    }
    for name, text in longest.items():
        assert text_px(text) + 16 <= widths[name], f"{name}: {text!r} in {widths[name]} px"


def text_px(text: str) -> float:
    """About how wide the runs table draws `text` (Source Sans at 14 px, measured in chromium: a run id of 23
    characters took 147 px, '48 min 45 s left' about 85 px): 6.5 px a character, 3.5 for the narrow ones."""
    return sum(3.5 if char in " .:il|'" else 6.5 for char in text)


def test_item8_the_sweep_picker_names_no_status_that_goes_stale_beside_the_badge(home):
    """The picker said "running" while the badge beside it said "completed": a selectbox keeps the label it drew, so
    a status in it goes stale. The picker names the sweep only; its status is the badge's."""
    from storage.evals import EvalStore

    store = EvalStore()
    store.create_sweep("sweep-20261127-0001", name="lr-grid", spec={"kind": "sl", "grid": {}}, members=[])
    store.update_sweep("sweep-20261127-0001", status="completed")
    at = open_page("sweeps")
    assert not at.exception, [e.value for e in at.exception]
    picker = by_label(at.selectbox, "Sweep")
    assert picker.options == ["lr-grid · sweep-20261127-0001"]
    assert not any(status in picker.options[0] for status in ("running", "completed", "queued"))


def test_a_training_runs_chat_label_stays_the_same_from_step_to_step(home):
    """The picker's label for a training run's latest weights named its step, so at the next step the browser's
    selectbox held a label no option had and fell back to the base model with "... is gone" (seen taking the README
    screenshot). The label and key stay the same while the run trains."""
    store = get_manager().store
    make_run(home, "sl-live", "live-run")
    store.update_run("sl-live", status="running", step=3)
    before = [t for t in chat.list_targets() if t.kind == "latest"]
    store.update_run("sl-live", step=4)
    after = [t for t in chat.list_targets() if t.kind == "latest"]
    assert (
        [(t.key, t.label) for t in before]
        == [(t.key, t.label) for t in after]
        == [("latest:sl-live", "Latest weights · live-run (training)")]
    )
