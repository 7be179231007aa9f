"""The studio's DuckDB schema: the ordered list of migrations and the allowed values of enum-like columns.

Migration N (1-based) is `MIGRATIONS[N - 1]`; `storage.db` applies the ones newer than the file's
`schema_version` once per process. Never edit a shipped migration: append a new one. This module holds SQL
text only; it opens no connection. Timestamps are TIMESTAMP in UTC; JSON values are stored as TEXT.
"""

from __future__ import annotations

RUN_KINDS = ("sl", "dpo", "rl", "distill")
# The allowed statuses (of runs, evaluation jobs, sweeps and sweep members) live in storage/statuses.py.
BACKENDS = ("local", "tinker", "clocked")
CHECKPOINT_KINDS = ("state", "sampler", "both")
DATASET_KINDS = ("chat", "preference", "rl")
DATASET_SOURCES = ("builtin", "upload", "hub", "file")

SCHEMA_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL,
    applied_at TIMESTAMP NOT NULL
)
"""

_INITIAL_SCHEMA = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    backend TEXT NOT NULL,
    base_model TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    updated_at TIMESTAMP NOT NULL,
    step INTEGER,
    total_steps INTEGER,
    error TEXT,
    traceback TEXT,
    parent_run_id TEXT,
    parent_checkpoint TEXT,
    log_dir TEXT NOT NULL,
    owner_pid INTEGER,
    owner_host TEXT
);

CREATE TABLE metrics (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    value DOUBLE,
    logged_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, step, name)
);

CREATE TABLE checkpoints (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    state_path TEXT,
    sampler_path TEXT,
    loop_state TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, name)
);

CREATE TABLE transcripts (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    group_idx INTEGER NOT NULL,
    sample_idx INTEGER NOT NULL,
    prompt TEXT,
    completion TEXT,
    reward DOUBLE,
    advantage DOUBLE,
    stop_reason TEXT,
    metrics TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE datasets (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    num_rows INTEGER,
    meta TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
"""

# Evaluations (cookbook_engine/evals): a job evaluates models x eval sets; each (model, set) pair has one result row,
# its metrics (value, n, 95% interval) and one row per example. result_key identifies what decides a result
# (model identity, eval set fingerprint, settings), so an identical pair is copied from an earlier job. Sweeps train
# several configurations in turn (sweep_members) and evaluate each.
_EVALS_AND_SWEEPS = """
CREATE TABLE eval_jobs (
    eval_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    models TEXT NOT NULL,
    eval_sets TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    updated_at TIMESTAMP NOT NULL,
    done INTEGER NOT NULL,
    total INTEGER,
    error TEXT,
    owner_pid INTEGER,
    sweep_id TEXT
);

CREATE TABLE eval_results (
    eval_id TEXT NOT NULL,
    model TEXT NOT NULL,
    eval_set TEXT NOT NULL,
    kind TEXT NOT NULL,
    result_key TEXT NOT NULL,
    model_spec TEXT NOT NULL,
    model_path TEXT,
    run_id TEXT,
    step INTEGER,
    seconds DOUBLE,
    reused_from TEXT,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (eval_id, model, eval_set)
);

CREATE TABLE eval_metrics (
    eval_id TEXT NOT NULL,
    model TEXT NOT NULL,
    eval_set TEXT NOT NULL,
    metric TEXT NOT NULL,
    value DOUBLE,
    n INTEGER NOT NULL,
    low DOUBLE,
    high DOUBLE,
    details TEXT NOT NULL,
    PRIMARY KEY (eval_id, model, eval_set, metric)
);

CREATE TABLE eval_examples (
    eval_id TEXT NOT NULL,
    model TEXT NOT NULL,
    eval_set TEXT NOT NULL,
    idx INTEGER NOT NULL,
    prompt TEXT,
    reference TEXT,
    output TEXT,
    score DOUBLE,
    correct BOOLEAN,
    parsed TEXT,
    details TEXT NOT NULL,
    PRIMARY KEY (eval_id, model, eval_set, idx)
);

CREATE TABLE sweeps (
    sweep_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    error TEXT,
    owner_pid INTEGER
);

CREATE TABLE sweep_members (
    sweep_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL,
    settings TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    run_id TEXT,
    eval_id TEXT,
    error TEXT,
    PRIMARY KEY (sweep_id, idx)
);
"""

# How fast finished runs trained against what the New run form estimated for them (cookbook_engine/training/
# estimate.py): one row per run that completed on the local backend, kept after the run is deleted (it describes the
# machine, not the run), so the next estimate for a run like it is scaled by what such runs measured.
_STEP_SPEEDS = """
CREATE TABLE step_speeds (
    run_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    steps INTEGER NOT NULL,
    measured_step_s DOUBLE NOT NULL,
    estimated_step_s DOUBLE NOT NULL,
    recorded_at TIMESTAMP NOT NULL
);
"""

MIGRATIONS: list[str] = [
    _INITIAL_SCHEMA,
    _EVALS_AND_SWEEPS,
    _STEP_SPEEDS,
]

RUN_COLUMNS = (
    "run_id",
    "name",
    "kind",
    "status",
    "backend",
    "base_model",
    "config",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
    "step",
    "total_steps",
    "error",
    "traceback",
    "parent_run_id",
    "parent_checkpoint",
    "log_dir",
    "owner_pid",
    "owner_host",
)
