"""The New run page's pieces: model and data pickers, one settings form per algorithm, and the pre-start check.

The pickers come first so that what depends on them (the suggested learning rate and its reason, the fields of a
dataset source) follows them; the hyperparameters below are plain widgets (no `st.form`), so each value entered is
kept at once: the page remembers each algorithm's settings for the session (`remember`, `base_config`), and a
switch of algorithm or page loses no edit, checked or not. Both buttons, "Check settings" and "Start run", run the
same checks as the CLI's `--dry-run` (config.validate, then runs.preflight: model, renderer, every data row) and
show the equivalent `cookbook ...` command. Starting hands the config to the RunManager; nothing here trains.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import streamlit as st

from app import nav, settings_view, state, state_keys, widgets
from app.setting_inputs import setting_input
from cookbook_engine import compute_lease, config as cfg, models, renderers, speed
from cookbook_engine.data import loading as datasets, mix
from cookbook_engine.data.builtin import BUILTIN
from cookbook_engine.rl import envs
from cookbook_engine.runs import loop_module
from cookbook_engine.sl import suggested as suggested_settings
from cookbook_engine.training import estimate as estimate_time, skeleton as train_loop
from cookbook_engine.training.learning_rate import learning_rate_with_reason, model_rate
from cookbook_engine.training.lora_a import lora_a_used, rank_note
from storage import statuses
from storage.input_error import BAD_INPUT

DATA_KIND = {"sl": "chat", "dpo": "preference", "rl": "rl", "distill": "chat"}
SAMPLING_KINDS = estimate_time.SAMPLING_KINDS  # runs that sample groups: their batches are groups of samples
SOURCES = ("Built-in", "Uploaded", "Hugging Face", "File path")
TRAIN_ON_LABELS = {
    "last_assistant_message": "Last assistant message",
    "all_assistant_messages": "All assistant messages",
    "all_messages": "All messages",
}
RL_ENV_HELP = {
    "arithmetic": "Built-in additions, fresh each step, operands growing to two digits over the run, three in four "
    "carrying into the tens; reward 1 when the reply commits to the right number (a hedge over several scores 0), "
    "a wrong one a share of its digits in place (Partial credit, below). 100 two-digit sums are held out "
    "(builtin:arithmetic).",
    "code": "Built-in Python function tasks; the reply's ```python block runs against unit tests in the sandbox.",
    "custom": "Your own prompt/answer file, scored by the grader you pick.",
    "calculator": "Multi-turn: two-digit products; the model may call a calculator (<calc>47 * 38</calc>), gets the "
    "result back and answers; reward on the final answer. Max turns (below) caps its replies.",
}
GRADER_HELP = {
    "exact": "reply equals the answer (case and spacing ignored)",
    "numeric": "the reply's one committed number equals the answer (a hedge over several numbers scores 0)",
    "contains": "the answer appears in the reply",
    "regex": "the answer is a regex that must match",
    "python_tests": "the answer is Python asserts, run against the reply's code in the sandbox",
}


@dataclass
class ModelChoice:
    model: str
    backend: str
    suggested_lr: float | None
    reason: str
    error: str | None = None


# ---------------------------------------------------------------------------------------- base config


def base_config(kind: str) -> cfg.CommonConfig:
    """The config the form's widgets for `kind` are drawn from. When they are drawn anew (the page opened, the
    algorithm switched back) it is what the form last held for `kind` in this browser session, else a duplicated
    run's settings, else the defaults; while they stay on the page it stays what they were drawn from (the widgets
    hold what was entered since), so no widget is reset under the user's hands."""
    starts = st.session_state.setdefault(state_keys.NEW_RUN_STARTS, {})
    if kind not in starts or key(kind, "model") not in st.session_state:  # every kind's form draws the model picker
        draft = st.session_state.get(state_keys.NEW_RUN_DRAFTS, {}).get(kind)
        duplicate = st.session_state.get(state_keys.NEW_RUN_BASE)
        if draft is not None:
            starts[kind] = draft
        elif duplicate and duplicate["kind"] == kind:
            starts[kind] = cfg.from_dict(kind, duplicate["config"])
        else:
            starts[kind] = cfg.CONFIG_TYPES[kind]()
    return starts[kind]


def remember(kind: str, config: cfg.CommonConfig) -> None:
    """Keep what the form holds for `kind`, so switching algorithm or page and back finds it again."""
    st.session_state[state_keys.NEW_RUN_KIND] = kind
    st.session_state.setdefault(state_keys.NEW_RUN_DRAFTS, {})[kind] = config


