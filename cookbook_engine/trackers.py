"""Experiment trackers a run logs to besides the studio's own store: Weights & Biases, MLflow and TensorBoard.

A run names them with `log_to=wandb,mlflow,tensorboard` (any subset; tinker-cookbook's `wandb_project=` alone turns
W&B on too, as it does there). Each tracker is a sink with four calls, made by the run logger as it writes
`metrics.jsonl` and `checkpoints.jsonl` (training/run_logger.py): `log_config` once when the run (or a resumed attempt
of it) starts, `log_metrics` per step, `log_checkpoint` per save, and `close` when the attempt ends.

- **wandb**: `wandb.init(project=wandb_project or "cookbook-studio", name=wandb_name or the run's name,
  dir=<run folder>)`, so its files land in `<run folder>/wandb/`; `WANDB_MODE=offline` keeps it off the network,
  `WANDB_ENTITY` picks the team. Metrics by `run.log(metrics, step=step)`, checkpoints' paths into the run summary
  (`checkpoint/<name>/state_path`, `.../sampler_path`).
- **mlflow**: a client on `mlflow_tracking_uri` (empty: `MLFLOW_TRACKING_URI`, else the file store
  `<home>/mlruns`, one store for every run of the home, which MLflow 3 keeps only with `MLFLOW_ALLOW_FILE_STORE=true`:
  set here for that default); experiment `mlflow_experiment`; settings as params, metrics with their step, checkpoints'
  paths as tags `checkpoint/<name>/state_path`.
- **tensorboard**: event files in `<run folder>/tensorboard/` (torch's SummaryWriter); metrics as scalars, the
  settings and each checkpoint as text (`config`, `checkpoint/<name>`).

Each resumed attempt of a run is a new tracker run (tagged with the studio's run id), since the attempt redoes the
steps after its checkpoint. `problems()` is the check made before a run starts: an unknown tracker name, or one whose
package is not installed, is refused naming the package to install. Not here: when to log (the loops), the studio's
own store (storage/), the fan-out and its failure handling (run_logger.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cookbook_engine import paths
from cookbook_engine.settings import flatten
from storage.statuses import RunStatus

# name -> (the module it imports, the package that provides it)
TRACKERS: dict[str, tuple[str, str]] = {
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "tensorboard": ("tensorboard", "tensorboard"),
}
TRACKER_NAMES = tuple(TRACKERS)
INSTALL_HINT = "pip install 'cookbook-studio[trackers]'"
DEFAULT_PROJECT = "cookbook-studio"  # W&B project and MLflow experiment when none is named
TENSORBOARD_FOLDER = "tensorboard"
MLFLOW_FOLDER = "mlruns"
# MLflow statuses of a run's end, by the studio's run status (anything else: FAILED)
MLFLOW_END: dict[str, str] = {
    RunStatus.COMPLETED: "FINISHED",
    RunStatus.CANCELLED: "KILLED",
    RunStatus.INTERRUPTED: "KILLED",
}


def parse(log_to: str) -> list[str]:
    """`"wandb, tensorboard"` -> `["wandb", "tensorboard"]` (lower case, in order, without repeats)."""
    return list(dict.fromkeys(name.strip().lower() for name in log_to.split(",") if name.strip()))


def requested(log_to: str, wandb_project: str = "") -> list[str]:
    """The trackers a run logs to: those `log_to` names, and wandb when a W&B project is named (tinker-cookbook's
    rule: `wandb_project` set means log to W&B)."""
    names = parse(log_to)
    if wandb_project.strip() and "wandb" not in names:
        names.append("wandb")
    return names


def installed(name: str) -> bool:
    return importlib.util.find_spec(TRACKERS[name][0]) is not None


def problems(log_to: str, wandb_project: str = "") -> list[str]:
    """Each tracker named that does not exist or is not installed, one message each naming what to do."""
    found = []
    for name in requested(log_to, wandb_project):
        if name not in TRACKERS:
            found.append(f"log_to={log_to}: {name!r} is not a tracker; choose from {', '.join(TRACKER_NAMES)}")
        elif not installed(name):
            module, package = TRACKERS[name]
            found.append(
                f"log_to={name}: the {module} package is not installed; install it with `pip install {package}` "
                f"(or all trackers: {INSTALL_HINT})"
            )
    return found


@dataclass(frozen=True)
class TrackerSettings:
    """What opening a run's trackers needs: which, the run, and each tracker's own settings."""

    names: tuple[str, ...]
    run_id: str
    run_name: str
    kind: str
    log_dir: Path
    wandb_project: str = ""
    wandb_name: str = ""
    mlflow_tracking_uri: str = ""
    mlflow_experiment: str = ""


class Sink(Protocol):
    name: str

    def log_config(self, config: dict[str, Any]) -> None: ...

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_checkpoint(self, step: int, record: dict[str, Any]) -> None: ...

    def close(self, status: str) -> None: ...


def open_sink(name: str, settings: TrackerSettings) -> Sink:
    """Start tracker `name` for the run (its own errors propagate: the caller logs them and goes on)."""
    if name == "wandb":
        return WandbSink(settings)
    if name == "mlflow":
        return MlflowSink(settings)
    if name == "tensorboard":
        return TensorBoardSink(settings)
    raise ValueError(f"{name!r} is not a tracker; choose from {', '.join(TRACKER_NAMES)}")


def finite(metrics: dict[str, float | None]) -> dict[str, float]:
    """The metrics trackers get: those with a value (NaN and inf were cleaned to None before)."""
    return {key: value for key, value in metrics.items() if value is not None}


def checkpoint_paths(record: dict[str, Any]) -> dict[str, str]:
    """`{"checkpoint/<name>/state_path": ..., "checkpoint/<name>/sampler_path": ...}` for the paths it has."""
    return {
        f"checkpoint/{record['name']}/{key}": str(record[key])
        for key in ("state_path", "sampler_path")
        if record.get(key)
    }


class WandbSink:
    name = "wandb"

    def __init__(self, settings: TrackerSettings) -> None:
        import wandb

        self.run = wandb.init(
            project=settings.wandb_project or DEFAULT_PROJECT,
            name=settings.wandb_name or settings.run_name,
            dir=str(settings.log_dir),
            tags=[settings.kind],
            config={"cookbook_run_id": settings.run_id},
            reinit="create_new",  # the studio trains several runs at once in one process: one W&B run each
        )

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_checkpoint(self, step: int, record: dict[str, Any]) -> None:
        self.run.summary.update({**checkpoint_paths(record), "checkpoint/latest": record["name"]})

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == RunStatus.COMPLETED else 1)


_MLFLOW_BAD_CHARACTERS = re.compile(r"[^\w./\- :]")


def mlflow_key(name: str) -> str:
    """A metric or tag name MLflow accepts: other characters become `_`, no empty, `.` or `..` path parts (a metric
    named after an eval file, `test//data/x.jsonl/accuracy`, becomes `test/data/x.jsonl/accuracy`)."""
    parts = [part for part in _MLFLOW_BAD_CHARACTERS.sub("_", name).split("/") if part not in ("", ".", "..")]
    return "/".join(parts) or "_"


def mlflow_tracking_uri(configured: str) -> str:
    """The tracking URI a run logs to: the setting, else MLFLOW_TRACKING_URI, else the home's file store."""
    uri = configured.strip() or os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri:
        return uri
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps file stores behind this switch
    return (paths.home() / MLFLOW_FOLDER).resolve().as_uri()


