"""The studio's pages under Streamlit's AppTest, on the real default model and the real engine.

Each test drives a page the way a person would (pick, type, click) and checks what they would see: the forms
validate and show the equivalent command, a short SL run started from the form completes and its charts appear,
stop and resume work from the run page, chat answers (also from the newest weights of a run still training),
uploads are validated with row numbers and tokenized with the loss mask, checkpoints export to PEFT and merged
models. Runs live in the engine's RunManager of this test process, as they live in the studio's server process.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cookbook_engine import chat, export, models
from cookbook_engine.config import SLConfig
from cookbook_engine.run_logger import RunLogger
from cookbook_engine.runs import get_manager

REPO = Path(__file__).resolve().parent.parent
MAIN = REPO / "app" / "main.py"
TIMEOUT = 120

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------------------------- helpers


def open_page(page: str | None = None, **query) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=TIMEOUT)
    at.run()
    if page:
        at.query_params.update(query)
        at.switch_page(f"../pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def by_label(elements, label: str):
    matches = [e for e in elements if e.label == label]
    assert matches, f"no widget labelled {label!r}; have {[e.label for e in elements]}"
    return matches[0]


def click(at: AppTest, label: str) -> AppTest:
    by_label(at.button, label).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_text(at: AppTest) -> str:
    """Everything a person reads on the page (markdown, captions, notices, code)."""
    parts = []
    for kind in ("title", "markdown", "caption", "success", "info", "warning", "error", "code", "text"):
        parts += [str(element.value) for element in getattr(at, kind)]
    return "\n".join(parts)


def wait_for(condition, timeout_s: float = 240, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def studio_home(tmp_path_factory, default_model_ready):
    """One studio home for this module (runs made by one test are used by the next ones)."""
    home = tmp_path_factory.mktemp("studio-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COOKBOOK_HOME", str(home))
        patch.delenv("TINKER_API_KEY", raising=False)
        yield home
        for run_id in get_manager().active_run_ids():
            get_manager().cancel(run_id)
            get_manager().wait(run_id, timeout=60)


@pytest.fixture(scope="module")
def form_run(studio_home):
    """A short SL run started from the New run form (3 steps of 2 examples), followed until it completes."""
    at = open_page("new_run")
    by_label(at.number_input, "Max steps").set_value(3)
    by_label(at.number_input, "Batch size").set_value(2)
    by_label(at.number_input, "Eval every (steps)").set_value(2)
    by_label(at.text_input, "Run name (optional)").set_value("facts-from-form")
    click(at, "Start run")
    run_id = at.query_params["run"]
    if isinstance(run_id, list):
        run_id = run_id[0]
    run = get_manager().wait(run_id, timeout=600)
    return {"run_id": run_id, "start_page": at, "final": run}


# ---------------------------------------------------------------------------------------------- home


def test_home_shows_backend_status_and_next_steps(home, default_model_ready, monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    at = open_page()
    text = shown_text(at)
    assert "is ready (local, CPU)" in text
    assert "no TINKER_API_KEY set" in text
    assert "No runs yet" in text
    links = [link.label for link in at.get("page_link")]
    assert {"Start a new run", "Open the chat", "Upload a dataset"} <= set(links)


# ---------------------------------------------------------------------------------------------- new run


def test_check_settings_shows_summary_estimate_and_command_without_starting(studio_home):
    runs_before = len(get_manager().store.list_runs())
    at = open_page("new_run")
    assert "Suggested learning rate" in shown_text(at)
    assert by_label(at.number_input, "Learning rate").value is None  # empty = the suggested rate (learning_rate=auto)
    assert "Suggested learning rate for SmolLM2-135M-Instruct: **0.001**" in shown_text(at)
    by_label(at.number_input, "Max steps").set_value(3)
    by_label(at.number_input, "Batch size").set_value(2)
    click(at, "Check settings")
    text = shown_text(at)
    assert "Ready to start" in text and "108 training and 12 held-out examples" in text
    assert "Estimate: 3 steps × 2 examples" in text
    assert any(code.value.startswith("cookbook sl") and "max_steps=3" in code.value and "batch_size=2" in code.value
               for code in at.code)
    assert len(get_manager().store.list_runs()) == runs_before


def test_bad_data_is_reported_before_any_run_starts(studio_home):
    runs_before = len(get_manager().store.list_runs())
    at = open_page("new_run")
    by_label(at.get("button_group"), "Dataset source").set_value("File path").run()
    by_label(at.text_input, "Data file").set_value(str(studio_home / "missing.jsonl"))
    click(at, "Start run")
    assert any("missing.jsonl: file not found" in error.value for error in at.error), shown_text(at)
    assert len(get_manager().store.list_runs()) == runs_before


def test_dpo_form_has_beta_and_starting_checkpoint_and_validates(studio_home):
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("dpo").run()
    assert by_label(at.number_input, "DPO beta").value == pytest.approx(0.1)
    assert by_label(at.selectbox, "Start from checkpoint").value == ""  # a fresh LoRA by default
    assert by_label(at.selectbox, "Dataset").value == "concise-prefs"
    by_label(at.number_input, "Max steps").set_value(2)
    click(at, "Check settings")
    if importlib.util.find_spec("cookbook_engine.preference") is None:
        assert any("not available in this build" in e.value for e in at.error)
    else:
        assert "Ready to start" in shown_text(at), shown_text(at)
        assert any(code.value.startswith("cookbook dpo") for code in at.code)


def test_rl_form_has_group_settings_and_validates(studio_home):
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    for label in ("Group size", "Groups per batch", "Max tokens per sample", "Temperature", "Top-p"):
        by_label(at.number_input, label)
    assert by_label(at.selectbox, "Loss").value == "importance_sampling"
    by_label(at.get("button_group"), "Environment").set_value("custom").run()
    assert by_label(at.selectbox, "Grader").value == "numeric"
    by_label(at.get("button_group"), "Problems source").set_value("Uploaded").run()
    assert "No uploaded rl datasets yet" in shown_text(at)
    click(at, "Check settings")
    assert any("dataset" in error.value for error in at.error), shown_text(at)


def test_dpo_and_rl_runs_start_from_their_forms_and_complete(studio_home):
    manager = get_manager()
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("dpo").run()
    by_label(at.number_input, "Max steps").set_value(2)
    by_label(at.number_input, "Batch size").set_value(2)
    by_label(at.number_input, "Held-out fraction").set_value(0.0)
    click(at, "Start run")
    dpo_id = at.query_params["run"]
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    for label, value in (("Max steps", 1), ("Groups per batch", 2), ("Group size", 2),
                         ("Max tokens per sample", 16), ("Eval problems", 2), ("Eval every (steps)", 0)):
        by_label(at.number_input, label).set_value(value)
    click(at, "Start run")
    rl_id = at.query_params["run"]
    assert dpo_id.startswith("dpo-") and rl_id.startswith("rl-")  # two runs at once, queued on one model worker

    for run_id, metric in ((dpo_id, "dpo_loss"), (rl_id, "env/all/reward/total")):
        run = manager.wait(run_id, timeout=600)
        assert run["status"] == "completed", run.get("error")
        assert metric in manager.store.metric_names(run_id)
    at = open_page("transcripts", run=rl_id)
    assert "Group 0" in shown_text(at) and len(at.get("plotly_chart")) >= 1
    assert any(badge.value.startswith(":blue-badge[reward") for badge in at.markdown)


# ---------------------------------------------------------------------------------------------- a run from the form


def test_sl_run_started_from_the_form_completes_and_its_metrics_appear(form_run):
    start_page = form_run["start_page"]
    assert [t.value for t in start_page.title] == ["facts-from-form"]  # the form switched to the run's page
    assert any("started" in s.value for s in start_page.success)
    assert form_run["final"]["status"] == "completed", form_run["final"].get("error")

    at = open_page("run", run=form_run["run_id"])
    text = shown_text(at)
    assert "completed" in text
    assert at.get("progress")[0].proto.text == "step 3/3"
    assert len(at.get("plotly_chart")) >= 2  # loss and learning rate at least
    assert "train_mean_nll" in [m.label for m in at.metric]
    assert any(code.value.startswith("cookbook sl") and "name=facts-from-form" in code.value for code in at.code)
    checkpoints = at.dataframe[0].value
    assert checkpoints["Final"].any()


def test_runs_page_lists_the_run_with_status_progress_and_key_metric(form_run):
    at = open_page("runs")
    table = at.dataframe[0].value
    row = table[table["run_id"] == form_run["run_id"]].iloc[0]
    assert row["Run"] == "facts-from-form" and row["Status"] == "completed" and row["Step"] == "3/3"
    assert row["Progress"] == 1.0 and row["Key metric"].startswith("train_mean_nll = ")


def test_duplicate_opens_the_form_with_the_runs_settings(form_run):
    at = open_page("run", run=form_run["run_id"])
    click(at, "Duplicate")
    assert [t.value for t in at.title] == ["New run"]
    assert "Settings copied from run" in shown_text(at)
    assert by_label(at.number_input, "Max steps").value == 3
    assert by_label(at.number_input, "Batch size").value == 2
    assert by_label(at.text_input, "Run name (optional)").value == ""  # a new run gets its own name


def test_compare_overlays_a_metric_and_diffs_settings(form_run, studio_home):
    store = get_manager().store
    other = "sl-compare-other"
    config = {**json.loads(json.dumps(form_run["final"]["config"])), "learning_rate": 5e-4, "name": "slower"}
    store.create_run(other, name="slower", kind="sl", backend="local", base_model=models.DEFAULT_MODEL,
                     config=config, log_dir=studio_home / "runs" / other, status="completed")
    logger = RunLogger(store, other, studio_home / "runs" / other)
    for step, nll in enumerate([2.2, 1.9, 1.7]):
        logger.log_metrics(step, {"train_mean_nll": nll, "learning_rate": 5e-4})

    at = open_page("compare")
    by_label(at.multiselect, "Runs").set_value([form_run["run_id"], other]).run()
    assert by_label(at.selectbox, "Metric").value == "train_mean_nll"
    assert len(at.get("plotly_chart")) == 1
    diff = at.dataframe[1].value
    assert "learning_rate" in list(diff["Setting"]) and "model" not in list(diff["Setting"])
    by_label(at.slider, "Smoothing").set_value(0.6).run()
    by_label(at.toggle, "Log scale").set_value(True).run()
    assert not at.exception and len(at.get("plotly_chart")) == 1


def test_runs_page_deletes_selected_runs_only_after_confirmation(form_run):
    store = get_manager().store
    assert store.get_run("sl-compare-other") is not None  # made by the compare test

    def select_slower(at: AppTest) -> AppTest:
        table = at.dataframe[0].value
        row = int(table.index[table["run_id"] == "sl-compare-other"][0])
        at.session_state["runs-table"] = {"selection": {"rows": [row], "columns": [], "cells": []}}
        return at.run()

    at = select_slower(open_page("runs"))
    assert "Selected: slower" in shown_text(at)
    click(at, "Delete")
    assert "• slower (completed)" in shown_text(at)
    click(at, "Cancel")
    assert store.get_run("sl-compare-other") is not None
    click(select_slower(at), "Delete")
    click(at, "Delete 1 run")
    assert any("Deleted slower" in s.value for s in at.success)
    assert store.get_run("sl-compare-other") is None
    assert store.get_run(form_run["run_id"]) is not None


# ---------------------------------------------------------------------------------------------- transcripts


def test_transcripts_show_groups_rewards_advantages_and_sandbox_output(studio_home):
    store = get_manager().store
    run_id = "rl-transcripts-demo"
    store.create_run(run_id, name="code-rl", kind="rl", backend="local", base_model=models.DEFAULT_MODEL,
                     config={"env": "code"}, log_dir=studio_home / "runs" / run_id, status="completed")
    rows = []
    for step in (0, 1):
        for sample, reward in enumerate([1.0, 0.0, 0.0, 1.0]):
            rows.append({"step": step, "group_idx": 0, "sample_idx": sample, "prompt": "Write square(x).",
                         "completion": f"```python\ndef square(x):\n    return x * {'x' if reward else 2}\n```",
                         "reward": reward, "advantage": reward - 0.5, "stop_reason": "stop",
                         "metrics": {"tests_passed": int(reward * 3), "tests_total": 3, "printed": "<b>debug</b>",
                                     "failures": {} if reward else {"0": "AssertionError"}}})
    store.add_transcripts(run_id, rows)

    at = open_page("transcripts", run=run_id)
    text = shown_text(at)
    assert "Group 0" in text and "tests passed: 3/3" in text
    badges = [m.value for m in at.markdown if "badge" in m.value]
    assert any("reward 1" in b for b in badges) and any("advantage \\+0\\.5" in b or "advantage +0.5" in b
                                                          for b in badges)
    codes = [c.value for c in at.code]
    assert any("return x * x" in c for c in codes) and "<b>debug</b>" in codes  # sandbox output, as text
    assert len(at.get("plotly_chart")) == 2  # reward histogram and rewards per step
    by_label(at.slider, "Reward between").set_value((1.0, 1.0)).run()
    codes = [c.value for c in at.code]
    assert any("return x * x" in c for c in codes) and not any("return x * 2" in c for c in codes)


# ---------------------------------------------------------------------------------------------- chat


def test_chat_replies_from_the_default_model_and_side_by_side(form_run):
    at = open_page("chat")
    by_label(at.number_input, "Max tokens").set_value(16)
    by_label(at.slider, "Temperature").set_value(0.0)
    at.run()
    at.chat_input[0].set_value("What is the capital of France?").run()
    assert not at.exception, [e.value for e in at.exception]
    messages = at.chat_message
    assert [m.name for m in messages] == ["user", "assistant"]
    reply = messages[1].markdown[0].value
    assert "Paris" in reply

    checkpoint = next(t for t in chat.list_targets() if t.run_id == form_run["run_id"] and t.kind == "checkpoint")
    by_label(at.toggle, "Side by side").set_value(True).run()
    by_label(at.selectbox, "Right model").set_value(checkpoint.key).run()
    at.chat_input[0].set_value("<b>What</b> is the capital of Quorvania?").run()
    assert not at.exception, [e.value for e in at.exception]
    messages = at.chat_message
    assert [m.name for m in messages].count("assistant") == 4  # two turns in each of two panes
    users = [m.markdown[0].value for m in messages if m.name == "user"]
    assert "\\<b\\>What\\</b\\> is the capital of Quorvania?" in users  # shown as text, never as HTML
    right_reply = messages[-1].markdown[0].value
    assert right_reply and right_reply != "(empty reply)"


def test_chat_with_latest_weights_of_a_running_run_then_stop_and_resume(studio_home):
    manager = get_manager()
    config = SLConfig(name="long-run", max_steps=400, batch_size=2, save_every=2, eval_every=0, test_fraction=0.0)
    run_id = manager.start(config)
    wait_for(lambda: manager.store.list_checkpoints(run_id), what="the run's first checkpoint")

    at = open_page("run", run=run_id)
    click(at, "Chat with it")  # a running run's page opens the chat on its latest weights
    latest = f"latest:{run_id}"
    assert [t.value for t in at.title] == ["Chat"] and by_label(at.selectbox, "Model").value == latest
    at.switch_page("../pages/chat.py")  # AppTest reruns the page it was last sent to, not one the app switched to
    by_label(at.number_input, "Max tokens").set_value(12)
    at.run()
    assert "newest weights" in shown_text(at)
    newest = chat.latest_sampler_path(run_id)
    saved = [c for c in manager.store.list_checkpoints(run_id) if c.get("sampler_path")]
    assert newest == max(saved, key=lambda c: c["step"])["sampler_path"]
    at.chat_input[0].set_value("Hello!").run()
    assert not at.exception and not at.error, shown_text(at)
    assert at.chat_message[1].markdown[0].value

    at = open_page("run", run=run_id)
    assert any(run_id in str(v) for v in at.query_params.values())
    click(at, "Stop")
    stopped = manager.wait(run_id, timeout=180)
    assert stopped["status"] == "cancelled"
    stopped_at = stopped["step"]
    at = open_page("run", run=run_id)
    click(at, "Resume")
    assert any("Resumed long-run" in s.value for s in at.success)
    wait_for(lambda: (manager.store.get_run(run_id)["step"] or 0) > stopped_at, what="the resumed run's next step")
    manager.cancel(run_id)
    assert manager.wait(run_id, timeout=180)["status"] == "cancelled"


# ---------------------------------------------------------------------------------------------- datasets


def test_upload_is_validated_with_row_numbers_previewed_and_tokenized(studio_home):
    at = open_page("datasets")
    bad = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n{oops\n'
    at.file_uploader[0].upload("broken.jsonl", bad).run()
    by_label(at.text_input, "Name").set_value("broken")
    click(at, "Validate and add")
    assert any("line 2: invalid JSON" in c.value for c in at.code), shown_text(at)
    assert not any(d["name"] == "broken" for d in get_manager().store.list_datasets())

    rows = [{"messages": [{"role": "user", "content": f"Say <i>{i}</i>"},
                          {"role": "assistant", "content": f"<script>alert({i})</script>"}]} for i in range(5)]
    good = "\n".join(json.dumps(r) for r in rows).encode()
    at = open_page("datasets")
    at.file_uploader[0].upload("tiny-chat.jsonl", good).run()
    by_label(at.text_input, "Name").set_value("tiny-chat")
    click(at, "Validate and add")
    assert any("Added tiny-chat: 5 chat rows" in s.value for s in at.success), shown_text(at)
    assert by_label(at.selectbox, "Dataset").value == "upload:tiny-chat"
    preview = at.dataframe[0].value
    assert len(preview) == 5 and "assistant: <script>alert(0)</script>" in preview.iloc[0]["messages"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Examples"] == "5" and int(metrics["Trained tokens"]) > 0
    assert int(metrics["Total tokens"].replace(",", "")) > int(metrics["Trained tokens"])
    assert len(at.get("plotly_chart")) == 1  # the length histogram
    assert not any("<script>" in m.value for m in at.markdown)  # uploaded text never reaches markdown raw
    assert any("tiny-chat" == d["name"] for d in get_manager().store.list_datasets())


# ---------------------------------------------------------------------------------------------- checkpoints


def test_checkpoint_exports_as_peft_adapter_and_merged_model(form_run):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    at = open_page("checkpoints", run=form_run["run_id"])
    assert by_label(at.selectbox, "Run").value == form_run["run_id"]
    assert len(at.get("download_button")) == 1
    click(at, "Build merged model")
    assert any("Saved" in s.value for s in at.success), shown_text(at)
    folder = Path(next(c.value for c in at.code if c.value.endswith("-merged")))
    assert (folder / "config.json").exists() and (folder / "model.safetensors").exists()
    assert (folder / "tokenizer.json").exists() or (folder / "tokenizer_config.json").exists()
    assert len(at.get("download_button")) == 2

    adapter = next(c for c in get_manager().store.list_checkpoints(form_run["run_id"])
                   if (c.get("loop_state") or {}).get("final"))["sampler_path"]
    archive = export.adapter_zip(adapter)
    import zipfile

    assert sorted(zipfile.ZipFile(archive).namelist()) == ["adapter_config.json", "adapter_model.safetensors"]
    tokens = torch.tensor([[1, 4093, 314, 260, 3575, 282, 4649, 47]])
    with torch.no_grad():
        merged_logits = AutoModelForCausalLM.from_pretrained(folder).eval()(tokens).logits
        adapted = PeftModel.from_pretrained(models.load_model(models.DEFAULT_MODEL), adapter).eval()
        adapted_logits = adapted(tokens).logits
    assert torch.allclose(merged_logits, adapted_logits, atol=2e-2)


def test_no_page_renders_raw_html():
    sources = [p.read_text() for folder in ("app", "pages") for p in (REPO / folder).glob("*.py")]
    assert not any("unsafe_allow_html" in s or "st.html(" in s for s in sources)