def edited(kind: str) -> bool:
    """Whether the form holds for `kind` anything other than the defaults."""
    draft = st.session_state.get(state_keys.NEW_RUN_DRAFTS, {}).get(kind)
    return draft is not None and draft != cfg.CONFIG_TYPES[kind]()


def start_over(kind: str | None = None) -> None:
    """Forget what the form held (for `kind`, or for every algorithm); with `kind` None, the form's widgets are
    drawn anew from the defaults or a duplicated run (new keys)."""
    drafts = st.session_state.setdefault(state_keys.NEW_RUN_DRAFTS, {})
    starts = st.session_state.setdefault(state_keys.NEW_RUN_STARTS, {})
    for held in (drafts, starts):
        for name in [kind] if kind else list(held):
            held.pop(name, None)
    if kind is None:
        st.session_state[state_keys.FORM_GENERATION] = st.session_state.get(state_keys.FORM_GENERATION, 0) + 1


def key(kind: str, name: str) -> str:
    """Widget keys change when a run is duplicated, so the widgets take the duplicated values as defaults."""
    return f"{kind}-{st.session_state.get(state_keys.FORM_GENERATION, 0)}-{name}"


# ---------------------------------------------------------------------------------------- model


def model_section(kind: str, base: cfg.CommonConfig) -> ModelChoice:
    tinker = state.tinker_status()
    options = ["default", "folder"]
    labels = {
        "default": f"{models.DEFAULT_MODEL} · local default (135M, CPU)",
        "folder": "A local model folder (Hugging Face format)…",
    }
    for name in tinker.models if tinker.state == "ok" else []:
        options.append(f"tinker:{name}")
        labels[f"tinker:{name}"] = f"{name} · Tinker (hosted)"
    if base.backend == "tinker" and f"tinker:{base.model}" not in options:
        options.append(f"tinker:{base.model}")
        labels[f"tinker:{base.model}"] = f"{base.model} · Tinker (hosted)"
    if base.backend == "tinker":
        default = f"tinker:{base.model}"
    elif models.canonical_name(base.model) == models.DEFAULT_MODEL:
        default = "default"
    else:
        default = "folder"
    help_text = {
        "no_key": "Set TINKER_API_KEY before starting the studio to train hosted models.",
        "checking": "Checking the Tinker service for hosted models…",
    }.get(tinker.state, tinker.message)
    choice = str(
        st.selectbox(
            "Model",
            options,
            index=options.index(default),
            format_func=lambda o: labels[o],
            key=key(kind, "model"),
            help=f"Base model to fine-tune with LoRA. {help_text}",
        )
    )
    if choice == "default":
        model, backend = models.DEFAULT_MODEL, "local"
    elif choice == "folder":
        model = st.text_input(
            "Model folder",
            value=base.model if default == "folder" else "",
            placeholder="/path/to/a/hf-model-folder (with config.json)",
            key=key(kind, "folder"),
        )
        backend = "local"
        if not model.strip():
            return ModelChoice("", backend, None, "", "Give the path of a local model folder.")
    else:
        model, backend = choice.removeprefix("tinker:"), "tinker"
    return _suggestion(model.strip(), backend)


def _suggestion(model: str, backend: str) -> ModelChoice:
    try:
        rate, why = model_rate(model, backend)
    except models.ModelError as exc:
        return ModelChoice(model, backend, None, "", str(exc))
    return ModelChoice(model, backend, rate, why)


def auto_draft(kind: str, choice: ModelChoice, data: dict, setting: str) -> cfg.CommonConfig:
    """The config these choices and data make with `setting` on auto, for asking what auto resolves to."""
    return cfg.CONFIG_TYPES[kind](model=choice.model, backend=choice.backend, **{**data, setting: None})


def suggested_rate(kind: str, choice: ModelChoice, data: dict) -> tuple[float | None, str]:
    """The rate learning_rate=auto trains with for these choices and why: the loops' own decision
    (learning_rate_with_reason); (None, "") while the model cannot be resolved (the model picker says why)."""
    if choice.suggested_lr is None:
        return None, ""
    return learning_rate_with_reason(auto_draft(kind, choice, data, "learning_rate"))


def rank_auto_label(kind: str, choice: ModelChoice, data: dict) -> dict:
    """The LoRA rank select's auto option, named with the rank it resolves to for this data (the SFT demo's facts: 8,
    measured with A fixed; elsewhere 32), so a newcomer sees the number a run will train."""
    return {} if choice.error else {"auto_label": rank_note(auto_draft(kind, choice, data, "lora_rank"))}


