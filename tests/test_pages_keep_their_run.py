"""A page keeps the run (evaluation, sweep) it was opened for, under Streamlit's AppTest: an unknown or deleted id in
the address is named in an error and never replaced by the newest run, the address is not rewritten, and no button
(Delete, Chat with it, ...) acts on another run in its place; the Chat page's pickers never move to another run's
weights. Runs are made in storage directly (no model loads), so these run in seconds. The same promise with two
browser tabs: tests/test_browser_two_tabs.py."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from test_studio_apptest import MAIN, by_label, open_page, shown_text

from app import state_keys
from cookbook_engine import models
from cookbook_engine.runs import get_manager


def make_run(home, run_id: str, name: str, store=None) -> None:
    """A completed SL run with a final checkpoint folder, recorded in `store` (the engine's by default)."""
    store = store or get_manager().store
    store.create_run(
        run_id,
        name=name,
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={"renderer": "auto"},
        log_dir=home / "runs" / run_id,
        status="completed",
        total_steps=3,
    )
    folder = home / "checkpoints" / run_id / "final"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"0" * 1000)
    store.add_checkpoint(run_id, step=3, name="final", kind="sampler", sampler_path=str(folder))


@pytest.fixture
def two_runs(home):
    """run-old (opened in these tests) and run-new (the newest: what a silent fallback would show)."""
    make_run(home, "sl-old", "the-old-run")
    make_run(home, "sl-new", "the-new-run")
    return home


def errors(at: AppTest) -> list[str]:
    """Error boxes as a person reads them (their markdown escapes removed)."""
    return [e.value.replace("\\", "") for e in at.error]


def query(at: AppTest, key: str):
    value = at.query_params.get(key)
    return value[0] if isinstance(value, list) else value


def test_an_unknown_run_id_is_named_and_no_other_run_is_shown(two_runs):
    at = open_page("run", run="nope")
    assert errors(at) and "nope" in errors(at)[0]
    assert "the\\-new\\-run" not in shown_text(at) and "the-new-run" not in shown_text(at)
    assert not [b for b in at.button if b.label == "Delete"]  # nothing to act on
    assert query(at, "run") == "nope"  # the address is left as it was


@pytest.mark.parametrize("button", ["Delete", "Chat with it", "Duplicate"])
def test_a_run_deleted_in_another_tab_is_never_replaced_by_another(two_runs, button):
    at = open_page("run", run="sl-old")
    assert [t.value for t in at.title] == ["the\\-old\\-run"]
    get_manager().delete("sl-old")  # another tab deletes it
    by_label(at.button, button).click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("sl-old" in e for e in errors(at))
    assert state_keys.PENDING_DELETE not in at.session_state  # no delete dialog, for this run or any other
    assert state_keys.NEW_RUN_BASE not in at.session_state  # no New run form filled from another run
    assert get_manager().store.get_run("sl-new") is not None
    assert query(at, "run") == "sl-old"


def test_the_run_picker_writes_the_pick_into_the_address(two_runs):
    at = open_page("run")
    assert [t.value for t in at.title] == ["the\\-new\\-run"]  # no run named: the newest
    by_label(at.selectbox, "Run").set_value("sl-old").run()
    assert query(at, "run") == "sl-old"
    at.run()
    assert [t.value for t in at.title] == ["the\\-old\\-run"]
    get_manager().delete("sl-old")
    at.run()
    assert any("sl-old" in e for e in errors(at)) and not at.title


@pytest.mark.parametrize(("page", "key"), [("checkpoints", "run"), ("transcripts", "run")])
def test_other_run_pages_name_an_unknown_run(two_runs, page, key):
    at = open_page(page, **{key: "nope"})
    assert any("nope" in e for e in errors(at))
    assert not at.selectbox or all(s.value != "sl-new" for s in at.selectbox)


@pytest.mark.parametrize(("page", "key"), [("evaluate", "eval"), ("sweeps", "sweep")])
def test_an_unknown_evaluation_or_sweep_is_named(home, page, key):
    from storage.evals import EvalStore

    store = EvalStore()
    store.create_job(
        "ev-1", name="an-evaluation", models=["base"], eval_sets=["builtin:facts-probes"], settings={}, total=2
    )
    at = open_page(page, **{key: "nope"})
    assert any("nope" in e for e in errors(at))
    assert not [s for s in at.selectbox if s.label in ("Evaluation", "Sweep")]


def chat_page(session: dict) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=60)
    at.run()
    for key, value in session.items():
        at.session_state[key] = value
    at.switch_page("../pages/chat.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_chat_with_a_deleted_run_says_so_and_keeps_the_model(two_runs):
    get_manager().delete("sl-old")
    at = chat_page({state_keys.CHAT_TARGET_REQUEST: "sl-old"})
    assert any("sl-old" in w.value.replace("\\", "") for w in at.warning)
    assert by_label(at.selectbox, "Model").value.startswith("base:")  # not the other run's checkpoint


def test_a_chosen_checkpoint_deleted_elsewhere_becomes_the_base_model_with_a_warning(two_runs):
    at = chat_page({state_keys.CHAT_TARGET_REQUEST: "sl-old"})
    assert "sl-old" in by_label(at.selectbox, "Model").value
    get_manager().delete("sl-old")
    at.run()
    assert any("gone" in w.value for w in at.warning)
    assert by_label(at.selectbox, "Model").value.startswith("base:")
