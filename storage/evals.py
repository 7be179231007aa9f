"""Evaluation jobs and sweeps in DuckDB: the SQL behind cookbook_engine/evals (jobs, results, metrics, per-example
rows) and cookbook_engine/evals/sweeps.py (sweeps and their members).

`EvalStore` wraps a `storage.Store`: its methods marked `@in_owner` run in the database's owner process, in one
transaction each, like the Store's (storage/db.py, storage/client.py), so an evaluation started from the CLI shows
up in an open studio like a run does. Writes
are few and coarse: a job's progress, then one transaction per finished (model, eval set) pair with its metrics and
examples. Not here: computing anything (the engine) or the tables' definitions (storage/schema.py).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from storage import statuses
from storage.client import in_owner
from storage.db import Store, _dicts, _parse_json_column, _pid_alive, _to_json, utcnow
from storage.statuses import RunStatus

_JOB_FIELDS = frozenset({"status", "started_at", "finished_at", "done", "total", "error", "owner_pid"})
_SWEEP_FIELDS = frozenset({"status", "finished_at", "error", "owner_pid"})
_MEMBER_FIELDS = frozenset({"status", "run_id", "eval_id", "error"})


def _finite(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


class EvalStore:
    def __init__(self, store: Store | None = None):
        self.store = store or Store.default()

    @property
    def path(self) -> Path:
        """The database file (whose owner runs the @in_owner methods)."""
        return self.store.path

    def _transaction(self):
        return self.store._transaction()

    # ------------------------------------------------------------------------------------------------- jobs

    @in_owner
    def create_job(
        self,
        eval_id: str,
        *,
        name: str,
        models: list[str],
        eval_sets: list[str],
        settings: dict,
        total: int,
        sweep_id: str | None = None,
    ) -> None:
        now = utcnow()
        with self._transaction() as con:
            if con.execute("SELECT 1 FROM eval_jobs WHERE eval_id = ?", [eval_id]).fetchone():
                raise ValueError(f"evaluation {eval_id!r} already exists in {self.store.path}")
            con.execute(
                "INSERT INTO eval_jobs (eval_id, name, status, models, eval_sets, settings, created_at, "
                "updated_at, done, total, sweep_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
                [
                    eval_id,
                    name,
                    RunStatus.QUEUED,
                    _to_json(models, "models"),
                    _to_json(eval_sets, "eval_sets"),
                    _to_json(settings, "settings"),
                    now,
                    now,
                    total,
                    sweep_id,
                ],
            )

    def update_job(self, eval_id: str, **fields: Any) -> None:
        if fields.get("status") == RunStatus.RUNNING:
            fields.setdefault("owner_pid", os.getpid())  # this process runs it (not the owner, which stores it)
        self._update_job(eval_id, fields)

    @in_owner
    def _update_job(self, eval_id: str, fields: dict[str, Any]) -> None:
        unknown = sorted(set(fields) - _JOB_FIELDS)
        if unknown:
            raise ValueError(f"update_job({eval_id!r}): unknown fields {unknown}; allowed: {sorted(_JOB_FIELDS)}")
        if "status" in fields:
            if fields["status"] not in statuses.ALL:
                raise ValueError(f"status of evaluation {eval_id!r} must be one of {', '.join(statuses.ALL)}")
            if fields["status"] in statuses.TERMINAL:
                fields.setdefault("finished_at", utcnow())
        fields["updated_at"] = utcnow()
        columns = sorted(fields)
        with self._transaction() as con:
            updated = con.execute(
                f"UPDATE eval_jobs SET {', '.join(f'{c} = ?' for c in columns)} WHERE eval_id = ? RETURNING eval_id",
                [fields[c] for c in columns] + [eval_id],
            ).fetchall()
        if not updated:
            raise KeyError(f"no evaluation {eval_id!r} in {self.store.path}")

    @in_owner
    def get_job(self, eval_id: str) -> dict | None:
        with self._transaction() as con:
            rows = _dicts(con.execute("SELECT * FROM eval_jobs WHERE eval_id = ?", [eval_id]))
        return self._parse_jobs(rows)[0] if rows else None

    @in_owner
    def list_jobs(self) -> list[dict]:
        """Every evaluation job, newest first."""
        with self._transaction() as con:
            rows = _dicts(con.execute("SELECT * FROM eval_jobs ORDER BY created_at DESC, eval_id DESC"))
        return self._parse_jobs(rows)

    @staticmethod
    def _parse_jobs(rows: list[dict]) -> list[dict]:
        for column in ("models", "eval_sets", "settings"):
            _parse_json_column(rows, column)
        return rows

    @in_owner
    def delete_job(self, eval_id: str) -> None:
        with self._transaction() as con:
            for table in ("eval_examples", "eval_metrics", "eval_results", "eval_jobs"):
                con.execute(f"DELETE FROM {table} WHERE eval_id = ?", [eval_id])

    @in_owner
    def mark_orphans_interrupted(self) -> list[str]:
        """Jobs marked running by a process of this host that no longer exists become 'interrupted'."""
        with self._transaction() as con:
            rows = con.execute(
                "SELECT eval_id, owner_pid FROM eval_jobs WHERE list_contains(?, status) AND owner_pid IS NOT NULL",
                [list(statuses.ACTIVE)],
            ).fetchall()
        dead = [eval_id for eval_id, pid in rows if not _pid_alive(int(pid))]
        for eval_id in dead:
            self._update_job(eval_id, {"status": RunStatus.INTERRUPTED, "error": "the process running it ended"})
        return dead

    # ------------------------------------------------------------------------------------------------ results

    @in_owner
    def save_result(
        self,
        eval_id: str,
        model: str,
        eval_set: str,
        *,
        kind: str,
        result_key: str,
        model_spec: str,
        model_path: str | None,
        run_id: str | None,
        step: int | None,
        seconds: float,
        metrics: list[dict],
        examples: list[dict],
    ) -> None:
        """One (model, eval set) pair: its result row, metrics and examples, in one transaction (replacing any)."""
        metric_frame = pd.DataFrame(
            {
                "metric": [m["name"] for m in metrics],
                "value": [_finite(m["value"]) for m in metrics],
                "n": [int(m["n"]) for m in metrics],
                "low": [_finite(m.get("low")) for m in metrics],
                "high": [_finite(m.get("high")) for m in metrics],
                "details": [_to_json(m.get("details") or {}, f"details of metric {m['name']}") for m in metrics],
            }
        )
        example_frame = pd.DataFrame(
            {
                "idx": pd.Series([int(e["index"]) for e in examples], dtype="int64"),
                "prompt": pd.Series([e["prompt"] for e in examples], dtype="object"),
                "reference": pd.Series([e["reference"] for e in examples], dtype="object"),
                "output": pd.Series([e["output"] for e in examples], dtype="object"),
                "score": pd.Series([_finite(e["score"]) for e in examples], dtype="float64"),
                "correct": pd.Series([e["correct"] for e in examples], dtype="object"),
                "parsed": pd.Series([e["parsed"] for e in examples], dtype="object"),
                "details": pd.Series(
                    [_to_json(e.get("details") or {}, "example details") for e in examples], dtype="object"
                ),
            }
        )
        key = [eval_id, model, eval_set]
        with self._transaction() as con:
            self._delete_pair(con, key)
            con.execute(
                "INSERT INTO eval_results (eval_id, model, eval_set, kind, result_key, model_spec, "
                "model_path, run_id, step, seconds, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                key + [kind, result_key, model_spec, model_path, run_id, step, seconds, utcnow()],
            )
            con.register("incoming_eval_metrics", metric_frame)
            con.execute(
                "INSERT INTO eval_metrics SELECT ?, ?, ?, metric, value, n, low, high, details "
                "FROM incoming_eval_metrics",
                key,
            )
            con.register("incoming_eval_examples", example_frame)
            con.execute(
                "INSERT INTO eval_examples SELECT ?, ?, ?, idx, prompt, reference, output, score, "
                "CAST(correct AS BOOLEAN), parsed, details FROM incoming_eval_examples",
                key,
            )
            con.unregister("incoming_eval_metrics")
            con.unregister("incoming_eval_examples")

    @staticmethod
    def _delete_pair(con, key: list) -> None:
        for table in ("eval_examples", "eval_metrics", "eval_results"):
            con.execute(f"DELETE FROM {table} WHERE eval_id = ? AND model = ? AND eval_set = ?", key)

    @in_owner
    def reuse_result(self, eval_id: str, model: str, eval_set: str, result_key: str, model_spec: str) -> str | None:
        """Copy the newest stored result with this result_key from a completed job into this job; returns the
        source job's id, or None when there is none to reuse."""
        key = [eval_id, model, eval_set]
        with self._transaction() as con:
            source = con.execute(
                "SELECT r.eval_id, r.model, r.eval_set FROM eval_results r JOIN eval_jobs j USING (eval_id) "
                "WHERE r.result_key = ? AND j.status = ? AND r.eval_id <> ? "
                "ORDER BY r.created_at DESC LIMIT 1",
                [result_key, RunStatus.COMPLETED, eval_id],
            ).fetchone()
            if source is None:
                return None
            self._delete_pair(con, key)
            con.execute(
                "INSERT INTO eval_results SELECT ?, ?, ?, kind, result_key, ?, model_path, run_id, step, "
                "seconds, ?, ? FROM eval_results WHERE eval_id = ? AND model = ? AND eval_set = ?",
                key + [model_spec, source[0], utcnow()] + list(source),
            )
            for table, columns in (
                ("eval_metrics", "metric, value, n, low, high, details"),
                ("eval_examples", "idx, prompt, reference, output, score, correct, parsed, details"),
            ):
                con.execute(
                    f"INSERT INTO {table} SELECT ?, ?, ?, {columns} FROM {table} "
                    "WHERE eval_id = ? AND model = ? AND eval_set = ?",
                    key + list(source),
                )
        return source[0]

    @in_owner
    def results(self, eval_ids: list[str]) -> list[dict]:
        """Result rows (one per model x eval set) of these jobs."""
        with self._transaction() as con:
            return _dicts(
                con.execute(
                    "SELECT * FROM eval_results WHERE list_contains(?, eval_id) ORDER BY created_at", [list(eval_ids)]
                )
            )

    @in_owner
    def metrics(self, eval_ids: list[str]) -> pd.DataFrame:
        """Long table: eval_id, model, eval_set, metric, value, n, low, high, details (dicts)."""
        with self._transaction() as con:
            frame = con.execute(
                "SELECT m.* FROM eval_metrics m JOIN eval_results r USING (eval_id, model, eval_set) "
                "WHERE list_contains(?, m.eval_id) ORDER BY r.created_at, m.metric",
                [list(eval_ids)],
            ).df()
        frame["details"] = [json.loads(text) for text in frame["details"]]
        return frame

    @in_owner
    def examples(self, eval_id: str, eval_set: str | None = None) -> pd.DataFrame:
        """Per-example rows of a job (one eval set or all), details as dicts."""
        sql, params = "SELECT * FROM eval_examples WHERE eval_id = ?", [eval_id]
        if eval_set is not None:
            sql += " AND eval_set = ?"
            params.append(eval_set)
        with self._transaction() as con:
            frame = con.execute(sql + " ORDER BY eval_set, idx, model", params).df()
        frame["details"] = [json.loads(text) for text in frame["details"]]
        return frame

    # ------------------------------------------------------------------------------------------------- sweeps

    @in_owner
    def create_sweep(self, sweep_id: str, *, name: str, spec: dict, members: list[dict]) -> None:
        """A sweep and its members (each: kind, settings (the keys that vary), config (the full config))."""
        now = utcnow()
        with self._transaction() as con:
            con.execute(
                "INSERT INTO sweeps (sweep_id, name, status, spec, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                [sweep_id, name, RunStatus.QUEUED, _to_json(spec, "sweep spec"), now, now],
            )
            for index, member in enumerate(members):
                con.execute(
                    "INSERT INTO sweep_members (sweep_id, idx, kind, settings, config, status) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        sweep_id,
                        index,
                        member["kind"],
                        _to_json(member["settings"], "member settings"),
                        _to_json(member["config"], "member config"),
                        RunStatus.QUEUED,
                    ],
                )

    @in_owner
    def update_sweep(self, sweep_id: str, **fields: Any) -> None:
        self._update("sweeps", _SWEEP_FIELDS, "sweep_id = ?", [sweep_id], fields, f"sweep {sweep_id!r}")

    @in_owner
    def update_member(self, sweep_id: str, index: int, **fields: Any) -> None:
        self._update(
            "sweep_members",
            _MEMBER_FIELDS,
            "sweep_id = ? AND idx = ?",
            [sweep_id, index],
            fields,
            f"member {index} of sweep {sweep_id!r}",
        )

    def _update(self, table: str, allowed: frozenset, where: str, where_params: list, fields: dict, what: str) -> None:
        unknown = sorted(set(fields) - allowed)
        if unknown:
            raise ValueError(f"{what}: unknown fields {unknown}; allowed: {sorted(allowed)}")
        if fields.get("status") is not None and fields["status"] not in statuses.ALL:
            raise ValueError(f"{what}: status must be one of {', '.join(statuses.ALL)}")
        if table == "sweeps":
            fields["updated_at"] = utcnow()
            if fields.get("status") in statuses.TERMINAL:
                fields.setdefault("finished_at", utcnow())
        columns = sorted(fields)
        with self._transaction() as con:
            updated = con.execute(
                f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in columns)} WHERE {where} RETURNING 1",
                [fields[c] for c in columns] + where_params,
            ).fetchall()
        if not updated:
            raise KeyError(f"{what}: not found in {self.store.path}")

    @in_owner
    def get_sweep(self, sweep_id: str) -> dict | None:
        """The sweep with its members (settings and config as dicts), or None."""
        with self._transaction() as con:
            sweeps = _dicts(con.execute("SELECT * FROM sweeps WHERE sweep_id = ?", [sweep_id]))
            members = _dicts(con.execute("SELECT * FROM sweep_members WHERE sweep_id = ? ORDER BY idx", [sweep_id]))
        if not sweeps:
            return None
        sweep = _parse_json_column(sweeps, "spec")[0]
        sweep["members"] = _parse_json_column(_parse_json_column(members, "settings"), "config")
        return sweep

    @in_owner
    def list_sweeps(self) -> list[dict]:
        with self._transaction() as con:
            rows = _dicts(con.execute("SELECT * FROM sweeps ORDER BY created_at DESC, sweep_id DESC"))
        return _parse_json_column(rows, "spec")
