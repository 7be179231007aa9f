"""Experiment trackers (`log_to=wandb,mlflow,tensorboard`): a short real SL run logs its settings, every metric as
written to metrics.jsonl and its checkpoints' paths to all three, each read back offline with the tracker's own
files and reader (W&B's offline run file, an MLflow file store through MlflowClient, TensorBoard's event files
through its EventAccumulator); a tracker that is not installed is refused before anything is written, naming the
package; a tracker that fails mid-run is dropped and training goes on."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from cookbook_engine import cli, config as cfg, trackers
from cookbook_engine.runs import RunManager
from cookbook_engine.training.run_logger import RunLogger
from storage import Store

WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu"]


def tiny_chat_file(folder: Path) -> Path:
    path = folder / "tiny.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "completion": w}) for w in WORDS))
    return path


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------ the trackers' readers


def wandb_records(run_file: Path):
    """The records of a W&B run file (`run-<id>.wandb`: LevelDB's log format, W&B's protobuf Records)."""
    from wandb.proto import wandb_internal_pb2

    data, block = run_file.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    position, pending = 7, b""
    while position < len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        position += 7
        if length == 0 and kind == 0:
            position += left - 7
            continue
        pending += data[position : position + length]
        position += length
        if kind in (1, 4):  # a full record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def read_wandb(log_dir: Path) -> tuple[dict[int, dict[str, float]], dict, dict]:
    """(metrics by step, config, summary) of the one offline W&B run in a run folder."""
    (run_file,) = (log_dir / "wandb").glob("offline-run-*/run-*.wandb")
    history: dict[int, dict[str, float]] = {}
    config: dict = {}
    summary: dict = {}
    for record in wandb_records(run_file):
        which = record.WhichOneof("record_type")
        if which == "history":
            row = {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
            history.setdefault(row.pop("_step"), {}).update(
                {key: value for key, value in row.items() if not key.startswith("_")}
            )
        elif which in ("run", "config"):
            updates = record.run.config.update if which == "run" else record.config.update
            config.update({item.key: json.loads(item.value_json) for item in updates})
        elif which == "summary":
            summary.update({item.key: json.loads(item.value_json) for item in record.summary.update if item.key})
    return history, config, summary


def read_mlflow(uri: str, run_id: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(trackers.DEFAULT_PROJECT)
    (run,) = client.search_runs([experiment.experiment_id], f"tags.`cookbook.run_id` = '{run_id}'")
    history = {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in run.data.metrics
    }
    return run, history


def read_tensorboard(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(log_dir / trackers.TENSORBOARD_FOLDER), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    texts = {
        tag.removesuffix("/text_summary"): tensor_util.make_ndarray(events.Tensors(tag)[-1].tensor_proto)
        .item()
        .decode()
        for tag in events.Tags()["tensors"]
    }
    return scalars, texts


# ------------------------------------------------------------------------------------------ a real run, all three


def assert_logged_everywhere(
    log_dir: Path, store_uri: str, run_id: str, expected: dict[int, dict], saved: list[dict], config: dict
) -> None:
    """W&B, MLflow and TensorBoard each hold `expected` (metrics by step), the settings and the checkpoints' paths."""
    history, wandb_config, summary = read_wandb(log_dir)
    assert history == expected  # every metric at every step, the same floats
    assert wandb_config["run_id"] == run_id and wandb_config["learning_rate"] == config["learning_rate"]
    assert wandb_config["log_to"] == config["log_to"]
    for checkpoint in saved:
        assert summary[f"checkpoint/{checkpoint['name']}/sampler_path"] == checkpoint["sampler_path"]
        assert summary[f"checkpoint/{checkpoint['name']}/state_path"] == checkpoint["state_path"]

    mlflow_run, mlflow_history = read_mlflow(store_uri, run_id)
    by_key: dict[str, dict[int, float]] = {}
    for step, row in expected.items():
        for key, value in row.items():
            by_key.setdefault(trackers.mlflow_key(key), {})[step] = value
    assert mlflow_history == by_key
    assert mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.params["batch_size"] == str(config["batch_size"])
    assert mlflow_run.data.params["dataset"] == config["dataset"]
    assert mlflow_run.data.tags[f"checkpoint/{saved[-1]['name']}/sampler_path"] == saved[-1]["sampler_path"]

    scalars, texts = read_tensorboard(log_dir)
    assert set(scalars) == {key for row in expected.values() for key in row}
    for key, steps in scalars.items():  # TensorBoard keeps float32
        assert steps.keys() == {step for step, row in expected.items() if key in row}, key
        assert all(math.isclose(value, expected[step][key], rel_tol=1e-6) for step, value in steps.items()), key
    assert json.loads(texts["config"])["model"] == config["model"]
    assert json.loads(texts[f"checkpoint/{saved[-1]['name']}"])["sampler_path"] == saved[-1]["sampler_path"]


