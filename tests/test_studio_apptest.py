"""The studio's pages under Streamlit's AppTest, on the real default model and the real engine.

Each test drives a page the way a person would (pick, type, click) and checks what they would see: the forms
validate and show the equivalent command, a short SL run started from the form completes and its charts appear,
stop and resume work from the run page, chat answers (also from the live weights of a run still training before its
first save, and from the newest saved weights of a run training in another process), the runs table and home page
pick up a run started elsewhere when their refresh timers fire, uploads are validated with row numbers and
tokenized with the loss mask, and file names, rows and errors with markdown or HTML in them are shown literally,
checkpoints export to PEFT and merged models. Runs live in the engine's RunManager of this test process, as they
live in the studio's server process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shlex
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.local_script_runner import LocalScriptRunner
from tinker import types

from app import conversation
from app.settings_view import launcher
from app.widgets import safe_markdown as literal  # how text a person typed or uploaded reaches markdown: escaped
from cookbook_engine import chat, export, models, sandbox
from cookbook_engine.config import SLConfig
from cookbook_engine.data.loading import load_chat_dataset
from cookbook_engine.runs import get_manager
from cookbook_engine.sl import suggested
from cookbook_engine.training.lora_a import DEFAULT_LORA_RANK
from cookbook_engine.training.run_logger import RunLogger

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


@contextmanager
def _script_runner(fragment_ids: list[str] | None = None, messages: list | None = None):
    """AppTest with two things a browser does that AppTest does not: collect the raw messages sent to the
    browser (`messages`), and rerun only some fragments (`fragment_ids`), as a fragment's run_every timer does."""
    original_run, original_request = LocalScriptRunner.run, LocalScriptRunner.request_rerun

    def run(self, *args, **kwargs):
        tree = original_run(self, *args, **kwargs)
        if messages is not None:
            messages[:] = list(self.forward_msgs())
        return tree

    def request_rerun(self, rerun_data):
        if fragment_ids:
            rerun_data = dataclasses.replace(
                rerun_data, fragment_id_queue=list(fragment_ids), is_fragment_scoped_rerun=True
            )
        return original_request(self, rerun_data)

    LocalScriptRunner.run, LocalScriptRunner.request_rerun = run, request_rerun
    try:
        yield
    finally:
        LocalScriptRunner.run, LocalScriptRunner.request_rerun = original_run, original_request


def open_page_with_timers(page: str | None = None) -> tuple[AppTest, dict[str, float]]:
    """Open a page and return the fragments it asked the browser to rerun on a timer: {fragment id: seconds}."""
    messages: list = []
    with _script_runner(messages=messages):
        at = open_page(page)
    timers = {m.auto_rerun.fragment_id: m.auto_rerun.interval for m in messages if m.HasField("auto_rerun")}
    return at, timers


def fire_timers(at: AppTest, timers: dict[str, float]) -> AppTest:
    """What the browser does when the fragments' timers fire: rerun those fragments only, not the page."""
    with _script_runner(fragment_ids=list(timers)):
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def fake_cli_run(store, run_id: str, name: str, log_dir: Path, **config) -> None:
    """A run as a `cookbook sl` process elsewhere records it: in storage, running, owned by a live process (this
    one stands in), but not in this process's RunManager."""
    store.create_run(
        run_id,
        name=name,
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={"renderer": "auto", **config},
        log_dir=log_dir,
        total_steps=100,
    )
    store.claim_run(run_id)


def badges(at: AppTest) -> list[str]:
    """st.badge elements, as the markdown they are drawn with (":color-badge[:icon: label]")."""
    return [m.value for m in at.markdown if "-badge[" in m.value]


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


def test_home_counts_running_finished_and_failed_runs(home):
    store = get_manager().store
    statuses = ["running", "running", "queued", "completed", "failed", "interrupted", "cancelled"]
    for i, status in enumerate(statuses):
        run_id = f"sl-count-{i}"
        store.create_run(
            run_id,
            name=f"count-{i}",
            kind="sl",
            backend="local",
            base_model=models.DEFAULT_MODEL,
            config={},
            log_dir=home / "runs" / run_id,
            status=status,
        )
        if status == "running":
            store.claim_run(run_id)  # owned by a live process (this one)
    at = open_page()
    counts = {m.label: m.value for m in at.metric}
    assert (counts["Running"], counts["Finished"], counts["Failed"]) == ("3", "1", "2")  # queued counts as running


def test_runs_and_home_pages_show_a_run_started_elsewhere_without_a_click(home):
    store = get_manager().store
    runs_page, runs_timers = open_page_with_timers("runs")
    home_page, home_timers = open_page_with_timers()
    assert "No runs here yet." in shown_text(runs_page) and "No runs yet" in shown_text(home_page)
    assert runs_timers and home_timers, "an idle page must still refresh by itself"
    assert max(runs_timers.values()) <= 5 and max(home_timers.values()) <= 5

    fake_cli_run(store, "sl-from-cli", "started-from-the-cli", home / "runs" / "sl-from-cli")
    table = fire_timers(runs_page, runs_timers).dataframe[0].value
    assert list(table["Run"]) == ["started-from-the-cli"] and list(table["Status"]) == ["running"]
    fire_timers(home_page, home_timers)
    assert {m.label: m.value for m in home_page.metric}["Running"] == "1"
    assert "started\\-from\\-the\\-cli" in shown_text(home_page)


