"""Sweeps: train several configurations in turn, evaluate each on the same eval sets, and end in one table.

A sweep file (YAML or JSON) is either a list of configurations or a base plus a grid:

    name: lr-and-rank          # optional
    kind: sl                   # the default kind of every member (sl, dpo, rl)
    base: {dataset: builtin:facts, max_steps: 20}
    grid: {learning_rate: [3e-4, 1e-3], lora_rank: [8, 32]}     # every combination: 4 members
    # or instead of grid:  configs: [{learning_rate: 1e-3}, {kind: dpo, dataset: builtin:concise-prefs}]
    evals: [builtin:facts-probes, builtin:facts-nll]
    max_examples: 0            # per eval set (0 = all)
    concurrency: 1             # members training at once (1 on a CPU: they share one model worker anyway)
    include_base: true         # also evaluate the base model, as the table's first row

Every member's settings are checked (as `cookbook sl --dry-run` does) before the sweep is recorded. The sweep then
runs on a daemon thread: members start in order up to `concurrency` at a time through the RunManager; each member
that completes is evaluated right away through the EvalManager (identical evaluations, such as the base model's,
reuse stored results); a failing member is marked failed with its error and the others go on. `cancel()` stops the
members in flight (they save a checkpoint); `resume()` continues a stopped sweep: finished members are kept, stopped
runs resume from their checkpoints, members never started start. `table()` gives one row per member: the settings
that differ, the final training metric and each eval set's headline metrics with intervals.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from cookbook_engine import config as cfg, priority
from cookbook_engine.evals import jobs, report, sets
from cookbook_engine.evals.evaluators import EvalSettings
from cookbook_engine.training.metric_names import key_metric
from storage import statuses
from storage.evals import EvalStore
from storage.input_error import InputError
from storage.statuses import RunStatus

POLL_S = 1.0
SPEC_KEYS = ("name", "kind", "base", "grid", "configs", "evals", "max_examples", "concurrency", "include_base")


class SweepError(InputError, ValueError):
    """A sweep file or member that cannot be used; the message names the file, the member and the setting."""


@dataclass
class Member:
    kind: str
    settings: dict  # as written in the file, merged onto the base
    config: cfg.CommonConfig


@dataclass
class SweepPlan:
    name: str
    members: list[Member]
    evals: list[str]
    eval_settings: EvalSettings
    concurrency: int = 1
    include_base: bool = True
    spec: dict = field(default_factory=dict)


def load_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise SweepError(f"{path}: no such sweep file")
    return parse_text(path.read_text(encoding="utf-8"), str(path), as_json=path.suffix.lower() == ".json")


def parse_text(text: str, where: str = "sweep", as_json: bool = False) -> dict:
    """A sweep spec from YAML (or JSON) text: a mapping, or a bare list of configurations."""
    import yaml

    try:
        data = json.loads(text) if as_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SweepError(f"{where}: not valid {'JSON' if as_json else 'YAML'}: {exc}") from None
    if isinstance(data, list):
        data = {"configs": data}
    if not isinstance(data, dict):
        raise SweepError(f"{where}: expected a mapping (base/grid/configs/evals) or a list of configurations")
    return data


def plan(spec: dict, where: str = "sweep") -> SweepPlan:
    """Expand and check a sweep spec; SweepError names the member and the setting at fault."""
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise SweepError(f"{where}: unknown keys {unknown}; known: {', '.join(SPEC_KEYS)}")
    if ("grid" in spec) == ("configs" in spec):
        raise SweepError(f"{where}: give either `grid` (a base plus values to combine) or `configs` (a list)")
    base = dict(spec.get("base") or {})
    variants = _grid(spec["grid"], where) if "grid" in spec else spec["configs"]
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        raise SweepError(f"{where}: `configs` must be a non-empty list of mappings")
    members = [
        _member(spec.get("kind", "sl"), base, variant, f"{where}, member {index}")
        for index, variant in enumerate(variants)
    ]
    evals = spec.get("evals") or []
    if isinstance(evals, str):
        evals = [e.strip() for e in evals.split(",") if e.strip()]
    settings = EvalSettings(max_examples=int(spec.get("max_examples", 0)))
    for name in evals:
        sets.load_eval_set(name, settings.max_examples)  # EvalSetError names a bad set now, not after training
    concurrency = int(spec.get("concurrency", 1))
    if concurrency < 1:
        raise SweepError(f"{where}: concurrency={concurrency}: must be at least 1")
    return SweepPlan(
        str(spec.get("name") or ""),
        members,
        list(evals),
        settings,
        concurrency,
        bool(spec.get("include_base", True)),
        spec,
    )


def _grid(grid, where: str) -> list[dict]:
    if not isinstance(grid, dict) or not grid:
        raise SweepError(f"{where}: `grid` must map settings to lists of values")
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    return [dict(zip(keys, combination)) for combination in itertools.product(*values)]


def _member(default_kind: str, base: dict, variant: dict, where: str) -> Member:
    merged = {**base, **variant}
    kind = str(merged.pop("kind", default_kind))
    words = [f"{key}={_setting_text(value)}" for key, value in merged.items()]
    try:
        config = cfg.parse_overrides(kind, words)
        cfg.check(config)
    except cfg.ConfigError as exc:
        raise SweepError(f"{where}: {exc}") from None
    return Member(kind, {"kind": kind, **merged}, config)


def _setting_text(value) -> str:
    """A setting's value as `key=value` writes it: booleans lower case, a list (`log_to: [wandb, mlflow]`,
    `evals: [...]`) comma-separated."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def varying_keys(members: list[dict]) -> list[str]:
    """The settings whose value is not the same in every member."""
    keys = list(dict.fromkeys(k for m in members for k in m["settings"]))
    return [k for k in keys if len({json.dumps(m["settings"].get(k), default=str) for m in members}) > 1]