def headline(reason: str) -> str:
    """A measured rate's reason ("measured on X ...: what it gave; see docs/DEFAULTS.md") as how it was measured and
    where to read the rest, for the caption under the rate (the rate's help holds the whole reason); any other
    reason as it is. The RL one whole is a paragraph of every seed's figures."""
    how, _, rest = reason.partition(": ")
    source = rest.rpartition("; see ")[2] if "; see " in rest else ""
    return f"{how} (what it gave: the ? beside Learning rate, and {source})" if source else reason


def measure_speed(choice: ModelChoice) -> None:
    """Measure this machine's speed for a local model in the background (once; cached), for the estimate; only
    once the model is ready, so it never races the default model's preparation."""
    if (
        choice.backend == "local"
        and choice.model
        and not choice.error
        and (models.canonical_name(choice.model) != models.DEFAULT_MODEL or models.default_model_ready())
    ):
        speed.calibrate_in_background(choice.model)


# ---------------------------------------------------------------------------------------- data


MIX = "Mix"  # several datasets (SL: dataset=a:2,b:1) or envs (RL: env=arithmetic:2,code:1) with weights


def _source_of(spec: str, uploaded_paths: set[str]) -> str:
    if spec and mix.is_mix(spec):
        return MIX
    if not spec or spec.startswith("builtin:") or spec in BUILTIN:
        return "Built-in"
    if spec in uploaded_paths:
        return "Uploaded"
    if spec.startswith("hf:"):
        return "Hugging Face"
    return "File path"


def dataset_section(kind: str, data_kind: str | tuple[str, ...], spec: str, label: str = "Dataset") -> str:
    """A dataset picker for one kind of data (chat, preference, rl), or several; returns a dataset spec."""
    data_kinds = (data_kind,) if isinstance(data_kind, str) else data_kind
    uploaded = [d for d in state.store().list_datasets() if d["kind"] in data_kinds and d["source"] != "builtin"]
    source = st.segmented_control(
        f"{label} source",
        (*SOURCES, MIX) if kind == "sl" else SOURCES,
        default=_source_of(spec, {d["path"] for d in uploaded}),
        key=key(kind, "source"),
        required=True,
    )
    if source == MIX:
        return mix_section(kind, spec, uploaded)
    if source == "Built-in":
        names = [name for name, d in BUILTIN.items() if d.kind in data_kinds]
        current = spec.removeprefix("builtin:")
        name = st.selectbox(
            label, names, index=names.index(current) if current in names else 0, key=key(kind, "builtin")
        )
        st.caption(BUILTIN[name].description)
        return f"builtin:{name}"
    if source == "Uploaded":
        if not uploaded:
            st.info(f"No uploaded {' or '.join(data_kinds)} datasets yet.", icon=":material/upload:")
            nav.link("datasets", "Upload one on the Datasets page")
            return ""
        paths_ = [d["path"] for d in uploaded]
        shown = {d["path"]: f"{d['name']} ({d['num_rows']} rows)" for d in uploaded}
        return (
            st.selectbox(
                label,
                paths_,
                index=paths_.index(spec) if spec in paths_ else 0,
                format_func=lambda path: shown[path],
                key=key(kind, "uploaded"),
            )
            or ""
        )
    if source == "Hugging Face":
        name = st.text_input(
            "Hub dataset",
            value=spec.removeprefix("hf:") if spec.startswith("hf:") else "",
            placeholder="owner/name or owner/name:split",
            key=key(kind, "hub"),
            help="Loaded only when the Hugging Face hub is reachable from this machine.",
        )
        name = name.strip().removeprefix("hf:")
        return f"hf:{name}" if name else ""
    path = st.text_input(
        "Data file",
        value=spec if _source_of(spec, set()) == "File path" else "",
        placeholder="/path/to/data.jsonl (.jsonl, .json, .csv or .parquet)",
        key=key(kind, "path"),
    )
    return path.strip()


DEFAULT_MIX = "builtin:facts:2,builtin:persona:1"


def mix_section(kind: str, spec: str, uploaded: list[dict]) -> str:
    """A list of datasets with weights (built-in, uploaded, or any path typed in); returns `a:2,b:1`."""
    try:
        parts = mix.parse_mix(spec if mix.is_mix(spec) else DEFAULT_MIX)
    except datasets.DatasetError:  # a mix the check refused: start the list again
        parts = mix.parse_mix(DEFAULT_MIX)
    names = [f"builtin:{name}" for name, d in BUILTIN.items() if d.kind == "chat"] + [d["path"] for d in uploaded]
    table = st.data_editor(
        [{"dataset": part.spec, "weight": part.weight} for part in parts],
        column_config={
            "dataset": st.column_config.SelectboxColumn(
                "Dataset", options=list(dict.fromkeys(names + [p.spec for p in parts])), required=True, width="medium"
            ),
            "weight": st.column_config.NumberColumn(
                "Weight", min_value=0.0, step=0.5, required=True, width="small", help="Share of each epoch's examples"
            ),
        },
        num_rows="dynamic",
        hide_index=True,
        key=key(kind, "mix"),
    )
    st.caption(
        "Each epoch has as many examples as the datasets' rows together, split by weight (2 and 1: two thirds and a "
        "third); each dataset's held-out share is logged as test/<name>/nll."
    )
    rows = [row for row in table if row.get("dataset")]
    return ",".join(f"{row['dataset']}:{row['weight'] if row.get('weight') is not None else 1:g}" for row in rows)