def test_home_shows_what_the_code_sandbox_isolates(home, monkeypatch):
    capabilities = sandbox.sandbox_capabilities()  # the real probe of this machine
    at = open_page()
    label = "network isolated" if capabilities["network_isolated"] else "network NOT isolated"
    assert any(badge.endswith(f" {label}]") for badge in badges(at)), badges(at)
    assert literal(capabilities["description"]) in shown_text(at)

    # on a machine without network namespaces the probe falls back to a plan that cannot isolate the network
    fallback = {
        **capabilities,
        "network_isolated": False,
        "network_method": "none",
        "plan": "rlimits",
        "reason": "this machine does not allow a network namespace here: unshare: Operation not permitted",
    }
    monkeypatch.setattr(sandbox.runner, "_capabilities", fallback)
    at = open_page()
    assert any(badge.endswith(" network NOT isolated]") for badge in badges(at)), badges(at)
    assert any(
        "Model-written code can reach the network" in w.value and "Operation not permitted" in w.value
        for w in at.warning
    )
    has_memory_warning = any("memory capped per process only" in badge for badge in badges(at))
    assert has_memory_warning == (not capabilities["memory_cgroup"])
    assert literal(capabilities["memory_limit"]) in shown_text(at)

    # without a memory cgroup the Home page says memory is capped per process only
    monkeypatch.setattr(
        sandbox.runner,
        "_capabilities",
        {**fallback, "memory_cgroup": False, "memory_limit": "per process only (RLIMIT_AS)"},
    )
    at = open_page()
    assert any(badge.endswith(" memory capped per process only]") for badge in badges(at)), badges(at)


# ---------------------------------------------------------------------------------------------- new run


def test_sl_rank_is_auto_named_with_the_rank_measured_for_the_data_and_a_duplicate_keeps_its_own(studio_home):
    """lora_rank=auto trains the facts' measured rank (8, with A fixed) and other data's 32: the select's auto option
    says which, as the data changes; a duplicated run's rank 32 on the facts stays 32 (the user's choice)."""
    at = open_page("new_run")
    measured = suggested.MEASURED[("sl", "builtin:facts")]
    rank = by_label(at.selectbox, "LoRA rank")
    assert rank.value == "auto" and rank.options[0] == f"auto ({measured.lora_rank}, measured)"
    at.run()  # drawn again from what the form holds: still its defaults, so nothing offers to reset them
    assert "Reset to defaults" not in [button.label for button in at.button]
    by_label(at.selectbox, "Dataset").set_value("persona").run()
    rank = by_label(at.selectbox, "LoRA rank")
    assert rank.value == "auto" and rank.options[0] == f"auto ({DEFAULT_LORA_RANK})"
    by_label(at.selectbox, "Dataset").set_value("facts").run()
    assert by_label(at.selectbox, "LoRA rank").options[0] == f"auto ({measured.lora_rank}, measured)"
    config = SLConfig(dataset="builtin:facts", lora_rank=32, name="rank-32")
    get_manager().store.create_run(
        "sl-rank-32",
        name="rank-32",
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config=dataclasses.asdict(config),
        log_dir=studio_home / "runs" / "sl-rank-32",
        status="completed",
    )
    at = open_page("run", run="sl-rank-32")
    click(at, "Duplicate")
    assert "Settings copied from run" in shown_text(at)
    assert by_label(at.selectbox, "LoRA rank").value == 32


