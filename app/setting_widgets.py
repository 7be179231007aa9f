"""How the New run form draws each run setting: its widget, label and key suffix, by the setting's command-line name,
and where a kind's form draws a setting differently or leaves it out. The engine's settings carry only what they
mean (help, bounds, choices: cookbook_engine/settings.py); this is their presentation. Not here: drawing a widget
(setting_inputs.py), laying the form out (forms.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Widget:
    kind: str  # one of KINDS; "multiselect" holds a comma-separated list of its options, "tristate" auto/on/off
    label: str
    key: str = ""  # the widget's key suffix (default: the setting's last name)


KINDS = ("number", "select", "checkbox", "tristate", "text", "textarea", "multiselect")
TRISTATE_LABELS = {None: "auto", True: "on", False: "off"}  # a "tristate" widget's choices for a bool that may be auto

WIDGETS: dict[str, Widget | None] = {
    "renderer": Widget("select", "Renderer"),
    "name": Widget("text", "Run name (optional)"),
    "lora_rank": Widget("select", "LoRA rank", key="rank"),
    "train_attn": Widget("checkbox", "LoRA on attention"),
    "train_mlp": Widget("tristate", "LoRA on MLP"),
    "learning_rate": Widget("number", "Learning rate"),
    "lr_schedule": Widget("select", "Schedule", key="schedule"),
    "batch_size": Widget("number", "Batch size", key="batch"),
    "num_epochs": Widget("number", "Epochs", key="epochs"),
    "max_steps": Widget("number", "Max steps"),
    "max_length": Widget("number", "Max length (tokens)"),
    "save_every": Widget("number", "Save every (steps)"),
    "eval_every": Widget("number", "Eval every (steps)"),
    "seed": Widget("number", "Seed"),
    "beta1": Widget("number", "Adam beta1"),
    "beta2": Widget("number", "Adam beta2"),
    "eps": Widget("number", "Adam eps"),
    "weight_decay": Widget("number", "Weight decay", key="wd"),
    "grad_clip_norm": Widget("number", "Gradient clip norm (0 = off)", key="clip"),
    "test_fraction": Widget("number", "Held-out fraction"),
    "train_on_what": Widget("select", "Train on", key="train_on"),
    "overlong": Widget("select", "Too-long examples"),
    "max_examples": Widget("number", "Max examples (0 = all)"),
    "dpo_beta": Widget("number", "DPO beta"),
    "rpo_alpha": Widget("number", "RPO alpha"),
    "start_checkpoint": Widget("select", "Start from checkpoint"),
    "group_size": Widget("number", "Group size"),
    "groups_per_batch": Widget("number", "Groups per batch", key="groups"),
    "max_tokens": Widget("number", "Max tokens per sample"),
    "temperature": Widget("number", "Temperature"),
    "top_p": Widget("number", "Top-p"),
    "loss_fn": Widget("select", "Loss"),
    "scale_rewards": Widget("select", "Scale advantages by"),
    "partial_credit": Widget("number", "Partial credit (arithmetic)"),
    "lora_a": Widget("select", "LoRA input side (A)"),
    "clip_low_threshold": Widget("number", "PPO clip low", key="clip_low"),
    "clip_high_threshold": Widget("number", "PPO clip high", key="clip_high"),
    "num_substeps": Widget("number", "Optimizer substeps", key="substeps"),
    "num_eval_problems": Widget("number", "Eval problems", key="eval_problems"),
    "max_turns": Widget("number", "Max turns (multi-turn envs)"),
    "tools": Widget("text", "Tools (calculator)"),
    "kl_penalty_coef": Widget("number", "KL penalty", key="kl_coef"),
    "kl_reference": Widget("select", "KL reference"),
    "pipelining.stream_minibatch": Widget("checkbox", "Stream minibatches"),
    "pipelining.num_minibatches": Widget("number", "Minibatches per substep"),
    "pipelining.max_steps_off_policy": Widget("number", "Max steps off-policy (0 = on-policy)", key="off_policy"),
    "anchor.dataset": Widget("select", "Anchor chats"),
    "anchor.rows": Widget("number", "Anchor chats per step", key="anchor_rows"),
    "anchor.coef": Widget("number", "Anchor weight", key="anchor_coef"),
    "teacher": Widget("select", "Teacher"),
    "context": Widget("textarea", "Context the teacher sees (the student never does)"),
    "log_to": Widget("multiselect", "Log to (experiment trackers)"),
    "wandb_project": Widget("text", "W&B project"),
    "wandb_name": Widget("text", "W&B run name"),
    "mlflow_tracking_uri": Widget("text", "MLflow tracking URI", key="mlflow_uri"),
    "mlflow_experiment": Widget("text", "MLflow experiment"),
}
BY_KIND: dict[tuple[str, str], Widget | None] = {
    ("dpo", "max_examples"): None,
    ("rl", "batch_size"): None,
    ("rl", "num_epochs"): None,
    ("rl", "test_fraction"): None,
    ("distill", "start_checkpoint"): Widget("select", "Student starts from"),
    ("distill", "kl_penalty_coef"): Widget("number", "Teacher KL weight", key="kl_coef"),
}
# Settings only one mode of a kind uses (its mode is picked above the form: distillation's on_policy or prompt).
MODE_ONLY: dict[tuple[str, str], str] = {
    ("distill", "groups_per_batch"): "on_policy",
    ("distill", "kl_penalty_coef"): "on_policy",
    ("distill", "batch_size"): "prompt",
    ("distill", "context"): "prompt",
}


def widget_for(kind: str, name: str, mode: str = "") -> Widget | None:
    """The widget a `kind` run's form draws for setting `name` (in `mode`, when the kind has modes); None when the
    form leaves it out (a picker above the form, the command line only, or another mode's setting)."""
    if mode and MODE_ONLY.get((kind, name), mode) != mode:
        return None
    if (kind, name) in BY_KIND:
        return BY_KIND[(kind, name)]
    return WIDGETS.get(name)