def rl_task_section(base: cfg.RLConfig) -> tuple[str, str, str]:
    """(env, dataset, grader) for an RL run: one env, or a mix of envs with weights."""
    current = MIX if mix.is_mix(base.env) else base.env
    options = [*cfg.RL_ENVS, MIX]
    env = st.segmented_control(
        "Environment", options, default=current if current in options else None, key=key("rl", "env"), required=True
    )
    env = env or cfg.RL_ENVS[0]
    if env == MIX:
        env = env_mix_section(base.env)
        names = envs.env_names(env) if env else []
    else:
        st.caption(RL_ENV_HELP[env])
        names = [env]
    if "custom" not in names:
        return env, "", base.grader
    dataset = dataset_section("rl", "rl", base.dataset, label="Problems")
    grader = st.selectbox(
        "Grader",
        list(cfg.GRADERS),
        index=list(cfg.GRADERS).index(base.grader),
        format_func=lambda g: f"{g}: {GRADER_HELP[g]}",
        key=key("rl", "grader"),
        help="A row's own `grader` column wins over this choice.",
    )
    return env, dataset, grader


DEFAULT_ENV_MIX = "arithmetic:1,code:1"


def env_mix_section(spec: str) -> str:
    """A list of envs with weights; returns `arithmetic:2,code:1` (custom's problems are picked below it)."""
    try:
        parts = mix.parse_mix(spec if mix.is_mix(spec) else DEFAULT_ENV_MIX, "env")
    except datasets.DatasetError:  # a mix the check refused: start the list again
        parts = mix.parse_mix(DEFAULT_ENV_MIX, "env")
    table = st.data_editor(
        [{"env": part.spec, "weight": part.weight} for part in parts],
        column_config={
            "env": st.column_config.SelectboxColumn(
                "Environment", options=list(cfg.RL_ENVS), required=True, width="medium"
            ),
            "weight": st.column_config.NumberColumn(
                "Weight", min_value=0.0, step=0.5, required=True, width="small", help="Share of each step's groups"
            ),
        },
        num_rows="dynamic",
        hide_index=True,
        key=key("rl", "env-mix"),
    )
    st.caption(
        "Each step's groups are split between the environments by weight (2 and 1: two thirds and a third); each "
        "one's reward and accuracy are logged as env/<name>/..., and Transcripts filters by it."
    )
    rows = [row for row in table if row.get("env")]
    return ",".join(f"{row['env']}:{row['weight'] if row.get('weight') is not None else 1:g}" for row in rows)


DISTILL_MODE_LABELS = {"on_policy": "On-policy", "prompt": "Prompt (context)"}
DISTILL_MODE_HELP = {
    "on_policy": "The student samples replies to the prompts; the teacher scores every token, and the student learns "
    "to lower its reverse KL to the teacher.",
    "prompt": "The teacher answers the prompts with a context before them (a system prompt, builtin:pip or a .json "
    "file of messages); the student learns the teacher's replies without the context.",
}


def distill_task_section(base: cfg.DistillConfig) -> tuple[str, str]:
    """(mode, dataset) for a distillation run: on-policy or prompt distillation, and the prompts."""
    mode = st.segmented_control(
        "Distillation mode",
        list(cfg.DISTILL_MODES),
        format_func=lambda mode: DISTILL_MODE_LABELS[mode],
        default=base.mode,
        key=key("distill", "mode"),
        required=True,
    )
    mode = mode or base.mode
    st.caption(DISTILL_MODE_HELP[mode])
    # the prompts: a chat dataset's conversations up to their last reply, or a prompt/answer file's prompts
    return mode, dataset_section("distill", ("chat", "rl"), base.dataset, label="Prompts")


# ---------------------------------------------------------------------------------------- the form


