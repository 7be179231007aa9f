"""Which model an evaluation runs: a spec string turned into a `ModelTarget` with a stable identity.

Specs (the `models=` list of `cookbook eval`, the studio's model picker):

- `base` (the default model) or `base:MODEL`: a base model with no adapter;
- `RUN_ID`: the run's newest saved sampler weights (its final checkpoint once it completed);
- `RUN_ID@STEP`: the run's checkpoint saved at that step; `RUN_ID@final`: its final checkpoint;
- `RUN_ID@live`: the live weights of a run training in this process (else its newest saved weights, as chat does);
- a path to a saved sampler-weights folder.

A target's `identity` holds what decides its outputs (base model, weights path and the weights file's size and
modification time), so identical evaluations can reuse stored results; live weights have no stable identity and
are never reused. Opening a target's sampling client goes through cookbook_engine.chat.open_weights, the same way
chat reaches a model. Hosted `tinker://` checkpoints are not supported here yet. Not here: evaluating (evaluators.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cookbook_engine import models
from storage import statuses
from storage.input_error import InputError

LIVE = "live"


class TargetError(InputError, ValueError):
    """A model spec that names nothing usable; the message names the spec and why."""


@dataclass(frozen=True)
class ModelTarget:
    spec: str  # as written by the user
    label: str  # the leaderboard's row name
    base_model: str
    sampler_path: str | None = None  # None = the base model itself (or live weights)
    run_id: str | None = None
    step: int | None = None
    live: bool = False
    renderer: str = "auto"
    backend: str = "local"

    @property
    def identity(self) -> str:
        weights = ""
        if self.sampler_path:
            folder = Path(self.sampler_path)
            files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
            weights = ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
        return json.dumps([self.backend, self.base_model, self.sampler_path, weights, self.renderer])

    def chat_target(self):
        from cookbook_engine import chat

        if self.live:
            return chat.ChatTarget(
                f"latest:{self.run_id}",
                self.label,
                "latest",
                self.base_model,
                self.backend,
                None,
                self.run_id,
                self.renderer,
            )
        if self.sampler_path is None:
            return chat.base_target(self.base_model, self.backend)
        return chat.ChatTarget(
            f"checkpoint:{self.sampler_path}",
            self.label,
            "checkpoint",
            self.base_model,
            self.backend,
            self.sampler_path,
            self.run_id,
            self.renderer,
        )


def parse_target(spec: str, store=None) -> ModelTarget:
    """The ModelTarget a spec names; TargetError when the run, step or folder does not exist."""
    spec = spec.strip()
    if not spec:
        raise TargetError("model: empty name; use base, RUN_ID, RUN_ID@STEP or a checkpoint folder")
    if spec == "base" or spec.startswith("base:"):
        model = models.canonical_name(spec.split(":", 1)[1] if ":" in spec else models.DEFAULT_MODEL)
        return ModelTarget(spec, "base" if spec == "base" else f"base:{model.rsplit('/', 1)[-1]}", model)
    if spec.startswith("tinker://"):
        raise TargetError(f"{spec}: hosted Tinker checkpoints are not supported by evaluations yet")
    if Path(spec).expanduser().is_dir():
        return _folder_target(spec)
    from storage import Store

    return _run_target(spec, store or Store.default())


def _folder_target(spec: str) -> ModelTarget:
    folder = Path(spec).expanduser().resolve()
    config_file = folder / "adapter_config.json"
    if not config_file.exists():
        raise TargetError(f"{spec}: not a saved weights folder (no adapter_config.json in it)")
    base = json.loads(config_file.read_text()).get("base_model_name_or_path") or models.DEFAULT_MODEL
    return ModelTarget(spec, folder.name, base, str(folder))


def _run_target(spec: str, store) -> ModelTarget:
    run_id, _, at = spec.partition("@")
    run = store.get_run(run_id)
    if run is None:
        raise TargetError(f"{spec}: no run {run_id!r} (and no folder of that name); see `cookbook runs`")
    renderer = (run.get("config") or {}).get("renderer") or "auto"
    common = dict(base_model=run["base_model"], run_id=run_id, renderer=renderer, backend=run["backend"])
    if at == LIVE:
        return ModelTarget(spec, f"{run['name']}@live", live=True, **common)
    saved = [c for c in store.list_checkpoints(run_id) if c.get("sampler_path")]
    if not saved:
        raise TargetError(f"{spec}: run {run_id} has saved no weights yet")
    if at in ("", "final"):
        finals = [c for c in saved if (c.get("loop_state") or {}).get("final")]
        if at == "final" and not finals:
            raise TargetError(f"{spec}: run {run_id} has no final checkpoint (status {run['status']})")
        chosen = max(finals or saved, key=lambda c: (c["step"], c["created_at"]))
    else:
        chosen = _at_step(spec, at, saved)
    return ModelTarget(
        spec, f"{run['name']}@{chosen['step']}", sampler_path=chosen["sampler_path"], step=int(chosen["step"]), **common
    )


def _at_step(spec: str, at: str, saved: list[dict]) -> dict:
    try:
        step = int(at)
    except ValueError:
        raise TargetError(f"{spec}: after @ write a step number, 'final' or 'live'") from None
    matching = [c for c in saved if int(c["step"]) == step]
    if not matching:
        steps = ", ".join(str(c["step"]) for c in sorted(saved, key=lambda c: c["step"]))
        raise TargetError(f"{spec}: no checkpoint at step {step}; saved steps: {steps}")
    return max(matching, key=lambda c: c["created_at"])


def list_choices(store=None) -> list[tuple[str, str]]:
    """(spec, label) of every model a person can evaluate: the default base model, the live weights of each active
    run, each run's newest saved weights and every saved checkpoint, newest runs first."""
    from storage import Store

    store = store or Store.default()
    choices = [("base", f"base · {models.DEFAULT_MODEL.rsplit('/', 1)[-1]}")]
    checkpoints: dict[str, list[dict]] = {}
    for row in store.list_checkpoints():
        if row.get("sampler_path"):
            checkpoints.setdefault(row["run_id"], []).append(row)
    for run in store.list_runs():
        if run["status"] in statuses.ACTIVE:
            choices.append((f"{run['run_id']}@live", f"{run['name']} · live weights ({run['status']})"))
        saved = sorted(checkpoints.get(run["run_id"], []), key=lambda c: -int(c["step"]))
        if saved:
            choices.append((run["run_id"], f"{run['name']} · newest saved (step {saved[0]['step']})"))
        for row in saved[1:]:
            choices.append((f"{run['run_id']}@{row['step']}", f"{run['name']} · step {row['step']}"))
    return choices