def test_check_settings_shows_summary_estimate_and_command_without_starting(studio_home):
    runs_before = len(get_manager().store.list_runs())
    at = open_page("new_run")
    assert "Suggested learning rate" in shown_text(at)
    assert by_label(at.number_input, "Learning rate").value is None  # empty = the suggested rate (learning_rate=auto)
    measured = suggested.MEASURED[("sl", "builtin:facts")]  # builtin:facts is the default data: its measured rate
    assert (
        f"Suggested learning rate for SmolLM2-135M-Instruct: **{measured.learning_rate:g}**, measured on "
        "builtin:facts" in shown_text(at)
    )
    by_label(at.number_input, "Max steps").set_value(3)
    by_label(at.number_input, "Batch size").set_value(2)
    click(at, "Check settings")
    text = shown_text(at)
    facts = load_chat_dataset("builtin:facts")
    assert "Ready to start" in text and f"{len(facts.train)} training and {len(facts.test)} held-out examples" in text
    assert "Estimate: 3 steps × 2 examples" in text
    assert "Far from the settings measured for this data: 3 steps of 2 is under half" in text
    assert by_label(at.selectbox, "LoRA input side (A)").value == "auto"  # null_space on the facts
    assert by_label(at.selectbox, "LoRA rank").value == "auto"  # auto: the rank measured for the facts
    assert "LoRA rank" not in text.partition("Far from the settings measured")[2]
    by_label(at.selectbox, "LoRA rank").set_value(32)
    click(at, "Check settings")
    text = shown_text(at)
    assert f"LoRA rank 32 with lora_a=null_space: measured at rank {measured.lora_rank}" in text
    command = next(code.value for code in at.code if code.value.startswith(f"{launcher()} sl "))
    assert "max_steps=3" in command and "batch_size=2" in command
    assert len(get_manager().store.list_runs()) == runs_before
    copied = subprocess.run(
        [*shlex.split(command), "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=300
    )  # the command as a person pastes it, in the repository folder
    assert copied.returncode == 0 and '"max_steps": 3' in copied.stdout, copied.stderr


def test_bad_data_is_reported_before_any_run_starts(studio_home):
    runs_before = len(get_manager().store.list_runs())
    at = open_page("new_run")
    by_label(at.get("button_group"), "Dataset source").set_value("File path").run()
    by_label(at.text_input, "Data file").set_value(str(studio_home / "missing.jsonl"))
    click(at, "Start run")
    assert any(literal("missing.jsonl: file not found") in error.value for error in at.error), shown_text(at)
    assert len(get_manager().store.list_runs()) == runs_before


def test_dpo_form_has_beta_and_starting_checkpoint_and_validates(studio_home):
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("dpo").run()
    assert by_label(at.number_input, "DPO beta").value == pytest.approx(0.1)
    assert by_label(at.selectbox, "Start from checkpoint").value == ""  # a fresh LoRA by default
    assert by_label(at.selectbox, "Dataset").value == "concise-prefs"
    assert by_label(at.selectbox, "LoRA input side (A)").value == "auto"  # null_space on these pairs
    by_label(at.number_input, "Max steps").set_value(2)
    click(at, "Check settings")
    if importlib.util.find_spec("cookbook_engine.dpo.loop") is None:
        assert any("not available in this build" in e.value for e in at.error)
    else:
        assert "Ready to start" in shown_text(at), shown_text(at)
        assert any(code.value.startswith(f"{launcher()} dpo ") for code in at.code)


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
    for label, value in (
        ("Max steps", 1),
        ("Groups per batch", 2),
        ("Group size", 2),
        ("Max tokens per sample", 16),
        ("Eval problems", 2),
        ("Eval every (steps)", 0),
    ):
        by_label(at.number_input, label).set_value(value)
    click(at, "Start run")
    rl_id = at.query_params["run"]
    assert dpo_id.startswith("dpo-") and rl_id.startswith("rl-")  # two runs at once, queued on one model worker

    for run_id, metric in ((dpo_id, "dpo_loss"), (rl_id, "env/all/reward/total")):
        run = manager.wait(run_id, timeout=600)
        assert run["status"] == "completed", run.get("error")
        assert metric in manager.store.metric_names(run_id)
    rl_settings = json.loads(open_page("run", run=rl_id).json[0].value)
    assert "batch_size" not in rl_settings and "groups_per_batch" in rl_settings  # RL batches are groups
    # the arithmetic env's measured rate and LoRA layers (rl/suggested.py), each shown as what it resolved to
    assert rl_settings["learning_rate"] == "auto (0.0005, measured for this env)"
    assert rl_settings["train_mlp"] == "auto (off: attention only, measured for this model and env)"
    at = open_page("transcripts", run=rl_id)
    assert "Group 0" in shown_text(at) and len(at.get("plotly_chart")) >= 1
    assert any(badge.value.startswith(":blue-badge[reward") for badge in at.markdown)


# ---------------------------------------------------------------------------------------------- a run from the form


def test_sl_run_started_from_the_form_completes_and_its_metrics_appear(form_run):
    start_page = form_run["start_page"]
    assert [t.value for t in start_page.title] == [literal("facts-from-form")]  # the form switched to the run's page
    assert any("started" in s.value for s in start_page.success)
    assert form_run["final"]["status"] == "completed", form_run["final"].get("error")

    at = open_page("run", run=form_run["run_id"])
    text = shown_text(at)
    assert "completed" in text
    assert at.get("progress")[0].proto.text == "3 of 3 steps done"
    assert len(at.get("plotly_chart")) >= 2  # loss and learning rate at least
    assert "Training loss (NLL)" in [m.label for m in at.metric]  # the key metric, under its plain-language label
    assert any(code.value.startswith(f"{launcher()} sl ") and "name=facts-from-form" in code.value for code in at.code)
    settings = json.loads(at.json[0].value)
    rate = suggested.MEASURED[("sl", "builtin:facts")].learning_rate
    assert settings["learning_rate"] == f"auto ({rate:.3g}, measured for this dataset)"  # the rate it trained with
    assert settings["lora_a"] == "auto (null_space)"  # LoRA's A fixed away from ordinary chats, as measured
    assert settings["lora_rank"] == "auto (8, measured)"  # the rank it trained, measured for the facts
    assert "clock_period_s" not in settings
    checkpoints = at.dataframe[0].value
    assert checkpoints["Final"].any()


def test_runs_page_lists_the_run_with_status_progress_and_key_metric(form_run):
    at = open_page("runs")
    table = at.dataframe[0].value
    row = table[table["run_id"] == form_run["run_id"]].iloc[0]
    assert row["Run"] == "facts-from-form" and row["Status"] == "completed" and row["Time"].endswith(" s")
    assert row["Progress"] == 1.0 and row["Key metric"].startswith("loss ")


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
    store.create_run(
        other,
        name="slower",
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config=config,
        log_dir=studio_home / "runs" / other,
        status="completed",
    )
    logger = RunLogger(store, other, studio_home / "runs" / other)
    for step, nll in enumerate([2.2, 1.9, 1.7]):
        logger.log_metrics(step, {"train_mean_nll": nll, "learning_rate": 5e-4})

    at = open_page("compare")
    by_label(at.multiselect, "Runs").set_value([form_run["run_id"], other]).run()
    assert by_label(at.selectbox, "Metric").value == "train_mean_nll"
    assert len(at.get("plotly_chart")) == 1
    diff = at.dataframe[1].value
    assert "learning_rate" in list(diff["Setting"]) and "model" not in list(diff["Setting"])
    raw = [trace["y"] for trace in plotted(at)["data"] if trace.get("name") == "slower"]
    assert raw == [[2.2, 1.9, 1.7]] and plotted(at)["layout"]["yaxis"]["type"] == "linear"

    by_label(at.slider, "Smoothing").set_value(0.6).run()
    data = plotted(at)["data"]
    smoothed = next(trace["y"] for trace in data if trace.get("name") == "slower")
    assert smoothed == pytest.approx([2.2, 2.0125, 1.85306], abs=1e-4)  # TensorBoard's debiased EMA at 0.6
    assert [2.2, 1.9, 1.7] in [trace["y"] for trace in data if not trace.get("showlegend", True)]  # raw, faint
    by_label(at.toggle, "Log scale").set_value(True).run()
    assert not at.exception and len(at.get("plotly_chart")) == 1
    assert plotted(at)["layout"]["yaxis"]["type"] == "log"


def plotted(at: AppTest) -> dict:
    """The page's (only) plotly figure as the browser receives it: {"data": [traces], "layout": {...}}."""
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    return json.loads(charts[0].proto.spec)


def test_failed_run_page_shows_its_error_and_traceback(studio_home):
    store = get_manager().store
    run_id = "sl-failed-demo"
    name = "**fails** <i>at</i> step 2"
    store.create_run(
        run_id,
        name=name,
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={},
        log_dir=studio_home / "runs" / run_id,
        status="failed",
    )
    error = "ValueError: row 7 of data/**mine**.jsonl: <b>bad</b> role"
    trace = (
        'Traceback (most recent call last):\n  File "cookbook_engine/sl/loop.py", line 150, in train\n'
        "ValueError: row 7 of data/**mine**.jsonl: <b>bad</b> role"
    )
    store.update_run(run_id, error=error, traceback=trace)
    at = open_page("run", run=run_id)
    assert any(b.startswith(":red-badge[") and b.endswith(" failed]") for b in badges(at))
    assert [e.value for e in at.error] == [literal(error)]  # literally, not as markdown or HTML
    assert [t.value for t in at.title] == [literal(name)]
    assert trace in [c.value for c in at.code]


def select_runs(at: AppTest, *run_ids: str) -> AppTest:
    """Tick the runs' boxes in the runs table, as a click in the browser does."""
    table = at.dataframe[0].value
    rows = [int(table.index[table["run_id"] == run_id][0]) for run_id in run_ids]
    generation = at.session_state["runs-table-generation"] if "runs-table-generation" in at.session_state else 0
    key = f"runs-table-{generation}"
    at.session_state[key] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    return at.run()


def run_with_files(studio_home: Path, run_id: str, name: str) -> list[Path]:
    """A finished run with a run folder, two local checkpoint folders and an export of one; returns those paths."""
    store = get_manager().store
    log_dir = studio_home / "runs" / run_id
    store.create_run(
        run_id,
        name=name,
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={},
        log_dir=log_dir,
        status="completed",
    )
    logger = RunLogger(store, run_id, log_dir)
    folders = []
    for step in (2, 4):
        folder = studio_home / "checkpoints" / f"client-{run_id}" / "sampler_weights" / f"{step:06d}"
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * 600_000)
        (folder / "adapter_config.json").write_text("{}")
        logger.log_checkpoint(step=step, name=f"{step:06d}", kind="sampler", sampler_path=str(folder))
        folders.append(folder)
    return [log_dir, *folders, export.adapter_zip(folders[-1], name=name)]