def _checkpoint_options(kind: str, base: cfg.CommonConfig) -> tuple[list[str], dict[str, str]]:
    runs_by_id = {r["run_id"]: r for r in state.store().list_runs()}
    options, labels = [""], {"": "None: a fresh LoRA on the base model"}
    for checkpoint in state.store().list_checkpoints():
        run = runs_by_id.get(checkpoint["run_id"])
        if run and checkpoint.get("state_path"):
            options.append(checkpoint["state_path"])
            labels[checkpoint["state_path"]] = f"{run['name']} · step {checkpoint['step']}"
    start = getattr(base, "start_checkpoint", "")
    if start and start not in options:
        options.append(start)
        labels[start] = start
    return options, labels


def settings_form(
    kind: str, base: cfg.CommonConfig, choice: ModelChoice, data: dict
) -> tuple[cfg.CommonConfig, str | None]:
    """The hyperparameter form; returns (config, "check" | "start" | None)."""
    k = lambda name: key(kind, name)  # noqa: E731
    suggested, reason = suggested_rate(kind, choice, data)
    values: dict = {"model": choice.model, "backend": choice.backend, **data}

    def put(where: Any, name: str, **overrides: Any) -> None:
        values[name] = setting_input(where, base, name, k, **overrides)

    sampling = kind in SAMPLING_KINDS and values.get("mode") != "prompt"  # prompt distillation steps as SL does
    with st.container(border=True):
        st.markdown("**Run**")
        c1, c2 = st.columns(2)
        put(c1, "name", placeholder="defaults to the run id, e.g. sl-20250101-120000-ab12")
        put(c2, "renderer", options=renderers.renderer_names())
        st.markdown("**Optimization**")
        c1, c2, c3, c4 = st.columns(4)
        put(c1, "lora_rank", **rank_auto_label(kind, choice, data))
        # empty = learning_rate=auto: the engine uses the suggested rate; 0 or less is refused by the check
        put(
            c2,
            "learning_rate",
            placeholder=f"suggested: {suggested:g}" if suggested is not None else "auto",
            key=k(f"lr-{choice.backend}-{choice.model}"),
            help=f"Leave empty for the suggested rate for this model, {suggested:g} ({reason})."
            if suggested is not None
            else "Leave empty for the model's suggested rate.",
        )
        put(c3, "lr_schedule")
        put(c4, "groups_per_batch" if sampling else "batch_size")
        if suggested is not None:
            st.caption(
                f"Suggested learning rate for {choice.model.rsplit('/', 1)[-1]}: **{suggested:g}**, {headline(reason)}."
            )
        st.markdown("**Length and cadence**")
        c1, c2, c3, c4, c5 = st.columns(5)
        put(c1, "group_size" if sampling else "num_epochs")
        for where, name in zip((c2, c3, c4, c5), ("max_steps", "max_length", "save_every", "eval_every")):
            put(where, name)
        values["evals"] = ",".join(
            st.multiselect(
                "Eval sets (validation)",
                eval_set_choices(base.evals),
                default=[name for name in base.evals.split(",") if name.strip()],
                key=k("evals"),
                help="Eval sets run every eval_every steps and at the end, logged as test/<set>/<metric>, besides "
                "the held-out test split; the Evaluate page scores finished checkpoints on the same sets.",
                placeholder="none: only the held-out test split",
            )
        )
        if isinstance(base, cfg.SLConfig):
            _sl_fields(base, put)
        elif isinstance(base, cfg.DPOConfig):
            _dpo_fields(base, put)
        elif isinstance(base, cfg.RLConfig):
            _rl_fields(base, put, values.get("env", base.env))
        elif isinstance(base, cfg.DistillConfig):
            _distill_fields(base, put, values.get("mode", base.mode))
        with st.expander("Advanced: seed, optimizer and LoRA layers"):
            for row in (
                ("seed", "weight_decay", "grad_clip_norm"),
                ("beta1", "beta2", "eps"),
                ("train_attn", "train_mlp"),
            ):
                for where, name in zip(st.columns(3), row):
                    put(where, name)
        with st.expander("Experiment trackers: W&B, MLflow, TensorBoard"):
            put(st, "log_to", placeholder="none: the studio only")
            for pair in (("wandb_project", "wandb_name"), ("mlflow_tracking_uri", "mlflow_experiment")):
                for where, name in zip(st.columns(2), pair):
                    put(where, name)
        c1, c2, _ = st.columns([1, 1, 3])
        check = c1.button("Check settings", icon=":material/fact_check:", width="stretch", key=k("check"))
        start = c2.button("Start run", type="primary", icon=":material/play_arrow:", width="stretch", key=k("start"))
    config = cfg.with_values(base, values)
    return config, "start" if start else "check" if check else None


