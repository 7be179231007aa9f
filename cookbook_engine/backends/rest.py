"""A minimal local stand-in for tinker.RestClient: the checkpoint and training-run calls tinker-cookbook makes.

Training runs are the folders under the checkpoint root (one per training client, its run.json holding base model,
LoRA settings and user metadata); checkpoints are their weights/ and sampler_weights/ folders, each with a
checkpoint.json (time, expiry, user metadata). Supported: list_checkpoints, list_user_checkpoints, delete_checkpoint
(and _from_tinker_path), get_training_run (and _by_tinker_path), list_training_runs, get_weights_info_by_tinker_path,
set_checkpoint_ttl_from_tinker_path, get_server_capabilities, each returning a future (the `*_async` variants return
the value). Expired checkpoints (ttl_seconds) are deleted by `sweep_expired()`, which every new LocalServiceClient
runs. Any other RestClient method raises NotImplementedError naming it (sessions, billing, publishing, audit logs and
cross-project copies are hosted-service features).

Not here: saving checkpoints (local.py), path parsing (compat.py).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import tinker
from tinker import types

from cookbook_engine import models
from cookbook_engine.backends import compat
from cookbook_engine.backends.protocol import LocalFuture, async_awaiting

CHECKPOINT_META, RUN_META = compat.CHECKPOINT_META, compat.RUN_META
KIND_OF_FOLDER = compat.KIND_OF_FOLDER


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _checkpoint(model_id: str, folder: Path) -> types.Checkpoint:
    kind = KIND_OF_FOLDER[folder.parent.name]
    meta = _read_json(folder / CHECKPOINT_META)
    saved = (
        datetime.fromisoformat(meta["time"])
        if meta.get("time")
        else datetime.fromtimestamp(folder.stat().st_mtime, UTC)
    )
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return types.Checkpoint(
        checkpoint_id=f"{kind}/{folder.name}",
        tinker_path=compat.tinker_path(model_id, kind, folder.name),
        checkpoint_type="training" if kind == "weights" else "sampler",
        time=saved,
        size_bytes=size,
        user_metadata=meta.get("user_metadata") or None,
        expires_at=meta.get("expires_at"),
    )


def _checkpoints(model_id: str) -> list[types.Checkpoint]:
    run = compat.checkpoint_root() / model_id
    folders = [
        f for kind in compat.KIND_FOLDERS.values() for f in sorted((run / kind).glob("*")) if compat.holds_checkpoint(f)
    ]
    return sorted((_checkpoint(model_id, f) for f in folders), key=lambda c: c.time)


def _training_run(model_id: str) -> types.TrainingRun:
    folder = compat.checkpoint_root() / model_id
    meta = _read_json(folder / RUN_META)
    if not folder.is_dir():
        raise ValueError(f"training run {model_id!r}: no such run on this machine")
    checkpoints = _checkpoints(model_id)
    training = [c for c in checkpoints if c.checkpoint_type == "training"]
    sampler = [c for c in checkpoints if c.checkpoint_type == "sampler"]
    last = (
        max([c.time for c in checkpoints], default=None)
        or meta.get("created")
        or datetime.fromtimestamp(folder.stat().st_mtime, UTC)
    )
    return types.TrainingRun(
        training_run_id=model_id,
        base_model=meta.get("base_model", models.DEFAULT_MODEL),
        model_owner="local",
        is_lora=True,
        lora_rank=meta.get("lora_rank"),
        last_request_time=last,
        last_checkpoint=training[-1] if training else None,
        last_sampler_checkpoint=sampler[-1] if sampler else None,
        user_metadata=meta.get("user_metadata") or None,
    )


def _checkpoint_folder(training_run_id: str, checkpoint_id: str) -> Path:
    return compat.resolve(f"tinker://{training_run_id}/{checkpoint_id}")


def sweep_expired(now: datetime | None = None) -> list[Path]:
    """Delete the checkpoints whose ttl_seconds has run out; returns their folders."""
    now = now or datetime.now(UTC)
    removed = []
    for meta_file in compat.checkpoint_root().glob(f"*/*/*/{CHECKPOINT_META}"):
        expires = _read_json(meta_file).get("expires_at")
        if expires and datetime.fromisoformat(expires) <= now:
            shutil.rmtree(meta_file.parent, ignore_errors=True)
            removed.append(meta_file.parent)
    return removed


class LocalRestClient:
    """tinker.RestClient's checkpoint and training-run calls over the local checkpoint folders."""

    def list_checkpoints(self, training_run_id: str) -> LocalFuture:
        return _future(lambda: types.CheckpointsListResponse(checkpoints=_checkpoints(training_run_id)))

    list_checkpoints_async = async_awaiting(list_checkpoints)

    def list_user_checkpoints(self, limit: int = 100, offset: int = 0) -> LocalFuture:
        def listing():
            runs = sorted(p.name for p in compat.checkpoint_root().iterdir() if p.is_dir())
            everything = sorted((c for run in runs for c in _checkpoints(run)), key=lambda c: c.time, reverse=True)
            return types.CheckpointsListResponse(checkpoints=everything[offset : offset + limit])

        return _future(listing)

    list_user_checkpoints_async = async_awaiting(list_user_checkpoints)

    def delete_checkpoint(self, training_run_id: str, checkpoint_id: str) -> LocalFuture:
        def delete():
            folder = _checkpoint_folder(training_run_id, checkpoint_id)
            if not folder.is_dir():
                raise ValueError(f"checkpoint {checkpoint_id!r} of {training_run_id!r}: not found")
            shutil.rmtree(folder)

        return _future(delete)

    delete_checkpoint_async = async_awaiting(delete_checkpoint)

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> LocalFuture:
        parsed = compat.parse_tinker_path(tinker_path)
        return self.delete_checkpoint(parsed.training_run_id, parsed.checkpoint_id)

    delete_checkpoint_from_tinker_path_async = async_awaiting(delete_checkpoint_from_tinker_path)

    def get_training_run(self, training_run_id: str, access_scope: str = "owned") -> LocalFuture:
        return _future(lambda: _training_run(training_run_id))

    get_training_run_async = async_awaiting(get_training_run)

    def get_training_run_by_tinker_path(self, tinker_path: str, access_scope: str = "owned") -> LocalFuture:
        return self.get_training_run(compat.parse_tinker_path(tinker_path).training_run_id, access_scope)

    get_training_run_by_tinker_path_async = async_awaiting(get_training_run_by_tinker_path)

    def list_training_runs(
        self, limit: int = 20, offset: int = 0, access_scope: str = "owned", project_id: str | None = None
    ) -> LocalFuture:
        def listing():
            runs = [_training_run(p.name) for p in compat.checkpoint_root().iterdir() if p.is_dir()]
            runs.sort(key=lambda r: r.last_request_time, reverse=True)
            return types.TrainingRunsResponse(
                training_runs=runs[offset : offset + limit],
                cursor=types.Cursor(offset=offset, limit=limit, total_count=len(runs)),
            )

        return _future(listing)

    list_training_runs_async = async_awaiting(list_training_runs)

    def get_weights_info_by_tinker_path(self, tinker_path: str) -> LocalFuture:
        def info():
            folder = compat.resolve(tinker_path)
            config = _read_json(folder / "adapter_config.json")
            if not config:
                raise ValueError(f"checkpoint {tinker_path}: not found")
            run = _read_json(folder.parent.parent / RUN_META)
            return types.WeightsInfoResponse(
                base_model=config["base_model_name_or_path"],
                is_lora=True,
                lora_rank=config.get("r"),
                train_unembed=False,
                train_mlp=run.get("train_mlp"),
                train_attn=run.get("train_attn"),
            )

        return _future(info)

    def set_checkpoint_ttl_from_tinker_path(self, tinker_path: str, ttl_seconds: int | None) -> LocalFuture:
        def set_ttl():
            meta_file = compat.resolve(tinker_path) / CHECKPOINT_META
            if not meta_file.parent.is_dir():
                raise ValueError(f"checkpoint {tinker_path}: not found")
            meta = _read_json(meta_file)
            expires = datetime.now(UTC) + timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None
            meta["expires_at"] = expires.isoformat() if expires else None
            meta_file.write_text(json.dumps(meta))

        return _future(set_ttl)

    set_checkpoint_ttl_from_tinker_path_async = async_awaiting(set_checkpoint_ttl_from_tinker_path)

    def get_server_capabilities(self) -> LocalFuture:
        return LocalFuture.completed(
            types.GetServerCapabilitiesResponse(
                supported_models=[types.SupportedModel(model_name=models.DEFAULT_MODEL)]
            )
        )

    def get_telemetry(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_") and hasattr(tinker.RestClient, name):
            raise NotImplementedError(
                f"RestClient.{name} is not supported by the local backend: sessions, billing, "
                "publishing, audit logs and copies between projects are hosted-service "
                "features"
            )
        raise AttributeError(name)


def _future(fn) -> LocalFuture:
    """Run a file-system call now and hand back its result (or error) as a finished future."""
    import concurrent.futures

    future: concurrent.futures.Future = concurrent.futures.Future()
    try:
        future.set_result(fn())
    except Exception as exc:
        future.set_exception(exc)
    return LocalFuture(future)
