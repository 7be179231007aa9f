"""The studio's DuckDB store: runs, metrics, checkpoints, transcripts and datasets. With storage/evals.py, the only
module that runs SQL.

One process owns the database file (storage/owner.py) and holds the only connection to it; every other process
(the studio, CLI runs, evaluations, sweeps) makes a `Store(path)`, which holds nothing but the path, and each method
marked `@in_owner` is run by the owner (storage/client.py sends it there, starting the owner on demand). The owner
runs one call at a time, each in one transaction on its open connection, so there is no open per call, no lock to
wait for and no retry. Checks and conversions that need no database (metric values, transcript rows, run fields)
run in the calling process first, so bad input raises there and tensors never travel. `Store` offers
storage.interface.RunStore. Not here: metric cleaning (storage/metrics.py), the file layout (storage/home.py,
cookbook_engine.paths) and the JSON-lines files of a run folder (cookbook_engine.training.run_logger).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from storage import statuses
from storage.client import in_owner
from storage.home import db_path
from storage.metrics import clean_metrics, finite_or_none, json_default, metric_value
from storage.schema import (
    BACKENDS,
    CHECKPOINT_KINDS,
    DATASET_KINDS,
    DATASET_SOURCES,
    MIGRATIONS,
    RUN_COLUMNS,
    RUN_KINDS,
    SCHEMA_VERSION_TABLE,
)
from storage.statuses import RunStatus

_UPDATABLE_RUN_COLUMNS = frozenset(RUN_COLUMNS) - {"run_id", "created_at"}
_APPEND_SQL = {  # the rows come from the registered Arrow table `incoming`; parameters: run_id, now
    "metrics": "INSERT INTO metrics (run_id, step, name, value, logged_at) "
    "SELECT ?, step, name, CASE WHEN isfinite(value) THEN value END, ? FROM incoming "
    "ON CONFLICT DO UPDATE SET value = excluded.value, logged_at = excluded.logged_at",
    "transcripts": "INSERT INTO transcripts (run_id, step, group_idx, sample_idx, prompt, completion, reward, "
    "advantage, stop_reason, metrics, created_at) SELECT ?, step, group_idx, sample_idx, prompt, completion, "
    "reward, advantage, stop_reason, metrics, ? FROM incoming",
}
_TRANSCRIPT_REQUIRED_KEYS = ("step", "group_idx", "sample_idx", "prompt", "completion")
_TRANSCRIPT_OPTIONAL_KEYS = ("reward", "advantage", "stop_reason", "metrics")


# ----------------------------------------------------------------------------------------------------------------
# Small helpers (no SQL)


def utcnow() -> datetime:
    """Now in UTC as a naive datetime, the form every TIMESTAMP column holds."""
    return datetime.now(UTC).replace(tzinfo=None)


def _to_json(value: Any, where: str) -> str:
    try:
        return json.dumps(value, default=json_default)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: {exc}") from exc


def _check_choice(value: Any, allowed: tuple[str, ...], where: str) -> None:
    if value not in allowed:
        raise ValueError(f"{where} must be one of {', '.join(allowed)}; got {value!r}")


def _check_int(value: Any, where: str, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} must be an integer, got {type(value).__name__} {value!r}")


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _one_value(cursor: duckdb.DuckDBPyConnection) -> Any:
    """The first value of an aggregate query's single row (None if it returned no row)."""
    row = cursor.fetchone()
    return row[0] if row is not None else None