# ------------------------------------------------------------------------------------------------ running


class SweepRunner:
    """Runs sweeps on daemon threads of this process, through the process's RunManager and EvalManager."""

    def __init__(self, run_manager=None, eval_manager=None, store: EvalStore | None = None):
        from cookbook_engine.runs import get_manager

        self.runs = run_manager or get_manager()
        self.evals = eval_manager or jobs.get_eval_manager()
        self.store = store or self.evals.store
        self._threads: dict[str, threading.Thread] = {}
        self._stop: dict[str, threading.Event] = {}
        self.notes: list[str] = []

    def start(self, sweep: SweepPlan) -> str:
        sweep_id = f"sweep-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        members = [{"kind": m.kind, "settings": m.settings, "config": cfg.to_dict(m.config)} for m in sweep.members]
        spec = {
            **sweep.spec,
            "evals": sweep.evals,
            "max_examples": sweep.eval_settings.max_examples,
            "concurrency": sweep.concurrency,
            "include_base": sweep.include_base,
        }
        self.store.create_sweep(sweep_id, name=sweep.name or sweep_id, spec=spec, members=members)
        self._launch(sweep_id)
        return sweep_id

    def resume(self, sweep_id: str) -> str:
        sweep = self.store.get_sweep(sweep_id)
        if sweep is None:
            raise SweepError(f"sweep {sweep_id}: not found")
        if self.is_alive(sweep_id):
            raise SweepError(f"sweep {sweep_id}: still running")
        if sweep["status"] == RunStatus.COMPLETED:
            raise SweepError(f"sweep {sweep_id}: already completed")
        self._launch(sweep_id)
        return sweep_id

    def cancel(self, sweep_id: str) -> None:
        if sweep_id in self._stop:
            self._stop[sweep_id].set()
        sweep = self.store.get_sweep(sweep_id)
        if sweep and sweep["status"] in statuses.STOPPABLE:
            self.store.update_sweep(sweep_id, status=RunStatus.CANCELLING)

    def wait(self, sweep_id: str, timeout: float | None = None) -> dict:
        thread = self._threads.get(sweep_id)
        if thread is not None:
            thread.join(timeout)
        return self._sweep(sweep_id)

    def is_alive(self, sweep_id: str) -> bool:
        thread = self._threads.get(sweep_id)
        return thread is not None and thread.is_alive()

    def _launch(self, sweep_id: str) -> None:
        self._stop[sweep_id] = threading.Event()
        thread = threading.Thread(target=self._execute, args=(sweep_id,), name=f"sweep:{sweep_id}", daemon=True)
        self._threads[sweep_id] = thread
        priority.start(thread)

    def _note(self, message: str) -> None:
        self.notes.append(message)

    def _sweep(self, sweep_id: str) -> dict:
        return _stored(self.store.get_sweep(sweep_id), f"sweep {sweep_id}")

    def _stopping(self, sweep_id: str) -> bool:
        if not self._stop[sweep_id].is_set() and self._sweep(sweep_id)["status"] == RunStatus.CANCELLING:
            self._stop[sweep_id].set()
        return self._stop[sweep_id].is_set()

    def _execute(self, sweep_id: str) -> None:
        try:
            self.store.update_sweep(sweep_id, status=RunStatus.RUNNING, error=None)
            sweep = self._sweep(sweep_id)
            if sweep["spec"].get("include_base", True) and sweep["spec"].get("evals"):
                self._evaluate(sweep, "base", None)
            self._train_all(sweep)
            stopped = self._stop[sweep_id].is_set()
            status = RunStatus.CANCELLED if stopped else RunStatus.COMPLETED
            self.store.update_sweep(sweep_id, status=status)
            self._note(f"sweep {sweep_id}: {status}")
        except BaseException as exc:  # the sweep fails; its members keep their own statuses
            self.store.update_sweep(sweep_id, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            self._note(f"sweep {sweep_id} failed: {type(exc).__name__}: {exc}")

    def _train_all(self, sweep: dict) -> None:
        sweep_id = sweep["sweep_id"]
        todo = [m for m in sweep["members"] if m["status"] != RunStatus.COMPLETED]
        active: dict[int, dict] = {}
        while (todo or active) and not self._stopping(sweep_id):
            while todo and len(active) < int(sweep["spec"].get("concurrency", 1)):
                member = todo.pop(0)
                if self._start_member(sweep_id, member):
                    active[member["idx"]] = member
            for index, member in list(active.items()):
                if not self.runs.is_alive(member["run_id"]):
                    del active[index]
                    self._finish_member(sweep, member)
            time.sleep(POLL_S if active else 0)
        for member in active.values():  # cancelled: stop the members in flight (each saves a checkpoint)
            self.runs.cancel(member["run_id"])
            run = _stored(self.runs.wait(member["run_id"]), f"run {member['run_id']}")
            self.store.update_member(sweep_id, member["idx"], status=run["status"])

    def _start_member(self, sweep_id: str, member: dict) -> bool:
        index = member["idx"]
        try:
            run = self.runs.store.get_run(member["run_id"]) if member.get("run_id") else None
            if run is not None and run["status"] == RunStatus.COMPLETED:
                return True  # trained before the sweep stopped; only its evaluation is missing
            if run is not None:
                self.runs.resume(member["run_id"])
            else:
                config = cfg.from_dict(member["kind"], member["config"])
                config.name = config.name or f"{self._sweep(sweep_id)['name']} #{index}"
                member["run_id"] = self.runs.start(config)
            self.store.update_member(sweep_id, index, status=RunStatus.RUNNING, run_id=member["run_id"], error=None)
            self._note(f"member {index}: run {member['run_id']} ({_settings_text(member['settings'])})")
            return True
        except Exception as exc:  # bad data, a missing checkpoint, ...: this member fails, the others go on
            self.store.update_member(sweep_id, index, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            self._note(f"member {index} failed to start: {exc}")
            return False

    def _finish_member(self, sweep: dict, member: dict) -> None:
        sweep_id, index = sweep["sweep_id"], member["idx"]
        run = _stored(self.runs.store.get_run(member["run_id"]), f"run {member['run_id']}")
        if run["status"] != RunStatus.COMPLETED:
            self.store.update_member(sweep_id, index, status=run["status"], error=run.get("error"))
            self._note(f"member {index}: run {run['status']}" + (f" ({run['error']})" if run.get("error") else ""))
            return
        try:
            eval_id = self._evaluate(sweep, member["run_id"], index) if sweep["spec"].get("evals") else None
        except Exception as exc:
            self.store.update_member(sweep_id, index, status=RunStatus.FAILED, error=f"evaluation: {exc}")
            return
        job = (
            _stored(self.store.get_job(eval_id), f"evaluation {eval_id}")
            if eval_id
            else {"status": RunStatus.COMPLETED}
        )
        status = RunStatus.COMPLETED if job["status"] == RunStatus.COMPLETED else RunStatus.FAILED
        self.store.update_member(
            sweep_id,
            index,
            status=status,
            eval_id=eval_id,
            error=None if status == RunStatus.COMPLETED else f"evaluation {job['status']}",
        )

    def _evaluate(self, sweep: dict, model: str, index: int | None) -> str:
        settings = EvalSettings(max_examples=int(sweep["spec"].get("max_examples", 0)))
        prepared = jobs.prepare(
            jobs.EvalRequest(
                [model],
                sweep["spec"]["evals"],
                settings,
                name=f"{sweep['name']} · {'base' if index is None else index}",
            )
        )
        eval_id = self.evals.start(prepared, echo=self._note, sweep_id=sweep["sweep_id"])
        self.evals.wait(eval_id)
        return eval_id


_runner: SweepRunner | None = None
_runner_lock = threading.Lock()


def _stored(row: dict | None, what: str) -> dict:
    """A row this runner wrote itself (its sweep, a member's run, an evaluation); missing means the store lost it."""
    if row is None:
        raise LookupError(f"{what} is not in the studio's store")
    return row


def get_sweep_runner() -> SweepRunner:
    """The process-wide SweepRunner (the studio's; the CLI makes its own), for the home folder of the moment."""
    from cookbook_engine.runs import get_manager

    global _runner
    with _runner_lock:
        evals = jobs.get_eval_manager()
        if _runner is None or _runner.evals is not evals:
            _runner = SweepRunner(get_manager(child_processes=True), eval_manager=evals)  # members train apart
        return _runner


EXAMPLE = """name: learning-rates
kind: sl
base: {dataset: "builtin:facts", max_steps: 20, save_every: 0, eval_every: 0}
grid: {learning_rate: [3.0e-4, 1.0e-3, 3.0e-3]}
evals: ["builtin:facts-probes", "builtin:facts-nll"]
max_examples: 0
"""


def _value_text(value) -> str:
    """A setting's value as the table shows it: text, so a column of numbers and blanks stays one type."""
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _settings_text(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


# ------------------------------------------------------------------------------------------------ the table


def table(store: EvalStore, sweep_id: str) -> pd.DataFrame:
    """One row per member (and the base model first when it was evaluated): status, the varying settings, the
    final training metric and the headline eval metrics as "value [low, high]"."""
    from storage import Store

    sweep = store.get_sweep(sweep_id)
    if sweep is None:
        raise SweepError(f"sweep {sweep_id}: not found")
    members = sweep["members"]
    varying = varying_keys(members)
    member_evals = {m["eval_id"] for m in members if m.get("eval_id")}
    base_evals = [
        job["eval_id"]
        for job in store.list_jobs()
        if job.get("sweep_id") == sweep_id
        and job["status"] == RunStatus.COMPLETED
        and job["eval_id"] not in member_evals
    ]
    rows = []
    if base_evals:
        rows.append(
            {
                "member": "base",
                "status": "",
                **{k: "" for k in varying},
                "training metric": "",
                **_eval_columns(store, base_evals[0]),
            }
        )
    runs = Store(store.store.path)
    for member in members:
        run = runs.get_run(member["run_id"]) if member.get("run_id") else None
        row = {
            "member": str(member["idx"]),  # text, like the base row's "base": one type per column (Arrow)
            "status": member["status"],
            **{k: _value_text(member["settings"].get(k)) for k in varying},
            "training metric": _training_metric(runs, run),
            "run": member.get("run_id") or "",
        }
        if member.get("eval_id"):
            row.update(_eval_columns(store, member["eval_id"]))
        if member.get("error"):
            row["error"] = member["error"]
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def _eval_columns(store: EvalStore, eval_id: str) -> dict:
    """The headline metrics of a one-model evaluation, as the leaderboard writes them (no best-marking)."""
    metrics = store.metrics([eval_id])
    if metrics.empty:
        return {}
    kinds = {row["eval_set"]: row["kind"] for row in store.results([eval_id])}
    board = report.leaderboard(metrics, kinds)
    return board.drop(columns=["model"]).iloc[0].to_dict()


def _training_metric(store, run: dict | None) -> str:
    if run is None:
        return ""
    name = key_metric(run["kind"])
    value = store.last_metrics([run["run_id"]], name).get(run["run_id"])
    return f"{name}={value:.4f}" if value is not None else ""