def test_runs_page_deletes_selected_runs_only_after_confirmation(form_run, studio_home):
    store = get_manager().store
    assert store.get_run("sl-compare-other") is not None  # made by the compare test
    files = run_with_files(studio_home, "sl-with-files", "with-files")

    at = select_runs(open_page("runs"), "sl-compare-other")
    assert "Selected: slower" in shown_text(at)
    click(at, "Delete")
    assert "• slower (completed)" in shown_text(at)
    click(at, "Cancel")
    assert store.get_run("sl-compare-other") is not None
    click(select_runs(at, "sl-compare-other"), "Delete")
    click(at, "Delete 1 run")
    assert any("Deleted slower" in s.value for s in at.success)
    assert store.get_run("sl-compare-other") is None
    assert store.get_run(form_run["run_id"]) is not None
    # the next run did not slide into the deleted one's place in the selection
    assert "Select runs (the boxes on the left)" in shown_text(at) and by_label(at.button, "Delete").disabled

    click(select_runs(at, "sl-with-files"), "Delete")
    text = shown_text(at)
    assert "run folder, 2 checkpoint folders, 1 export" in text and "freeing **1.2 MB**" in text, text
    click(at, "Delete 1 run")
    assert any(f"Deleted {literal('with-files')} (1.2 MB freed)" in s.value for s in at.success), shown_text(at)
    assert not [path for path in files if path.exists()]
    assert not (studio_home / "checkpoints" / "client-sl-with-files").exists()
    assert store.get_run(form_run["run_id"]) is not None and all(
        Path(c["sampler_path"]).exists() for c in store.list_checkpoints(form_run["run_id"]) if c["sampler_path"]
    )


