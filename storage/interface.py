"""RunStore: the methods every studio store offers, declared once. `storage.Store` implements it (its calls run in
the database's owner process, storage/client.py); the engine and the studio annotate what they are handed as
`RunStore`, so a test may hand them a fake. tests/test_storage_interface.py checks each member of Store against
this declaration. Defaults here are `...`: the store spells its own.

Not here: what each method does (storage/db.py documents it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pandas as pd


class RunStore(Protocol):
    """Runs, metrics, checkpoints, transcripts and datasets of one studio database file at `path`."""

    path: Path

    def schema_version(self) -> int: ...

    # --- runs
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
        status: str = ...,
        parent_run_id: str | None = ...,
        parent_checkpoint: str | None = ...,
        total_steps: int | None = ...,
    ) -> None: ...

    def update_run(self, run_id: str, **fields: Any) -> None: ...

    def claim_run(self, run_id: str, owner_pid: int | None = ...) -> None: ...

    def get_run(self, run_id: str) -> dict[str, Any] | None: ...

    def run_status(self, run_id: str) -> str | None: ...

    def list_runs(self) -> list[dict[str, Any]]: ...

    def delete_run(self, run_id: str) -> None: ...

    def mark_orphans_interrupted(self) -> list[str]: ...

    # --- metrics
    def log_metrics(self, run_id: str, step: int, metrics: Mapping[str, Any]) -> None: ...

    def log_metrics_bulk(self, run_id: str, frame: pd.DataFrame) -> None: ...

    def get_metrics(self, run_id: str, names: list[str] | None = ...) -> pd.DataFrame: ...

    def get_metrics_wide(self, run_id: str) -> pd.DataFrame: ...

    def metric_names(self, run_id: str) -> list[str]: ...

    def last_metrics(self, run_ids: list[str], name: str) -> dict[str, float]: ...

    def max_step(self, run_id: str) -> int | None: ...

    def delete_metrics_after(self, run_id: str, step: int) -> None: ...

    # --- checkpoints
    def add_checkpoint(
        self,
        run_id: str,
        *,
        step: int,
        name: str,
        kind: str,
        state_path: str | None = ...,
        sampler_path: str | None = ...,
        loop_state: dict | None = ...,
    ) -> None: ...

    def list_checkpoints(self, run_id: str | None = ...) -> list[dict[str, Any]]: ...

    def last_checkpoint(self, run_id: str, kind_with_state: bool = ...) -> dict[str, Any] | None: ...

    # --- transcripts
    def add_transcripts(self, run_id: str, rows: list[dict[str, Any]]) -> None: ...

    def get_transcripts(
        self,
        run_id: str,
        step: int | None = ...,
        min_reward: float | None = ...,
        max_reward: float | None = ...,
        limit: int | None = ...,
    ) -> pd.DataFrame: ...

    def transcript_steps(self, run_id: str) -> list[int]: ...

    def delete_transcripts_after(self, run_id: str, step: int) -> None: ...

    # --- datasets
    def register_dataset(
        self, name: str, *, kind: str, source: str, path: str | Path, num_rows: int | None, meta: dict | None = ...
    ) -> None: ...

    def list_datasets(self) -> list[dict[str, Any]]: ...

    def delete_dataset(self, name: str) -> None: ...

    # --- step speeds (how fast finished runs trained against their estimate)
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
    ) -> None: ...

    def step_speeds(
        self, *, host: str, model: str, kind: str, dtype: str, limit: int = ...
    ) -> list[dict[str, Any]]: ...