def _parse_json_column(rows: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    for row in rows:
        row[column] = json.loads(row[column]) if row[column] is not None else None
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Opening the file (the owner does it once) and its migrations


def open_database(path: Path) -> duckdb.DuckDBPyConnection:
    """The one connection to the file, with the schema brought up to date (a file of an older layout is migrated)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    try:
        _migrate(con, path)
    except BaseException:
        con.close()
        raise
    return con


def _migrate(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(SCHEMA_VERSION_TABLE)
        current = _one_value(con.execute("SELECT coalesce(max(version), 0) FROM schema_version"))
        if current > len(MIGRATIONS):
            raise RuntimeError(
                f"{path} has schema version {current}, newer than this code's {len(MIGRATIONS)}; "
                "upgrade cookbook-studio to open it"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            con.execute(MIGRATIONS[version - 1])
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, utcnow()])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


# ----------------------------------------------------------------------------------------------------------------
# Checked rows (built in the calling process) and the SQL that writes them (run in the owner)


def clean_run_fields(run_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Check update_run's fields and return them ready for SQL (JSON config, naive UTC times, updated_at set)."""
    fields = dict(fields)
    unknown = sorted(set(fields) - _UPDATABLE_RUN_COLUMNS)
    if unknown:
        raise ValueError(
            f"update_run({run_id!r}): unknown or read-only fields {unknown}; allowed: {sorted(_UPDATABLE_RUN_COLUMNS)}"
        )
    if "status" in fields:
        _check_choice(fields["status"], statuses.ALL, f"status of run {run_id!r}")
        if fields["status"] in statuses.TERMINAL:
            fields.setdefault("finished_at", utcnow())
    if "kind" in fields:
        _check_choice(fields["kind"], RUN_KINDS, f"kind of run {run_id!r}")
    if "backend" in fields:
        _check_choice(fields["backend"], BACKENDS, f"backend of run {run_id!r}")
    for int_field in ("step", "total_steps", "owner_pid"):
        if int_field in fields:
            _check_int(fields[int_field], f"{int_field} of run {run_id!r}", optional=True)
    if "config" in fields:
        if not isinstance(fields["config"], dict):
            raise TypeError(f"config of run {run_id!r} must be a dict, got {type(fields['config']).__name__}")
        fields["config"] = _to_json(fields["config"], f"config of run {run_id!r}")
    if "log_dir" in fields:
        fields["log_dir"] = str(fields["log_dir"])
    for time_field in ("started_at", "finished_at", "updated_at"):
        if isinstance(fields.get(time_field), datetime) and fields[time_field].tzinfo is not None:
            fields[time_field] = fields[time_field].astimezone(UTC).replace(tzinfo=None)
    fields.setdefault("updated_at", utcnow())
    return fields


def metrics_table(run_id: str, step: int, metrics: Mapping[str, Any]) -> pa.Table:
    """One step's metrics, checked, as an Arrow table (step, name, value); empty if `metrics` is."""
    _check_int(step, f"step of run {run_id!r}")
    cleaned = clean_metrics(metrics, f"log_metrics(run {run_id!r}, step {step})")
    return pa.table(
        {
            "step": pa.array([step] * len(cleaned), type=pa.int64()),
            "name": pa.array(list(cleaned), type=pa.string()),
            "value": pa.array(list(cleaned.values()), type=pa.float64()),
        }
    )


def transcripts_table(run_id: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Transcript rows (see Store.add_transcripts), checked, as an Arrow table; non-finite rewards become NULL."""
    columns: dict[str, list[Any]] = {key: [] for key in _TRANSCRIPT_REQUIRED_KEYS + _TRANSCRIPT_OPTIONAL_KEYS}
    for index, row in enumerate(rows):
        where = f"transcript row {index} of run {run_id!r}"
        if not isinstance(row, Mapping):
            raise TypeError(f"{where} must be a dict, got {type(row).__name__}")
        missing = [key for key in _TRANSCRIPT_REQUIRED_KEYS if key not in row]
        unknown = sorted(set(row) - set(columns))
        if missing or unknown:
            raise ValueError(f"{where}: missing keys {missing}, unknown keys {unknown}")
        for key in ("step", "group_idx", "sample_idx"):
            _check_int(row[key], f"{key} of {where}")
        for key in ("reward", "advantage"):
            value = row.get(key)
            columns[key].append(None if value is None else finite_or_none(metric_value(value, f"{key} of {where}")))
        for key in ("step", "group_idx", "sample_idx", "prompt", "completion", "stop_reason"):
            columns[key].append(row.get(key))
        columns["metrics"].append(_to_json(row.get("metrics") or {}, f"metrics of {where}"))
    return pa.table(
        {
            "step": pa.array(columns["step"], type=pa.int64()),
            "group_idx": pa.array(columns["group_idx"], type=pa.int64()),
            "sample_idx": pa.array(columns["sample_idx"], type=pa.int64()),
            "prompt": pa.array(columns["prompt"], type=pa.string()),
            "completion": pa.array(columns["completion"], type=pa.string()),
            "reward": pa.array(columns["reward"], type=pa.float64()),
            "advantage": pa.array(columns["advantage"], type=pa.float64()),
            "stop_reason": pa.array(columns["stop_reason"], type=pa.string()),
            "metrics": pa.array(columns["metrics"], type=pa.string()),
        }
    )


# ----------------------------------------------------------------------------------------------------------------
# The store


class Store:
    """One DuckDB file. Cheap to create and to share between threads and processes: it holds a path; the file's
    owner process holds the connection (in the owner, `Store.owned` is the instance with that connection)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser().resolve()
        self._con: duckdb.DuckDBPyConnection | None = None

    @classmethod
    def default(cls) -> Store:
        """The store in the studio home folder (COOKBOOK_HOME)."""
        return cls(db_path())

    @classmethod
    def owned(cls, path: Path, con: duckdb.DuckDBPyConnection) -> Store:
        """The owner's store: its methods run on `con` (storage/owner.py makes the one instance)."""
        store = cls(path)
        store._con = con
        return store

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction on the owner's connection (the owner runs one call at a time)."""
        con = self._con
        if con is None:
            raise RuntimeError(f"{self!r}: SQL runs in the owner process only (call a method marked @in_owner)")
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error as exc:  # an invalidated connection (the owner then stops): keep the first error
                print(f"rollback failed: {exc}", file=sys.stderr)
            raise
        con.execute("COMMIT")

    def _select(self, sql: str, params: list[Any], *, json_column: str) -> list[dict[str, Any]]:
        """The query's rows as dicts, with `json_column` parsed from its JSON text (one transaction)."""
        with self._transaction() as con:
            return _parse_json_column(_dicts(con.execute(sql, params)), json_column)

    @in_owner
    def schema_version(self) -> int:
        """The migration level of the file (the owner brings it up to date when it opens the file)."""
        with self._transaction() as con:
            return _one_value(con.execute("SELECT max(version) FROM schema_version"))

    # ---------------------------------------------------------------------------------------------------- runs

    @in_owner
    def create_run(
        self,
        run_id: str,
        *,
        name: str,
        kind: str,
        backend: str,
        base_model: str,
        config: dict,
        log_dir: str | Path,
        status: str = RunStatus.QUEUED,
        parent_run_id: str | None = None,
        parent_checkpoint: str | None = None,
        total_steps: int | None = None,
    ) -> None:
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
        _check_choice(kind, RUN_KINDS, f"kind of run {run_id!r}")
        _check_choice(backend, BACKENDS, f"backend of run {run_id!r}")
        _check_choice(status, statuses.ALL, f"status of run {run_id!r}")
        _check_int(total_steps, f"total_steps of run {run_id!r}", optional=True)
        if not isinstance(config, dict):
            raise TypeError(f"config of run {run_id!r} must be a dict, got {type(config).__name__}")
        config_json = _to_json(config, f"config of run {run_id!r}")
        now = utcnow()
        with self._transaction() as con:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                raise ValueError(f"run {run_id!r} already exists in {self.path}")
            con.execute(
                "INSERT INTO runs (run_id, name, kind, status, backend, base_model, config, created_at, "
                "updated_at, total_steps, parent_run_id, parent_checkpoint, log_dir) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    run_id,
                    name,
                    kind,
                    status,
                    backend,
                    base_model,
                    config_json,
                    now,
                    now,
                    total_steps,
                    parent_run_id,
                    parent_checkpoint,
                    str(log_dir),
                ],
            )

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set some columns of a run; always refreshes updated_at (the heartbeat).

        A terminal status (completed/failed/cancelled/interrupted) also sets finished_at unless it is given.
        """
        self._set_run_fields(run_id, clean_run_fields(run_id, fields))

    @in_owner
    def _set_run_fields(self, run_id: str, fields: dict[str, Any]) -> None:
        columns = sorted(fields)  # names come from the fixed column list (clean_run_fields), values are parameters
        assignments = ", ".join(f"{column} = ?" for column in columns)
        with self._transaction() as con:
            updated = con.execute(
                f"UPDATE runs SET {assignments} WHERE run_id = ? RETURNING run_id",
                [fields[column] for column in columns] + [run_id],
            ).fetchall()
        if not updated:
            raise KeyError(f"no run {run_id!r} in {self.path}")

    def claim_run(self, run_id: str, owner_pid: int | None = None) -> None:
        """Mark a run as running in this process (or in process `owner_pid` of this host): owner pid/host,
        started_at if unset; clears an old error."""
        self._claim_run(run_id, owner_pid or os.getpid(), socket.gethostname())

    @in_owner
    def _claim_run(self, run_id: str, owner_pid: int, owner_host: str) -> None:
        now = utcnow()
        with self._transaction() as con:
            updated = con.execute(
                "UPDATE runs SET status = ?, started_at = coalesce(started_at, ?), finished_at = NULL, "
                "error = NULL, traceback = NULL, owner_pid = ?, owner_host = ?, updated_at = ? "
                "WHERE run_id = ? RETURNING run_id",
                [RunStatus.RUNNING, now, owner_pid, owner_host, now, run_id],
            ).fetchall()
            if not updated:
                raise KeyError(f"no run {run_id!r} in {self.path}")

    @in_owner
    def get_run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._select("SELECT * FROM runs WHERE run_id = ?", [run_id], json_column="config")
        return rows[0] if rows else None

    @in_owner
    def run_status(self, run_id: str) -> str | None:
        """The run's status, None if there is no such run (a training loop polls it about once a second)."""
        with self._transaction() as con:
            row = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
        return row[0] if row else None

    @in_owner
    def list_runs(self) -> list[dict[str, Any]]:
        """All runs, newest first."""
        return self._select("SELECT * FROM runs ORDER BY created_at DESC, run_id DESC", [], json_column="config")

    @in_owner
    def delete_run(self, run_id: str) -> None:
        """Delete a run's rows from every table (its files stay where they are)."""
        with self._transaction() as con:
            for table in ("metrics", "checkpoints", "transcripts", "runs"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    @in_owner
    def mark_orphans_interrupted(self) -> list[str]:
        """Runs on this host that are running or cancelling (or queued with an owner) whose owner process is gone.

        Marks them 'interrupted' and returns their ids. A recycled pid can hide an orphan; that is the limit.
        """
        host = socket.gethostname()
        now = utcnow()
        with self._transaction() as con:
            owned = con.execute(
                "SELECT run_id, owner_pid FROM runs WHERE owner_host = ? AND owner_pid IS NOT NULL "
                "AND list_contains(?, status) ORDER BY run_id",
                [host, list(statuses.ACTIVE)],
            ).fetchall()
            orphans = [(run_id, pid) for run_id, pid in owned if not _pid_alive(pid)]
            for run_id, pid in orphans:
                con.execute(
                    "UPDATE runs SET status = ?, finished_at = ?, updated_at = ?, error = ? WHERE run_id = ?",
                    [
                        RunStatus.INTERRUPTED,
                        now,
                        now,
                        f"interrupted: its process {pid} on {host} ended without finishing the run",
                        run_id,
                    ],
                )
        return [run_id for run_id, _ in orphans]

    # ------------------------------------------------------------------------------------------------- metrics

    def log_metrics(self, run_id: str, step: int, metrics: Mapping[str, Any]) -> None:
        """Store one step's metrics in one transaction; a step logged again replaces its values.

        Non-finite values (NaN, inf) are stored as NULL.
        """
        table = metrics_table(run_id, step, metrics)
        if table.num_rows:
            self._append("metrics", run_id, table)

    def log_metrics_bulk(self, run_id: str, frame: pd.DataFrame) -> None:
        """Store many metric points at once from a long frame with columns step, name, value (last one wins)."""
        missing = {"step", "name", "value"} - set(frame.columns)
        if missing:
            raise ValueError(f"log_metrics_bulk(run {run_id!r}): the frame lacks columns {sorted(missing)}")
        frame = frame.drop_duplicates(["step", "name"], keep="last")
        table = pa.table(
            {
                "step": pa.array(frame["step"].astype("int64"), type=pa.int64()),
                "name": pa.array(frame["name"].astype(str), type=pa.string()),
                "value": pa.array(pd.to_numeric(frame["value"]).astype("float64"), type=pa.float64(), from_pandas=True),
            }
        )
        self._append("metrics", run_id, table)

    @in_owner
    def _append(self, table: str, run_id: str, rows: pa.Table) -> None:
        """Add checked rows (metrics_table, transcripts_table) of a run to `table` ("metrics" or "transcripts")."""
        with self._transaction() as con:
            con.register("incoming", rows)
            con.execute(_APPEND_SQL[table], [run_id, utcnow()])
            con.unregister("incoming")

    @in_owner
    def get_metrics(self, run_id: str, names: list[str] | None = None) -> pd.DataFrame:
        """Long frame (step, name, value) sorted by step then name; only `names` if given."""
        sql = "SELECT step, name, value FROM metrics WHERE run_id = ?"
        params: list[Any] = [run_id]
        if names is not None:
            sql += " AND list_contains(?, name)"
            params.append(list(names))
        with self._transaction() as con:
            return con.execute(sql + " ORDER BY step, name", params).df()

    @in_owner
    def get_metrics_wide(self, run_id: str) -> pd.DataFrame:
        """One row per step, one column per metric name (sorted), NaN where a step lacks a metric."""
        with self._transaction() as con:
            # PIVOT cannot take parameters in its source, so the run's rows go through a temp table first.
            con.execute(
                "CREATE TEMP TABLE run_metrics AS SELECT step, name, value FROM metrics WHERE run_id = ?", [run_id]
            )
            frame = con.execute("PIVOT run_metrics ON name USING first(value) GROUP BY step ORDER BY step").df()
            con.execute("DROP TABLE run_metrics")
        return frame

    @in_owner
    def metric_names(self, run_id: str) -> list[str]:
        with self._transaction() as con:
            rows = con.execute("SELECT DISTINCT name FROM metrics WHERE run_id = ? ORDER BY name", [run_id]).fetchall()
        return [name for (name,) in rows]

    @in_owner
    def last_metrics(self, run_ids: list[str], name: str) -> dict[str, float]:
        """The value of metric `name` at each run's latest step that has one; runs without it are left out."""
        if not run_ids:
            return {}
        with self._transaction() as con:
            rows = con.execute(
                "SELECT run_id, arg_max(value, step) FROM metrics "
                "WHERE list_contains(?, run_id) AND name = ? AND value IS NOT NULL GROUP BY run_id",
                [list(run_ids), name],
            ).fetchall()
        return dict(rows)

    @in_owner
    def max_step(self, run_id: str) -> int | None:
        with self._transaction() as con:
            return _one_value(con.execute("SELECT max(step) FROM metrics WHERE run_id = ?", [run_id]))

    @in_owner
    def delete_metrics_after(self, run_id: str, step: int) -> None:
        """Drop the run's metrics with step > `step` (resume re-runs those steps)."""
        _check_int(step, "step")
        with self._transaction() as con:
            con.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", [run_id, step])

    # --------------------------------------------------------------------------------------------- checkpoints

    @in_owner
    def add_checkpoint(
        self,
        run_id: str,
        *,
        step: int,
        name: str,
        kind: str,
        state_path: str | None = None,
        sampler_path: str | None = None,
        loop_state: dict | None = None,
    ) -> None:
        """Record a saved checkpoint; saving the same name again for the run replaces the record."""
        where = f"checkpoint {name!r} of run {run_id!r}"
        _check_int(step, f"step of {where}")
        _check_choice(kind, CHECKPOINT_KINDS, f"kind of {where}")
        if kind in ("state", "both") and not state_path:
            raise ValueError(f"{where} has kind {kind!r} but no state_path")
        if kind in ("sampler", "both") and not sampler_path:
            raise ValueError(f"{where} has kind {kind!r} but no sampler_path")
        loop_state_json = _to_json(loop_state or {}, f"loop_state of {where}")
        with self._transaction() as con:
            con.execute(
                "INSERT INTO checkpoints (run_id, step, name, kind, state_path, sampler_path, loop_state, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET step = excluded.step, "
                "kind = excluded.kind, state_path = excluded.state_path, sampler_path = excluded.sampler_path, "
                "loop_state = excluded.loop_state, created_at = excluded.created_at",
                [run_id, step, name, kind, state_path, sampler_path, loop_state_json, utcnow()],
            )

    @in_owner
    def list_checkpoints(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Checkpoints of one run, or of all runs if run_id is None; newest first."""
        sql = "SELECT * FROM checkpoints"
        params: list[Any] = []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            params.append(run_id)
        return self._select(sql + " ORDER BY created_at DESC, step DESC, name DESC", params, json_column="loop_state")

    @in_owner
    def last_checkpoint(self, run_id: str, kind_with_state: bool = True) -> dict[str, Any] | None:
        """The run's checkpoint with the highest step; with kind_with_state only those holding a training state."""
        kinds = ["state", "both"] if kind_with_state else list(CHECKPOINT_KINDS)
        rows = self._select(
            "SELECT * FROM checkpoints WHERE run_id = ? AND list_contains(?, kind) "
            "ORDER BY step DESC, created_at DESC LIMIT 1",
            [run_id, kinds],
            json_column="loop_state",
        )
        return rows[0] if rows else None

    # --------------------------------------------------------------------------------------------- transcripts

    def add_transcripts(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Append sampled completions: keys step, group_idx, sample_idx, prompt, completion and optionally
        reward, advantage, stop_reason, metrics (a dict of per-sample values)."""
        if rows:
            self._append("transcripts", run_id, transcripts_table(run_id, rows))

    @in_owner
    def get_transcripts(
        self,
        run_id: str,
        step: int | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        limit: int | None = None,
    ) -> pd.DataFrame:
        """Transcripts sorted by step, group, sample; `metrics` holds dicts. Reward bounds are inclusive."""
        sql = (
            "SELECT step, group_idx, sample_idx, prompt, completion, reward, advantage, stop_reason, metrics, "
            "created_at FROM transcripts WHERE run_id = ?"
        )
        params: list[Any] = [run_id]
        if step is not None:
            sql += " AND step = ?"
            params.append(step)
        if min_reward is not None:
            sql += " AND reward >= ?"
            params.append(float(min_reward))
        if max_reward is not None:
            sql += " AND reward <= ?"
            params.append(float(max_reward))
        sql += " ORDER BY step, group_idx, sample_idx"
        if limit is not None:
            _check_int(limit, "limit")
            sql += " LIMIT ?"
            params.append(limit)
        with self._transaction() as con:
            frame = con.execute(sql, params).df()
        frame["metrics"] = [json.loads(text) for text in frame["metrics"]]
        return frame

    @in_owner
    def transcript_steps(self, run_id: str) -> list[int]:
        with self._transaction() as con:
            rows = con.execute(
                "SELECT DISTINCT step FROM transcripts WHERE run_id = ? ORDER BY step", [run_id]
            ).fetchall()
        return [step for (step,) in rows]

    @in_owner
    def delete_transcripts_after(self, run_id: str, step: int) -> None:
        """Drop the run's transcripts with step > `step` (resume samples those steps again)."""
        _check_int(step, "step")
        with self._transaction() as con:
            con.execute("DELETE FROM transcripts WHERE run_id = ? AND step > ?", [run_id, step])

    # ------------------------------------------------------------------------------------------------ datasets

    @in_owner
    def register_dataset(
        self, name: str, *, kind: str, source: str, path: str | Path, num_rows: int | None, meta: dict | None = None
    ) -> None:
        """Add a dataset or update the one with this name (keeping its created_at)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"dataset name must be a non-empty string, got {name!r}")
        _check_choice(kind, DATASET_KINDS, f"kind of dataset {name!r}")
        _check_choice(source, DATASET_SOURCES, f"source of dataset {name!r}")
        _check_int(num_rows, f"num_rows of dataset {name!r}", optional=True)
        meta_json = _to_json(meta or {}, f"meta of dataset {name!r}")
        with self._transaction() as con:
            con.execute(
                "INSERT INTO datasets (name, kind, source, path, num_rows, meta, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET kind = excluded.kind, "
                "source = excluded.source, path = excluded.path, num_rows = excluded.num_rows, meta = excluded.meta",
                [name, kind, source, str(path), num_rows, meta_json, utcnow()],
            )

    @in_owner
    def list_datasets(self) -> list[dict[str, Any]]:
        return self._select("SELECT * FROM datasets ORDER BY name", [], json_column="meta")

    @in_owner
    def delete_dataset(self, name: str) -> None:
        with self._transaction() as con:
            con.execute("DELETE FROM datasets WHERE name = ?", [name])

    # --------------------------------------------------------------------------------------------- step speeds

    def record_step_speed(
        self,
        run_id: str,
        *,
        host: str,
        model: str,
        kind: str,
        dtype: str,
        shape: str,
        steps: int,
        measured_step_s: float,
        estimated_step_s: float,
    ) -> None:
        """Keep how fast a finished run trained (seconds per step, measured) beside what its estimate said (see
        schema.py's step_speeds); the row of an earlier record of the same run is replaced."""
        _check_choice(kind, RUN_KINDS, f"kind of the step speed of run {run_id!r}")
        _check_int(steps, f"steps of the step speed of run {run_id!r}")
        for name, value in (("measured_step_s", measured_step_s), ("estimated_step_s", estimated_step_s)):
            seconds = finite_or_none(metric_value(value, f"{name} of run {run_id!r}"))
            if seconds is None or seconds <= 0:
                raise ValueError(f"{name} of run {run_id!r} must be a positive number of seconds, got {value!r}")
        if steps <= 0:
            raise ValueError(f"steps of the step speed of run {run_id!r} must be positive, got {steps}")
        self._record_step_speed(
            [run_id, host, model, kind, dtype, shape, steps, float(measured_step_s), float(estimated_step_s)]
        )

    @in_owner
    def _record_step_speed(self, row: list[Any]) -> None:
        with self._transaction() as con:
            con.execute(
                "INSERT OR REPLACE INTO step_speeds (run_id, host, model, kind, dtype, shape, steps, "
                "measured_step_s, estimated_step_s, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [*row, utcnow()],
            )

    @in_owner
    def step_speeds(self, *, host: str, model: str, kind: str, dtype: str, limit: int = 20) -> list[dict[str, Any]]:
        """The newest `limit` step speeds recorded on `host` for runs of this model, kind and dtype, newest first."""
        with self._transaction() as con:
            return _dicts(
                con.execute(
                    "SELECT * FROM step_speeds WHERE host = ? AND model = ? AND kind = ? AND dtype = ? "
                    "ORDER BY recorded_at DESC LIMIT ?",
                    [host, model, kind, dtype, limit],
                )
            )