def test_a_toast_says_when_a_run_started_in_this_browser_finishes(studio_home):
    store = get_manager().store
    store.create_run(
        "sl-toast",
        name="toast-run",
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={},
        log_dir=studio_home / "runs" / "sl-toast",
        status="running",
    )
    store.claim_run("sl-toast")
    at = open_page("runs")
    at.session_state["watched-runs"] = {"sl-toast"}  # what starting it from New run records
    at.run()
    assert not at.toast
    store.update_run("sl-toast", status="completed")
    at.run()
    assert [t.value for t in at.toast] == [literal("Run toast-run finished")]
    at.run()
    assert not at.toast  # once


# ---------------------------------------------------------------------------------------------- transcripts


def create_rl_run(studio_home, run_id: str, name: str, config: dict, store=None) -> None:
    """A completed RL run record with the given settings, for transcripts to be added to."""
    (store or get_manager().store).create_run(
        run_id,
        name=name,
        kind="rl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config=config,
        log_dir=studio_home / "runs" / run_id,
        status="completed",
    )


def test_transcripts_show_groups_rewards_advantages_and_sandbox_output(studio_home):
    store = get_manager().store
    run_id = "rl-transcripts-demo"
    create_rl_run(studio_home, run_id, "code-rl", {"env": "code"})
    rows = []
    for step in (0, 1):
        for sample, reward in enumerate([1.0, 0.0, 0.0, 1.0]):
            rows.append(
                {
                    "step": step,
                    "group_idx": 0,
                    "sample_idx": sample,
                    "prompt": "Write square(x).",
                    "completion": f"```python\ndef square(x):\n    return x * {'x' if reward else 2}\n```",
                    "reward": reward,
                    "advantage": reward - 0.5,
                    "stop_reason": "stop",
                    "metrics": {
                        "tests_passed": int(reward * 3),
                        "tests_total": 3,
                        "printed": "<b>debug</b>",
                        "failures": {} if reward else {"0": "AssertionError"},
                    },
                }
            )
    store.add_transcripts(run_id, rows)

    at = open_page("transcripts", run=run_id)
    text = shown_text(at)
    assert "Group 0" in text and "tests passed: 3/3" in text
    badges = [m.value for m in at.markdown if "badge" in m.value]
    assert any("reward 1" in b for b in badges) and any(
        "advantage \\+0\\.5" in b or "advantage +0.5" in b for b in badges
    )
    codes = [c.value for c in at.code]
    assert any("return x * x" in c for c in codes) and "<b>debug</b>" in codes  # sandbox output, as text
    assert len(at.get("plotly_chart")) == 2  # reward histogram and rewards per step
    histogram = next(
        figure
        for figure in map(lambda c: json.loads(c.proto.spec), at.get("plotly_chart"))
        if figure["layout"]["title"]["text"] == "Rewards at step 1"
    )
    counts = dict(zip(histogram["data"][0]["x"], histogram["data"][0]["y"]))
    assert counts == {0.0: 2, 1.0: 2} and sum(counts.values()) == len(store.get_transcripts(run_id, step=1))
    assert not any("isolate the network" in w.value for w in at.warning)
    by_label(at.slider, "Reward between").set_value((1.0, 1.0)).run()
    codes = [c.value for c in at.code]
    assert any("return x * x" in c for c in codes) and not any("return x * 2" in c for c in codes)


def test_transcripts_of_a_mix_of_envs_filter_by_task(studio_home):
    store = get_manager().store
    run_id = "rl-mix-demo"
    create_rl_run(studio_home, run_id, "mix-rl", {"env": "arithmetic:2,code:1"})
    store.add_transcripts(
        run_id,
        [
            {
                "step": 0,
                "group_idx": group,
                "sample_idx": 0,
                "prompt": prompt,
                "completion": completion,
                "reward": 1.0,
                "advantage": 0.0,
                "stop_reason": "stop",
                "metrics": {"task": task, "tags": [task]},
            }
            for group, (task, prompt, completion) in enumerate(
                [("arithmetic", "What is 2 + 3?", "5"), ("code", "Write square(x).", "def square(x): ...")]
            )
        ],
    )
    at = open_page("transcripts", run=run_id)
    task = by_label(at.selectbox, "Task")
    assert task.options == ["All", "arithmetic", "code"]
    assert {"5", "def square(x): ..."} <= {c.value for c in at.code}
    task.set_value("code").run()
    codes = {c.value for c in at.code}
    assert "def square(x): ..." in codes and "5" not in codes
    assert [m.value for m in at.metric if m.label == "Samples at this step"] == ["1"]