def offline_trackers(monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def test_the_run_logger_writes_each_step_to_all_three_trackers_as_to_metrics_jsonl(home, tmp_path, monkeypatch):
    """The logger alone (no model): what metrics.jsonl gets, each tracker gets, NaN left out."""
    offline_trackers(monkeypatch)
    store_uri = (tmp_path / "mlruns").as_uri()
    config = cfg.to_dict(
        cfg.SLConfig(learning_rate=1e-3, log_to="wandb,mlflow,tensorboard", mlflow_tracking_uri=store_uri)
    )
    store = Store.default()
    store.create_run("sl-t", name="t", kind="sl", backend="local", base_model="m", config=config, log_dir=str(tmp_path))
    logger = RunLogger(store, "sl-t", tmp_path)
    settings = trackers.TrackerSettings(
        ("wandb", "mlflow", "tensorboard"), "sl-t", "t", "sl", tmp_path, mlflow_tracking_uri=store_uri
    )
    logger.open_trackers(settings, {"run_id": "sl-t", "kind": "sl", **config}, lambda note: None)
    assert [sink.name for sink in logger.sinks] == ["wandb", "mlflow", "tensorboard"]
    logger.log_metrics(0, {"train_mean_nll": 2.5, "learning_rate": 1e-3, "test/eval.jsonl/accuracy": float("nan")})
    logger.log_metrics(1, {"train_mean_nll": 1.25, "learning_rate": 5e-4})
    logger.log_checkpoint(step=2, name="final", kind="both", state_path="/s/final", sampler_path="/w/final")
    logger.log_metrics(2, {"train_mean_nll": 0.75, "test/nll": 1.5})
    logger.close("completed")
    written = {row.pop("step"): row for row in jsonl(tmp_path / "metrics.jsonl")}
    assert written[0]["test/eval.jsonl/accuracy"] is None
    expected = {step: {k: v for k, v in row.items() if v is not None} for step, row in written.items()}
    assert_logged_everywhere(tmp_path, store_uri, "sl-t", expected, jsonl(tmp_path / "checkpoints.jsonl"), config)


@pytest.mark.slow  # ~35 s on a 2-core CPU; the test above checks the same three readers in CI
def test_a_short_sl_run_logs_metrics_config_and_checkpoints_to_wandb_mlflow_and_tensorboard(
    home, default_model_ready, tmp_path, monkeypatch
):
    offline_trackers(monkeypatch)
    store_uri = (tmp_path / "mlruns").as_uri()
    config = cfg.parse_overrides(
        "sl",
        [
            f"dataset={tiny_chat_file(tmp_path)}",
            "max_steps=2",
            "batch_size=2",
            "max_length=64",
            "lora_rank=4",
            "test_fraction=0.25",
            "eval_every=0",
            "save_every=1",
            "log_to=wandb,mlflow,tensorboard",
            "wandb_name=tracked-sl",
            f"mlflow_tracking_uri={store_uri}",
        ],
    )
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    log_dir = Path(run["log_dir"])
    written = {row.pop("step"): row for row in jsonl(log_dir / "metrics.jsonl")}
    expected = {step: {k: v for k, v in row.items() if v is not None} for step, row in written.items()}
    saved = jsonl(log_dir / "checkpoints.jsonl")
    assert [c["batch"] for c in saved] == [1, 2] and "test/nll" in expected[2] and "train_mean_nll" in expected[0]
    assert "logging to wandb, mlflow, tensorboard" in (log_dir / "log.txt").read_text()

    assert_logged_everywhere(log_dir, store_uri, run_id, expected, saved, cfg.to_dict(config))


# ------------------------------------------------------------------------------------------ refused before anything


def test_a_tracker_that_is_not_installed_is_refused_by_the_check_naming_the_package(home, monkeypatch, capsys):
    real = trackers.installed
    monkeypatch.setattr(trackers, "installed", lambda name: name != "mlflow" and real(name))
    assert trackers.problems("tensorboard, mlflow") == [
        "log_to=mlflow: the mlflow package is not installed; install it with `pip install mlflow-skinny` "
        f"(or all trackers: {trackers.INSTALL_HINT})"
    ]
    assert trackers.problems("neptune") == [
        "log_to=neptune: 'neptune' is not a tracker; choose from wandb, mlflow, tensorboard"
    ]
    for kind in cfg.CONFIG_TYPES:  # every run kind, from the command line (the form and sweeps build the same config)
        teacher = ["teacher=base"] if kind == "distill" else []
        assert cli.main([kind, "log_to=mlflow", *teacher, "--dry-run"]) == 2
        assert "pip install mlflow-skinny" in capsys.readouterr().err
    assert cli.main(["sl", "log_to=mlflow", "max_steps=1"]) == 2  # not a dry run: still nothing is written
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_wandb_project_alone_turns_wandb_on_as_in_tinker_cookbook():
    assert trackers.requested("", "my-project") == ["wandb"]
    assert trackers.requested("tensorboard,wandb", "p") == ["tensorboard", "wandb"]
    assert trackers.requested("") == []


def test_mlflow_keys_are_names_mlflow_accepts():
    assert trackers.mlflow_key("test//tmp/x.jsonl/accuracy") == "test/tmp/x.jsonl/accuracy"
    assert trackers.mlflow_key("env/all/correct") == "env/all/correct"
    assert trackers.mlflow_key("a@b/../c") == "a_b/c"


def test_a_sweep_passes_log_to_to_every_member(home):
    from cookbook_engine.evals import sweeps

    plan = sweeps.plan(
        {"kind": "sl", "base": {"log_to": ["tensorboard", "wandb"]}, "grid": {"lora_rank": [4, 8]}, "evals": []}
    )
    assert [member.config.log_to for member in plan.members] == ["tensorboard,wandb"] * 2


# ------------------------------------------------------------------------------------------ failures mid-run


class Flaky:
    """A tracker that works for `good` metric calls, then raises."""

    name = "flaky"

    def __init__(self, good: int) -> None:
        self.good, self.steps, self.closed = good, [], False

    def log_config(self, config):
        pass

    def log_metrics(self, step, metrics):
        if len(self.steps) >= self.good:
            raise ConnectionError("tracker server went away")
        self.steps.append(step)

    def log_checkpoint(self, step, record):
        pass

    def close(self, status):
        self.closed = True


def test_a_tracker_failing_mid_run_is_dropped_and_logging_goes_on(home, tmp_path, monkeypatch, caplog):
    flaky, steady = Flaky(good=2), Flaky(good=100)
    sinks = iter([flaky, steady])
    monkeypatch.setattr(trackers, "open_sink", lambda name, settings: next(sinks))
    store = Store.default()
    store.create_run("sl-x", name="x", kind="sl", backend="local", base_model="m", config={}, log_dir=str(tmp_path))
    logger = RunLogger(store, "sl-x", tmp_path)
    notes: list[str] = []
    settings = trackers.TrackerSettings(("wandb", "tensorboard"), "sl-x", "x", "sl", tmp_path)
    logger.open_trackers(settings, {"kind": "sl"}, notes.append)
    for step in range(5):
        logger.log_metrics(step, {"loss": 1.0 / (step + 1)})
    logger.close("completed")
    assert [row["step"] for row in jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert flaky.steps == [0, 1] and not flaky.closed  # dropped at its first failure
    assert steady.steps == [0, 1, 2, 3, 4] and steady.closed
    assert any("tracker flaky: log_metrics failed (ConnectionError" in note for note in notes), notes
    assert "experiment tracker flaky failed in log_metrics" in caplog.text and "Traceback" in caplog.text


def test_a_tracker_that_cannot_start_leaves_the_run_going(home, tmp_path, monkeypatch):
    def refuse(name, settings):
        raise RuntimeError("api_key not configured (no-tty)")

    monkeypatch.setattr(trackers, "open_sink", refuse)
    logger = RunLogger(Store.default(), "sl-y", tmp_path)
    notes: list[str] = []
    logger.open_trackers(trackers.TrackerSettings(("wandb",), "sl-y", "y", "sl", tmp_path), {}, notes.append)
    assert logger.sinks == [] and notes == [
        "tracker wandb: could not start (RuntimeError: api_key not configured (no-tty)); training goes on without it"
    ]


@pytest.mark.parametrize("kind", list(cfg.CONFIG_TYPES))
def test_every_run_kind_takes_the_tracker_settings_from_the_command_line(kind):
    config = cfg.parse_overrides(kind, ["log_to=tensorboard", "wandb_project=p", "wandb_name=n"])
    assert (config.log_to, config.wandb_project, config.wandb_name) == ("tensorboard", "p", "n")
    assert trackers.requested(config.log_to, config.wandb_project) == ["tensorboard", "wandb"]


# ------------------------------------------------------------------------------------------ the studio's forms


def studio_page(page: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app" / "main.py"), default_timeout=120)
    at.run()
    at.switch_page(f"../pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def labelled(elements, label: str):
    (element,) = [e for e in elements if e.label == label]
    return element


def test_the_new_run_form_offers_the_trackers_and_its_check_refuses_a_missing_one(
    home, default_model_ready, monkeypatch
):
    at = studio_page("new_run")
    labelled(at.multiselect, "Log to (experiment trackers)").set_value(["tensorboard", "wandb"])
    labelled(at.text_input, "W&B project").set_value("my-project")
    labelled(at.button, "Check settings").click().run()
    commands = [code.value for code in at.code if " sl " in code.value]
    assert any("log_to=tensorboard,wandb" in c and "wandb_project=my-project" in c for c in commands), commands
    real = trackers.installed
    monkeypatch.setattr(trackers, "installed", lambda name: name != "wandb" and real(name))
    labelled(at.button, "Check settings").click().run()
    assert any("pip install wandb" in error.value for error in at.error), [e.value for e in at.error]


def test_the_sweep_form_passes_the_trackers_to_its_members(home, default_model_ready):
    at = studio_page("sweeps")
    labelled(at.multiselect, "Log to (experiment trackers)").set_value(["mlflow"])
    next(button for button in at.button if button.label == "Check").click().run()  # the Form tab's (YAML's is second)
    assert not at.exception, [e.value for e in at.exception]
    assert any("log_to: mlflow" in code.value for code in at.code), [code.value for code in at.code]