def eval_set_choices(current: str) -> list[str]:
    """The eval sets the form offers: the built-in ones, the uploaded datasets, and any the config names already."""
    from cookbook_engine.evals import sets

    names = [row["name"] for row in sets.list_builtin()] + [d["path"] for d in state.store().list_datasets()]
    return list(dict.fromkeys(names + [name.strip() for name in current.split(",") if name.strip()]))


Put = Callable[..., None]  # put(container, setting name, **widget overrides): draw the setting, keep its value


def _sl_fields(base: cfg.SLConfig, put: Put) -> None:
    st.markdown("**Supervised data**")
    c1, c2, c3, c4 = st.columns(4)
    put(c1, "train_on_what", format_func=TRAIN_ON_LABELS.get)
    put(c2, "test_fraction")
    put(c3, "overlong")
    put(c4, "max_examples")
    put(st.columns(4)[0], "lora_a")
    _anchor_fields(base, put)


def _anchor_fields(base: cfg.CommonConfig, put: Put) -> None:
    """Ordinary chats the run keeps answering as the base model does (SL, DPO and RL)."""
    current = base.anchor.dataset  # type: ignore[attr-defined]
    uploaded = [d["path"] for d in state.store().list_datasets() if d["kind"] == "chat" and d["source"] != "builtin"]
    options = list(dict.fromkeys(["", "builtin:replay", *uploaded, *([current] if current else [])]))
    labels = {"": "None", "builtin:replay": "builtin:replay (292 ordinary questions, the base model's replies)"}
    with st.expander("Keep what the model knew: an anchor to the base model"):
        st.caption(
            "Each step also trains some ordinary chats toward the base model's own next-token distribution, so the "
            "run drifts less from what the model already answered right (docs/DEFAULTS.md has the measured effect)."
        )
        c1, c2, c3 = st.columns([2, 1, 1])
        put(c1, "anchor.dataset", options=options, format_func=lambda o: labels.get(o, o))
        put(c2, "anchor.rows")
        put(c3, "anchor.coef")


def _dpo_fields(base: cfg.DPOConfig, put: Put) -> None:
    st.markdown("**Preference optimization**")
    c1, c2, c3, c4 = st.columns([1, 1, 1, 2])
    put(c1, "dpo_beta")
    put(c2, "rpo_alpha")
    put(c3, "test_fraction")
    options, labels = _checkpoint_options("dpo", base)
    put(c4, "start_checkpoint", options=options, format_func=labels.get)
    put(st.columns(4)[0], "lora_a")
    _anchor_fields(base, put)


def _rl_fields(base: cfg.RLConfig, put: Put, env: str) -> None:
    """The RL settings; Max turns and Tools only when the env (or one of a mix's) is multi-turn."""
    st.markdown("**Sampling and loss**")
    multi_turn = any(name in cfg.MULTI_TURN_ENVS for name in envs.env_names(env))
    rows = [
        ("max_tokens", "temperature", "top_p", "loss_fn"),
        ("scale_rewards", "partial_credit", "num_substeps", "num_eval_problems"),
        *([("max_turns", "tools")] if multi_turn else []),
    ]
    for row in rows:
        for where, name in zip(st.columns(4), row):
            put(where, name)
    with st.expander("PPO clip range (used only when the loss is ppo)"):  # a form cannot hide them as Loss changes
        for where, name in zip(st.columns(4), ("clip_low_threshold", "clip_high_threshold")):
            put(where, name)
    options, labels = _checkpoint_options("rl", base)
    put(st, "start_checkpoint", options=options, format_func=labels.get)
    c1, c2, c3 = st.columns([1, 2, 1])
    put(c1, "kl_penalty_coef")
    reference_labels = {**labels, "": "The base model"}
    put(c2, "kl_reference", options=options, format_func=reference_labels.get)
    put(c3, "lora_a")
    _anchor_fields(base, put)
    with st.expander("Advanced: pipelining (streaming minibatches or off-policy sampling)"):
        for where, name in zip(st.columns(3), ("stream_minibatch", "num_minibatches", "max_steps_off_policy")):
            put(where, f"pipelining.{name}")


def _distill_fields(base: cfg.DistillConfig, put: Put, mode: str) -> None:
    st.markdown("**Teacher and student**")
    options, labels = _checkpoint_options("distill", base)
    teachers = ["base", *options[1:]] + ([base.teacher] if base.teacher and base.teacher not in options else [])
    teacher_labels = {**labels, "base": "The base model", base.teacher: labels.get(base.teacher, base.teacher)}
    c1, c2 = st.columns(2)
    put(c1, "teacher", options=teachers, format_func=teacher_labels.get)
    put(c2, "start_checkpoint", options=options, format_func=labels.get)
    if mode == "prompt":
        put(st, "context", placeholder="builtin:pip, a .json file of messages, or a system prompt", height=100)
        row: tuple[str, ...] = ("group_size", "max_tokens", "temperature", "top_p")
    else:
        row = ("max_tokens", "temperature", "top_p", "kl_penalty_coef", "num_epochs")
    for where, name in zip(st.columns(len(row)), row):
        put(where, name)


