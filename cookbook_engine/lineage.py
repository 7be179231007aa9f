"""Lineage: where a run's weights came from (base -> SFT -> DPO -> RL) and the settings that start the next stage
from one of its checkpoints.

Every run records the checkpoint it started from (`parent_checkpoint`, a saved state) and that checkpoint's run
(`parent_run_id`); `chain()` walks those links back to the base model; a distillation run also names its teacher
(a checkpoint, shown as the teacher's run and step: the student ← teacher edge). `next_stage()` gives the settings
of a DPO or RL run that starts from a checkpoint (DPO's and RL's `start_checkpoint`; the new run's parent is then
recorded by the RunManager), or of a distillation run that learns from it as its teacher. Reads storage only;
starts nothing and renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

KIND_NAMES = {"sl": "SFT", "dpo": "DPO", "rl": "RL", "distill": "Distill"}
NEXT_KINDS = ("dpo", "rl", "distill")
MAX_DEPTH = 50  # a chain longer than this is a loop in corrupted records


@dataclass
class Stage:
    run_id: str
    name: str
    kind: str
    status: str
    parent_checkpoint: str | None  # the saved state this run started from (None: the base model)
    parent_step: int | None  # that checkpoint's step in its run
    teacher: str = ""  # distillation: the teacher, e.g. "SFT facts-sft step 25", "base" or a hosted model name


def chain(run_id: str, store) -> list[Stage]:
    """The run and its ancestors, oldest first (the first stage started from the base model). KeyError if the run
    is unknown; an ancestor that was deleted ends the chain where it is."""
    run = store.get_run(run_id)
    if run is None:
        raise KeyError(f"run {run_id}: not found")
    checkpoints = store.list_checkpoints()
    steps = {row["state_path"]: row["step"] for row in checkpoints if row.get("state_path")}
    stages: list[Stage] = []
    while run is not None and len(stages) < MAX_DEPTH:
        parent = run.get("parent_checkpoint")
        teacher = teacher_label((run.get("config") or {}).get("teacher", ""), checkpoints, store)
        stage = Stage(run["run_id"], run["name"], run["kind"], run["status"], parent, steps.get(parent), teacher)
        stages.append(stage)
        run = store.get_run(run["parent_run_id"]) if run.get("parent_run_id") else None
    return stages[::-1]


def teacher_label(teacher: str, checkpoints: list[dict], store) -> str:
    """A distillation teacher as a person reads it: its run's kind, name and step when it is a checkpoint here."""
    for row in checkpoints:
        if teacher and teacher in (row.get("state_path"), row.get("sampler_path")):
            run = store.get_run(row["run_id"])
            if run is not None:
                return f"{KIND_NAMES.get(run['kind'], run['kind'])} {run['name']} step {row['step']}"
    return teacher


def describe(stages: list[Stage], base_model: str) -> str:
    """e.g. "SmolLM2-135M-Instruct → SFT facts-sft (from base) → DPO prefs (from step 20)"."""
    parts = [base_model.rsplit("/", 1)[-1]]
    for stage in stages:
        origin = (
            "base"
            if stage.parent_checkpoint is None
            else (f"step {stage.parent_step}" if stage.parent_step is not None else "a deleted checkpoint")
        )
        teacher = f", teacher {stage.teacher}" if stage.teacher else ""
        parts.append(f"{KIND_NAMES.get(stage.kind, stage.kind)} {stage.name} (from {origin}{teacher})")
    return " → ".join(parts)


def next_stage(kind: str, run: dict, state_path: str) -> dict:
    """The whole stored config (today's defaults for `kind`, as `config.to_dict` writes it) of a `kind` run (dpo or
    rl) that starts from `state_path`, a saved state of `run`; for distill, a fresh student on the base model that
    learns from that checkpoint as its teacher. Whole, so that `config.from_dict` reads today's defaults for what it
    does not carry, not what runs stored before a setting existed trained with."""
    from cookbook_engine import config as cfg

    if kind not in NEXT_KINDS:
        raise ValueError(f"next stage {kind!r}: choose one of {', '.join(NEXT_KINDS)}")
    if not state_path:
        raise ValueError(f"run {run['run_id']}: this checkpoint has no saved state to start from")
    config = run.get("config") or {}
    parent = cfg.from_dict(run["kind"], {**config, "model": run["base_model"], "backend": run["backend"]})
    carried = {
        "model": run["base_model"],
        "backend": run["backend"],
        "renderer": config.get("renderer", "auto"),
        **cfg.lora_layers_used(parent),  # the checkpoint's LoRA layers: its auto settings resolved as it trained
        **({"teacher": state_path} if kind == "distill" else {"start_checkpoint": state_path}),
        "name": "",
    }
    return cfg.to_dict(cfg.with_values(cfg.CONFIG_TYPES[kind](), carried))