def test_transcripts_warn_about_code_that_ran_without_network_isolation(studio_home):
    store = get_manager().store
    run_id = "rl-unisolated-demo"
    create_rl_run(studio_home, run_id, "code-rl-no-netns", {"env": "code"})
    store.add_transcripts(
        run_id,
        [
            {
                "step": 0,
                "group_idx": 0,
                "sample_idx": sample,
                "prompt": "Write square(x).",
                "completion": "def square(x):\n    return x * x",
                "reward": 1.0,
                "advantage": 0.0,
                "stop_reason": "stop",
                "metrics": {"tests_passed": 3, "tests_total": 3, "network_isolated": isolated},
            }
            for sample, isolated in enumerate([False, True, False])
        ],
    )
    at = open_page("transcripts", run=run_id)
    assert any("2 of the 3 samples" in w.value and "could not isolate the network" in w.value for w in at.warning)
    assert sum(badge.endswith("network not isolated]") for badge in badges(at)) == 2
    assert sum("Ran with network access" in w.value for w in at.warning) == 2  # in each sample's sandbox output


def test_transcripts_flag_possible_reward_hacks_with_a_badge_and_a_filter(studio_home):
    store = get_manager().store
    run_id = "rl-hack-flags-demo"
    create_rl_run(studio_home, run_id, "code-rl-hacks", {"env": "code"})
    completions = [
        "def square(x):\n    return x * x",
        "import sys\nsys.modules['__main__'].ok = 1",
        "def square(x):\n    return x * x",
        "import os\nos._exit(0)",
    ]
    flags = [[], ["sys.modules", "__main__"], [], ["process exit"]]
    store.add_transcripts(
        run_id,
        [
            {
                "step": 0,
                "group_idx": 0,
                "sample_idx": sample,
                "prompt": "Write square(x).",
                "completion": completion,
                "reward": 0.0 if flag else 1.0,
                "advantage": -0.5 if flag else 0.5,
                "stop_reason": "stop",
                "metrics": {"tests_passed": 0 if flag else 3, "tests_total": 3, "suspicious": flag},
            }
            for sample, (completion, flag) in enumerate(zip(completions, flags))
        ],
    )
    at = open_page("transcripts", run=run_id)
    hack_badges = [b for b in badges(at) if "possible reward hack" in b]
    assert len(hack_badges) == 2
    assert literal("code touches: sys.modules, __main__") in shown_text(at)
    by_label(at.toggle, "Only samples flagged as possible reward hacks (2)").set_value(True).run()
    codes = [c.value for c in at.code]
    assert any("sys.modules" in c for c in codes) and not any("return x * x" in c for c in codes)


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


def interrupted_reply(text: str = "Name three colours.") -> conversation.Turn:
    """A turn whose reply was cut off mid-generation (the page reran after its first chunk), as a send during a
    reply leaves it: some text and tokens, not finished."""
    target = chat.base_target()
    turn = conversation.Turn(text, {"a": conversation.PaneReply(target)})
    pieces = chat.stream_reply(
        target,
        [{"role": "user", "content": text}],
        chat.ChatParams(temperature=0.0, max_tokens=40),
        reply=turn.replies["a"].reply,
    )
    next(pieces)
    pieces.close()
    assert turn.replies["a"].reply.text and turn.replies["a"].reply.finish is None
    return turn


def test_chat_message_sent_during_a_reply_waits_and_the_reply_is_kept_whole(studio_home):
    at = open_page("chat")
    by_label(at.number_input, "Max tokens").set_value(40)
    by_label(at.slider, "Temperature").set_value(0.0)
    at.run()
    turn = interrupted_reply()
    partial = turn.replies["a"].reply.text
    at.session_state["chat-history"] = [turn]
    at.chat_input[0].set_value("And one more?").run()  # sent while the first reply was still being written
    assert not at.exception, [e.value for e in at.exception]
    replies = [m for m in at.chat_message if m.name == "assistant"]
    assert len(replies) == 2
    first = replies[0].markdown[0].value
    assert first.startswith(literal(partial)) and len(first) > len(literal(partial))  # continued, not dropped
    assert "no reply" not in shown_text(at)
    history = at.session_state["chat-history"]
    assert history[0].replies["a"].reply.finish in ("stop", "length")
    seen = conversation.messages_for(history, "a", 1)
    # the first reply is in the second turn's context
    assert seen[1] == {"role": "assistant", "content": history[0].replies["a"].reply.text}


def test_chat_marks_replies_cut_at_max_tokens_and_stopped_ones(studio_home):
    at = open_page("chat")
    by_label(at.number_input, "Max tokens").set_value(3)
    at.run()
    at.chat_input[0].set_value("Tell me a long story.").run()
    assert "cut at the max tokens limit" in at.chat_message[1].caption[0].value

    turn = interrupted_reply()
    at.session_state["chat-history"] = [turn]
    conversation.stop(at.session_state["chat-history"], 0, "a")  # what the reply's Stop button's callback does
    at.run()
    assert at.chat_message[1].markdown[0].value == literal(turn.replies["a"].reply.text)
    assert "stopped by you" in at.chat_message[1].caption[0].value


