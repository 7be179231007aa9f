"""Bad input through the two front doors: every file of the bad-input corpus (tests/bad_inputs/, the same files
test_datasets.py feeds to the loaders) and every bad setting is refused by the `cookbook` command line with exit
code 2 and one line naming the file or setting and the problem, and by the studio (the Datasets upload and the
New run form) with the same message on screen; neither writes anything: no run row, no run folder, no upload."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_studio_apptest import by_label, click  # the studio tests' helpers

from cookbook_engine import cli
from cookbook_engine.sl import suggested
from storage import Store

REPO = Path(__file__).resolve().parent.parent
MAIN = REPO / "app" / "main.py"
BAD_INPUTS = Path(__file__).parent / "bad_inputs"
EXPECTED = json.loads((BAD_INPUTS / "EXPECTED.json").read_text())
COMMAND = {"chat": ["sl"], "preference": ["dpo"], "rl": ["rl", "env=custom"]}


def nothing_written(home: Path) -> None:
    """No run row, no run folder, no saved upload, no registered dataset."""
    if (home / "studio.duckdb").exists():
        store = Store(home / "studio.duckdb")
        assert store.list_runs() == [] and store.list_datasets() == []
    for folder in ("runs", "uploads"):
        assert not (home / folder).exists() or not any((home / folder).iterdir()), f"{folder}/ is not empty"


def cli_error(capsys, *args: str) -> str:
    """The one stderr line of a refused `cookbook ...` (exit code 2, nothing on stdout)."""
    assert cli.main(list(args)) == cli.EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("cookbook: error: "), err
    return lines[0]


def test_the_corpus_covers_the_kinds_the_issue_names():
    names = set(EXPECTED)
    assert len(names) >= 20
    for needed in (
        "huge_line.jsonl",
        "wrong_columns.parquet",
        "wrong_columns.csv",
        "binary.jsonl",
        "empty.jsonl",
        "non_utf8.jsonl",
        "invalid_json_middle.jsonl",
        "unknown_role.jsonl",
        "pref_missing_chosen.jsonl",
        "rl_missing_answer.jsonl",
    ):
        assert needed in names


# ---------------------------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("file_name", sorted(EXPECTED))
def test_cli_refuses_every_corpus_file_in_one_line_and_writes_nothing(home, default_model_ready, capsys, file_name):
    kind, expected_text = EXPECTED[file_name]
    line = cli_error(capsys, *COMMAND[kind], f"dataset={BAD_INPUTS / file_name}")
    assert line.startswith(f"cookbook: error: {file_name}: ") and expected_text in line, line
    nothing_written(home)


@pytest.mark.parametrize(
    "args, message",
    [
        (["sl", "learning_rate=0"], "learning_rate=0.0: must be positive"),
        (["dpo", "learning_rate=-0.001"], "learning_rate=-0.001: must be positive"),
        (["rl", "group_size=1"], "group_size=1: must be at least 2"),
        (["sl", "model=no-such-org/NoSuchModel-7B"], "NoSuchModel-7B"),
        (["sl", "renderer=klingon"], "renderer 'klingon' is unknown"),
        (["sl", "max_length=16", "overlong=drop"], "no example fits max_length=16"),
        (["rl", "train_attn=false", "train_mlp=false"], "both false leaves LoRA nothing to train"),
    ],
)
def test_cli_refuses_bad_settings_in_one_line_and_writes_nothing(home, default_model_ready, capsys, args, message):
    line = cli_error(capsys, *args)
    assert message in line, line
    nothing_written(home)


def test_learning_rate_auto_is_the_suggested_rate(home, default_model_ready, capsys):
    assert cli.main(["sl", "learning_rate=auto", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n# ")[0])["learning_rate"] is None
    from cookbook_engine import config as cfg
    from cookbook_engine.training.learning_rate import model_rate

    assert model_rate(cfg.SLConfig().model, "local")[0] == pytest.approx(1e-3)  # the default model's suggestion
    assert cfg.from_dict("sl", {"learning_rate": 0.0}).learning_rate is None  # runs saved when 0 meant "suggested"


# ---------------------------------------------------------------------------------------------- the studio


def open_page(page: str, **session) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    for key, value in session.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(f"../pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors_shown(at: AppTest) -> str:
    """The error notices and code blocks on the page, as a person reads them (markdown escapes removed)."""
    text = "\n".join([str(e.value) for e in at.error] + [str(c.value) for c in at.code])
    return re.sub(r"\\(.)", r"\1", text)


@pytest.mark.parametrize("file_name", sorted(EXPECTED))
def test_studio_upload_refuses_every_corpus_file_and_saves_nothing(home, file_name):
    kind, expected_text = EXPECTED[file_name]
    at = open_page("datasets")
    at.file_uploader[0].upload(file_name, (BAD_INPUTS / file_name).read_bytes()).run()
    by_label(at.selectbox, "Kind").set_value(kind).run()
    by_label(at.text_input, "Name").set_value("bad")
    click(at, "Validate and add")
    shown = errors_shown(at)
    assert f"{file_name} cannot be used yet" in shown and f"{file_name}: " in shown and expected_text in shown, shown
    nothing_written(home)


@pytest.mark.parametrize(
    "file_name",
    [
        "unknown_role.jsonl",
        "pref_missing_chosen.jsonl",
        "rl_missing_answer.jsonl",
        "huge_line.jsonl",
        "wrong_columns.parquet",
    ],
)
def test_studio_new_run_form_refuses_corpus_files_before_any_run(home, default_model_ready, file_name):
    kind, expected_text = EXPECTED[file_name]
    run_kind = {"chat": "sl", "preference": "dpo", "rl": "rl"}[kind]
    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value(run_kind).run()
    label = "Dataset source"
    if run_kind == "rl":
        by_label(at.get("button_group"), "Environment").set_value("custom").run()
        label = "Problems source"
    by_label(at.get("button_group"), label).set_value("File path").run()
    by_label(at.text_input, "Data file").set_value(str(BAD_INPUTS / file_name))
    click(at, "Start run")
    shown = errors_shown(at)
    assert f"{file_name}: " in shown and expected_text in shown, shown
    assert "run" not in at.query_params
    nothing_written(home)


def form_error(at: AppTest) -> str:
    click(at, "Check settings")
    assert "Ready to start" not in "\n".join(s.value for s in at.success)
    return errors_shown(at)


def test_studio_form_refuses_bad_settings_with_one_message_each(home, default_model_ready, monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    at = open_page("new_run")
    learning_rate = by_label(at.number_input, "Learning rate")
    assert learning_rate.value is None  # empty = the suggested rate (learning_rate=auto)
    measured = suggested.MEASURED[("sl", "builtin:facts")].learning_rate  # the default data's measured rate
    assert f"Suggested learning rate for SmolLM2-135M-Instruct: **{measured:g}**" in "\n".join(
        c.value for c in at.caption
    )
    learning_rate.set_value(0.0)
    assert "learning_rate=0.0: must be positive" in form_error(at)

    at = open_page("new_run")
    by_label(at.get("button_group"), "Algorithm").set_value("rl").run()
    assert by_label(at.number_input, "Group size").min == 2  # the widget itself refuses a group of one

    at = open_page("new_run")
    by_label(at.selectbox, "Model").set_value("folder").run()
    by_label(at.text_input, "Model folder").set_value("/no/such/model-folder").run()
    assert any("/no/such/model-folder" in w.value for w in at.warning), [w.value for w in at.warning]
    assert "/no/such/model-folder" in form_error(at)

    # the renderer is a closed list in the form; a run copied with an unknown one falls back to a known one
    at = open_page("new_run", new_run_base={"kind": "sl", "name": "old", "config": {"renderer": "klingon"}})
    assert by_label(at.selectbox, "Renderer").value in ("auto", "role_colon", "chatml")

    tinker_copy = {"kind": "sl", "name": "hosted", "config": {"backend": "tinker", "model": "Qwen/Qwen3-8B"}}
    at = open_page("new_run", new_run_base=tinker_copy)
    missing_key = form_error(at)
    monkeypatch.setenv("TINKER_API_KEY", "sk-not-a-tinker-key")
    at = open_page("new_run", new_run_base=tinker_copy)
    wrong_key = form_error(at)
    assert "No Tinker API key" in missing_key
    assert "tml-" in wrong_key and "sk-not-a-tinker-key" not in wrong_key and wrong_key != missing_key
    nothing_written(home)