# ---------------------------------------------------------------------------------------- checking


@dataclass
class CheckResult:
    ok: bool
    problems: list[str]
    prepared: object = None
    summary: str = ""
    estimate: str = ""
    epochs_note: str = ""
    far_from_suggested: list[str] = field(default_factory=list)
    overwrite_note: str = ""


def check(config: cfg.CommonConfig) -> CheckResult:
    """The CLI's --dry-run checks, with progress shown while the model and data load."""
    from cookbook_engine import runs

    problems = cfg.validate(config)
    if not config.model:
        problems.insert(0, "model: pick a model")
    if getattr(config, "dataset", None) == "" and "custom" in envs.env_names(getattr(config, "env", "custom")):
        problems.append("dataset: pick or name a dataset")
    if problems:
        return CheckResult(False, problems)
    with st.status("Checking the model, renderer and every data row…", expanded=False) as status:
        try:
            if config.backend == "local" and models.canonical_name(config.model) == models.DEFAULT_MODEL:
                if not models.default_model_ready():
                    status.update(label="Preparing the default model (first time only, about 20 s)…")
                state.ensure_default_model()
            prepared = runs.preflight(config)
        except BAD_INPUT as exc:
            status.update(label="The check found a problem", state="error")
            return CheckResult(False, [str(exc)])
        except ImportError as exc:
            status.update(label="Not available in this build", state="error")
            return CheckResult(False, [f"{config.kind.upper()} training is not available in this build ({exc})"])
        status.update(label="Settings, model and data are fine", state="complete")
    summary = prepared.summary() if callable(getattr(prepared, "summary", None)) else ""
    test_fraction = getattr(config, "test_fraction", 0)
    if test_fraction and getattr(prepared, "test", None) == []:
        summary += (
            f". None held out: test_fraction={test_fraction} of so few examples rounds to 0 "
            f"(at least {datasets.MIN_ITEMS_FOR_FORCED_TEST} give one)"
        )
    return CheckResult(
        True,
        [],
        prepared,
        summary,
        estimate(config, prepared),
        epochs_note(config, prepared),
        far_notes(config, prepared),
        overwrite_note(config, prepared),
    )


def far_notes(config: cfg.CommonConfig, prepared) -> list[str]:
    """Settings far from the ones measured for this built-in data (SL and DPO: suggested.py) or env (RL:
    rl/suggested.py)."""
    if config.kind == "rl":
        from cookbook_engine.rl import suggested as rl_suggested

        return rl_suggested.far_from_suggested(config, settings_view.learning_rate_used(config))
    train = getattr(prepared, "train", None)
    if not train:
        return []
    return suggested_settings.far_from_suggested(
        config, settings_view.learning_rate_used(config), planned_steps(config, len(train)), lora_a_used(config)
    )