class MlflowSink:
    name = "mlflow"
    MAX_BATCH = 100  # params per log_batch call (MLflow's limit); metrics go 1,000 at most

    def __init__(self, settings: TrackerSettings) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=mlflow_tracking_uri(settings.mlflow_tracking_uri))
        experiment_name = settings.mlflow_experiment or DEFAULT_PROJECT
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = (
            experiment.experiment_id if experiment is not None else self.client.create_experiment(experiment_name)
        )
        self.run_id = self.client.create_run(
            experiment_id,
            run_name=settings.run_name,
            tags={"cookbook.run_id": settings.run_id, "cookbook.kind": settings.kind},
        ).info.run_id

    def log_config(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(mlflow_key(key), _param_text(value)) for key, value in flatten(config).items()]
        for start in range(0, len(params), self.MAX_BATCH):
            self.client.log_batch(self.run_id, params=params[start : start + self.MAX_BATCH])

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(key), value, now, step) for key, value in metrics.items()]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def log_checkpoint(self, step: int, record: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        tags = {**checkpoint_paths(record), "checkpoint/latest": str(record["name"])}
        self.client.log_batch(self.run_id, tags=[RunTag(mlflow_key(key), value) for key, value in tags.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, MLFLOW_END.get(status, "FAILED"))


def _param_text(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text[:6000]  # MLflow's longest param value


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self, settings: TrackerSettings) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(settings.log_dir / TENSORBOARD_FOLDER))

    def log_config(self, config: dict[str, Any]) -> None:
        self.writer.add_text("config", _markdown_json(config), 0)
        self.writer.flush()

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # as they are written: TensorBoard shows the step now, not at the writer's next flush

    def log_checkpoint(self, step: int, record: dict[str, Any]) -> None:
        self.writer.add_text(f"checkpoint/{record['name']}", _markdown_json(record), step)
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()


def _markdown_json(value: Any) -> str:
    """JSON as TensorBoard's text tab shows it (markdown: an indented block keeps it as typed)."""
    text = json.dumps(value, indent=2, default=str)
    return "\n".join("    " + line for line in text.splitlines())