def test_chat_turns_edited_go_into_a_dataset_and_a_preference_into_a_dpo_dataset(form_run):
    store = get_manager().store
    at = open_page("chat")
    by_label(at.number_input, "Max tokens").set_value(6)
    at.run()
    at.chat_input[0].set_value("What is the capital of Quorvania?").run()
    at.session_state["chat-data-editor-a-1"] = {
        "edited_rows": {0: {"Reply": "Velmora."}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    click(at, "Add 1 turn")
    assert any(literal("Added 1 example to chat-examples (1 row now)") in s.value for s in at.success), shown_text(at)
    saved = next(d for d in store.list_datasets() if d["name"] == "chat-examples")
    rows = [json.loads(line) for line in Path(saved["path"]).read_text().splitlines()]
    assert rows == [
        {
            "messages": [
                {"role": "user", "content": "What is the capital of Quorvania?"},
                {"role": "assistant", "content": "Velmora."},
            ]
        }
    ]

    checkpoint = next(t for t in chat.list_targets() if t.run_id == form_run["run_id"] and t.kind == "checkpoint")
    by_label(at.toggle, "Side by side").set_value(True).run()
    by_label(at.selectbox, "Right model").set_value(checkpoint.key).run()
    answers = {"a": "It is in the north.", "b": "Velmora is the capital of Quorvania."}
    turn = conversation.Turn(
        "Where is Velmora?",
        {
            pane: conversation.PaneReply(
                chat.base_target() if pane == "a" else checkpoint, chat.Reply(text, finish="stop")
            )
            for pane, text in answers.items()
        },
    )
    at.session_state["chat-history"] = [turn]
    at.run()
    prefer = [b for b in at.button if b.label == "Prefer this reply"]
    assert len(prefer) == 2  # one under each reply
    prefer[1].click().run()
    assert not at.exception, [e.value for e in at.exception]
    pairs = next(d for d in store.list_datasets() if d["name"] == "chat-preferences")
    assert pairs["kind"] == "preference" and pairs["num_rows"] == 1
    from cookbook_engine.data import loading as datasets

    train, _ = datasets.load_preference_dataset(pairs["path"], test_fraction=0.0)
    assert len(train) == 1 and train[0].prompt[-1]["content"] == "Where is Velmora?"
    assert train[0].chosen[0]["content"] == answers["b"] and train[0].rejected[0]["content"] == answers["a"]
    assert "preferred" in shown_text(at) and not [b for b in at.button if b.label == "Prefer this reply"]


def test_chat_with_live_weights_of_a_run_before_its_first_save_then_stop_and_resume(studio_home):
    manager = get_manager()
    config = SLConfig(name="long-run", max_steps=400, batch_size=2, save_every=0, eval_every=0, test_fraction=0.0)
    run_id = manager.start(config)
    wait_for(lambda: (manager.store.get_run(run_id)["step"] or 0) >= 1, what="the run's first step")
    assert not manager.store.list_checkpoints(run_id)  # it saves only at the end: nothing on disk to load

    at = open_page("run", run=run_id)
    click(at, "Chat with it")  # a running run's page opens the chat on its latest weights
    latest = f"latest:{run_id}"
    assert [t.value for t in at.title] == ["Chat"] and by_label(at.selectbox, "Model").value == latest
    at.switch_page("../pages/chat.py")  # AppTest reruns the page it was last sent to, not one the app switched to
    by_label(at.number_input, "Max tokens").set_value(12)
    at.run()
    at.chat_input[0].set_value("Hello!").run()
    assert not at.exception and not at.error, shown_text(at)
    assert at.chat_message[1].markdown[0].value  # a reply, from weights that were never saved
    note = at.chat_message[1].caption[0].value
    assert "live weights of long" in note and int(re.search(r"at step (\d+)", note).group(1)) >= 1

    # the live weights are the run's, not the base model's: they score the same text differently
    weights = chat.open_weights(next(t for t in chat.list_targets() if t.key == latest))
    assert weights.source == "live" and weights.step >= 1
    tokens = weights.client.get_tokenizer().encode("The capital of Quorvania is Velmora.")
    prompt = types.ModelInput.from_ints(tokens)
    live_T = weights.client.compute_logprobs(prompt).result()[1:]
    base_T = chat.open_weights(chat.base_target()).client.compute_logprobs(prompt).result()[1:]
    assert max(abs(a - b) for a, b in zip(live_T, base_T)) > 1e-4
    assert not manager.store.list_checkpoints(run_id)  # the snapshot saved nothing

    at = open_page("run", run=run_id)
    assert any(run_id in str(v) for v in at.query_params.values())
    click(at, "Stop")
    stopped = manager.wait(run_id, timeout=180)
    assert stopped["status"] == "cancelled"
    stopped_at = stopped["step"]
    at = open_page("run", run=run_id)
    click(at, "Resume")
    assert any(literal("Resumed long-run") in s.value for s in at.success)
    wait_for(lambda: (manager.store.get_run(run_id)["step"] or 0) > stopped_at, what="the resumed run's next step")
    manager.cancel(run_id)
    assert manager.wait(run_id, timeout=180)["status"] == "cancelled"


def test_chat_with_a_run_training_in_another_process_uses_its_newest_saved_weights(form_run, studio_home):
    store = get_manager().store
    run_id = "sl-cli-elsewhere"
    fake_cli_run(store, run_id, "cli-run", studio_home / "runs" / run_id, save_every=5)
    try:
        at = open_page("chat")
        by_label(at.selectbox, "Model").set_value(f"latest:{run_id}").run()
        by_label(at.number_input, "Max tokens").set_value(12)
        at.run()
        at.chat_input[0].set_value("Hello!").run()
        assert any(
            literal("it trains in another process") in e.value and "saved none yet" in e.value for e in at.error
        ), shown_text(at)

        # the CLI process saves its first checkpoint (here: the sampler weights the form's run saved)
        final = next(c for c in store.list_checkpoints(form_run["run_id"]) if c.get("sampler_path"))
        RunLogger(store, run_id, studio_home / "runs" / run_id).log_checkpoint(
            step=5,
            name="000005",
            kind="both",
            state_path=final["state_path"],
            sampler_path=final["sampler_path"],
            loop_state={"batch": 5},
        )
        at = open_page("chat")
        by_label(at.selectbox, "Model").set_value(f"latest:{run_id}").run()
        by_label(at.number_input, "Max tokens").set_value(12)
        at.run()
        at.chat_input[0].set_value("Hello!").run()
        assert not at.exception and not at.error, shown_text(at)
        assert at.chat_message[1].markdown[0].value
        assert literal("newest saved weights, step 5") in at.chat_message[1].caption[0].value
    finally:
        store.update_run(run_id, status="cancelled")


# ---------------------------------------------------------------------------------------------- datasets


def test_upload_is_validated_with_row_numbers_previewed_and_tokenized(studio_home):
    at = open_page("datasets")
    bad = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n{oops\n'
    at.file_uploader[0].upload("broken.jsonl", bad).run()
    by_label(at.text_input, "Name").set_value("broken")
    click(at, "Validate and add")
    assert any("line 2: invalid JSON" in c.value for c in at.code), shown_text(at)
    assert not any(d["name"] == "broken" for d in get_manager().store.list_datasets())

    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Say <i>{i}</i>"},
                {"role": "assistant", "content": f"<script>alert({i})</script>"},
            ]
        }
        for i in range(5)
    ]
    good = "\n".join(json.dumps(r) for r in rows).encode()
    at = open_page("datasets")
    at.file_uploader[0].upload("tiny-chat.jsonl", good).run()
    by_label(at.text_input, "Name").set_value("tiny-chat")
    click(at, "Validate and add")
    assert any(literal("Added tiny-chat: 5 chat rows") in s.value for s in at.success), shown_text(at)
    assert by_label(at.selectbox, "Dataset").value == "upload:tiny-chat"
    preview = at.dataframe[0].value
    assert len(preview) == 5 and "assistant: <script>alert(0)</script>" in preview.iloc[0]["messages"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Examples"] == "5" and int(metrics["Trained tokens"]) > 0
    assert int(metrics["Total tokens"].replace(",", "")) > int(metrics["Trained tokens"])
    assert len(at.get("plotly_chart")) == 1  # the length histogram
    assert not any("<script>" in m.value for m in at.markdown)  # uploaded text never reaches markdown raw
    assert any("tiny-chat" == d["name"] for d in get_manager().store.list_datasets())


def test_upload_name_and_bad_rows_with_markdown_and_html_are_shown_literally(studio_home):
    hostile = "**bold** <script>"
    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        {"messages": [{"role": hostile, "content": "x"}]},
    ]
    at = open_page("datasets")
    at.file_uploader[0].upload(f"{hostile}.jsonl", "\n".join(json.dumps(r) for r in rows).encode()).run()
    assert by_label(at.text_input, "Name").value == hostile  # the default name comes from the file name
    by_label(at.text_input, "Name").set_value("hostile-bad")
    click(at, "Validate and add")
    assert any(f"unknown role '{hostile}'" in c.value for c in at.code), shown_text(at)  # the bad row, as text
    assert [status.state for status in at.status] == ["error"]

    at = open_page("datasets")
    at.file_uploader[0].upload(f"{hostile}.jsonl", json.dumps(rows[0]).encode()).run()
    click(at, "Validate and add")
    assert any(literal(f"Added {hostile}: 1 chat rows") in s.value for s in at.success), shown_text(at)
    assert any(literal(f"from {hostile}.jsonl") in c.value for c in at.caption)
    markdown = [
        e.value for kind in ("markdown", "caption", "success", "error", "warning", "info") for e in getattr(at, kind)
    ] + [block.label for block in [*at.status, *at.expander]]
    assert not any("<script>" in text or "**bold**" in text for text in markdown)


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

    adapter = next(
        c for c in get_manager().store.list_checkpoints(form_run["run_id"]) if (c.get("loop_state") or {}).get("final")
    )["sampler_path"]
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