def overwrite_note(config: cfg.CommonConfig, prepared) -> str:
    """A warning when an SL run is likely to overwrite general behaviour (suggested.overwrite_note)."""
    train = getattr(prepared, "train", None)
    if config.kind != "sl" or not train:
        return ""
    steps = planned_steps(config, len(train))
    rate = settings_view.learning_rate_used(config)
    return suggested_settings.overwrite_note(config, rate, steps, len(train), lora_a_used(config))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def estimate(config: cfg.CommonConfig, prepared: object) -> str:
    """Tokens the run will process and a rough time by part, from the loop's own plan (its `plan(config, prepared)`,
    the step count it runs) and this machine's measured speeds for the model (training/estimate.py counts the steps,
    evaluations, checkpoint saves and loading); the run page then corrects it from the run's own step times."""
    if config.kind not in SAMPLING_KINDS and not getattr(prepared, "train", None):
        return ""
    rate = speed.speeds(config.model)
    plan = loop_module(config.kind).plan(config, prepared)
    steps = plan.total_steps
    if isinstance(config, cfg.RLConfig):
        text = (
            f"{steps} steps × {config.groups_per_batch} problems × {config.group_size} samples: at most "
            f"{plan.tokens:,} sampled tokens"
        )
    elif isinstance(config, cfg.DistillConfig) and config.mode == "prompt":
        replies = len(getattr(prepared, "prompts", [])) * config.group_size
        text = (
            f"the teacher samples {replies} replies (at most {replies * config.max_tokens:,} tokens), then {steps} "
            f"steps × {config.batch_size} of them"
        )
    elif isinstance(config, cfg.DistillConfig):
        text = (
            f"{steps} steps × {config.groups_per_batch} prompts × {config.group_size} samples: at most "
            f"{plan.tokens:,} sampled tokens, each scored by the teacher"
        )
    else:
        what = "pairs" if config.kind == "dpo" else "examples"
        text = f"{steps} steps × {config.batch_size} {what} ≈ {plan.tokens:,} training tokens"
    if config.backend == "tinker":
        return f"{text}; time depends on the Tinker service's queue."
    run_time = estimate_time.run_time(config, prepared, plan, rate)
    corrected = estimate_time.correction(state.store(), config)
    learned = ""
    if corrected is not None:
        run_time = run_time.scaled(corrected.ratio)
        learned = f", scaled {corrected.describe()}"
    seconds = run_time.total
    skipped = speed.skipped_because(config.model)
    waiting = (
        f"measured once nothing else computes ({skipped})" if skipped else "being measured: check again in a minute"
    )
    if not rate.measured_at:
        return (
            f"{text}; roughly {_minutes(seconds)} on an idle 2-core CPU ({run_time.parts()}{learned}; this "
            f"machine's own speed is {waiting})."
        )
    measured = datetime.fromtimestamp(rate.measured_at).strftime("%H:%M")
    busy = sum(r["status"] in statuses.ACTIVE for r in state.store().list_runs())
    # runs on this machine take turns computing (compute_lease.py), so while `busy` others train, each gets a share
    sharing = (
        f" {busy} run{'s' if busy != 1 else ''} training now {'take' if busy != 1 else 'takes'} turns with "
        f"it on the CPU: while {'they run' if busy != 1 else 'it runs'}, expect up to "
        f"{_minutes(seconds * (busy + 1))}."
        if busy
        else ""
    )
    return (
        f"{text}; roughly {_minutes(seconds)} ({run_time.parts()}) at this machine's speed measured at "
        f"{measured} ({rate.train_tok_s:.0f} training, {rate.sample_tok_s:.0f} sampled tokens/s{learned}; slower "
        f"while other work runs).{sharing}{other_process_note()} The run page corrects this from the run's own step "
        "times."
    )


def other_process_note() -> str:
    """Whether another process (a CLI run, a sweep, `cookbook serve`) is computing on this machine now: runs take
    turns with it step by step (compute_lease.py), which no estimate from this studio's own runs can foresee."""
    holder = compute_lease.holder_now()
    if holder is None or holder[1] in (0, os.getpid()):
        return ""
    return (
        f" Another process ({holder[0]}) is computing on this machine now: while it does, this run takes turns with it."
    )


def planned_steps(config: cfg.CommonConfig, count: int) -> int:
    """Steps an SL or DPO run takes over `count` training examples, as its loop plans them."""
    return train_loop.plan_steps(config, count)[1]


def epochs_note(config: cfg.CommonConfig, prepared) -> str:
    """A warning when max_steps makes the run pass over the data more often than Epochs says."""
    train = getattr(prepared, "train", None)
    if config.kind == "rl" or not train or not config.max_steps:
        return ""
    per_epoch = max(1, len(train) // config.batch_size)
    passes = planned_steps(config, len(train)) / per_epoch
    if passes <= config.num_epochs + 1e-9:
        return ""
    return (
        f"max_steps={config.max_steps} is {passes:.1f} passes over the {len(train)} training examples "
        f"({per_epoch} steps each), more than Epochs = {config.num_epochs}: the run repeats the data. Lower Max "
        "steps (or set it to 0) to stop after the epochs."
    )


def show_check(result: CheckResult, config: cfg.CommonConfig) -> None:
    if not result.ok:
        for problem in result.problems:
            widgets.error_text(problem)
        return
    st.success("Ready to start. " + (result.summary or ""), icon=":material/check_circle:")
    if result.estimate:
        st.caption(f"Estimate: {result.estimate}")
    if result.epochs_note:
        st.warning(result.epochs_note, icon=":material/repeat:")
    if result.overwrite_note:
        st.warning(result.overwrite_note, icon=":material/warning:")
    if result.far_from_suggested:
        st.warning(
            "Far from the settings measured for this "
            + ("env" if config.kind == "rl" else "data")
            + ": "
            + "; ".join(result.far_from_suggested)
            + ".",
            icon=":material/tune:",
        )
    st.markdown("Equivalent command (run it from the repository folder):")
    st.code(settings_view.command_line(config), language="bash", wrap_lines=True)
