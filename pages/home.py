"""Home: runs at a glance, whether the backends are ready, and what to do next."""

import streamlit as st

from app import nav, state, widgets
from app.state import MODEL_STATE_LABEL, ModelState, TinkerState
from cookbook_engine import paths, sandbox, serve
from cookbook_engine.training.metric_names import key_metric
from storage import statuses
from storage.statuses import RunStatus

st.title("Cookbook Studio")
st.caption(
    "Post-train language models with supervised fine-tuning, DPO and RL: on this machine's CPU with the "
    "built-in SmolLM2-135M, or on the hosted Tinker service for large models."
)
widgets.show_notice()


def backend_status() -> None:
    model_state, model_message = state.default_model_status()
    tinker = state.tinker_status()
    c1, c2, c3 = st.columns(3)
    with c1.container(border=True):
        st.markdown("**Local backend** · default model")
        icon = {
            ModelState.READY: ":material/check_circle:",
            ModelState.PREPARING: ":material/hourglass_top:",
            ModelState.FAILED: ":material/error:",
            ModelState.MISSING: ":material/radio_button_unchecked:",
        }
        color: dict[str, widgets.BadgeColor] = {
            ModelState.READY: "green",
            ModelState.PREPARING: "orange",
            ModelState.FAILED: "red",
            ModelState.MISSING: "gray",
        }
        st.badge(MODEL_STATE_LABEL[model_state], icon=icon[model_state], color=color[model_state])
        st.caption(model_message)
        if model_state == ModelState.PREPARING:
            seconds = state.preparation_seconds()
            st.progress(
                min(0.95, seconds / 25),
                text=f"Converting the packaged weights into the model cache: {seconds:.0f} s so far, about 20 s in all",
            )
        needs_preparing = model_state in (ModelState.FAILED, ModelState.MISSING)
        if needs_preparing and st.button("Prepare the default model", key="prepare"):
            state.start_default_model_preparation(retry=True)
            st.rerun()
    with c2.container(border=True):
        st.markdown("**Tinker backend** · hosted models")
        tinker_color: dict[str, widgets.BadgeColor] = {
            TinkerState.OK: "green",
            TinkerState.CHECKING: "orange",
            TinkerState.NO_KEY: "gray",
            TinkerState.ERROR: "red",
            TinkerState.UNAVAILABLE: "gray",
        }
        label = {
            TinkerState.OK: "connected",
            TinkerState.CHECKING: "checking",
            TinkerState.NO_KEY: "no API key",
            TinkerState.ERROR: "unreachable",
            TinkerState.UNAVAILABLE: "not in this build",
        }
        st.badge(label[tinker.state], color=tinker_color[tinker.state])
        st.caption(tinker.message + (f" · {len(tinker.models)} models" if tinker.models else ""))
        if tinker.state != TinkerState.UNAVAILABLE:
            with st.popover("Tinker API key", icon=":material/key:"):
                key = st.text_input(
                    "API key",
                    type="password",
                    key="tinker-key",
                    help="Kept in this studio process's memory until it stops; never saved.",
                )
                c_set, c_clear = st.columns(2)
                if c_set.button("Use this key", disabled=not key.strip(), key="tinker-set"):
                    state.set_tinker_key(key)
                    st.rerun()
                if c_clear.button("Forget the key", key="tinker-clear"):
                    state.set_tinker_key(None)
                    st.rerun()
        serving = serve.status(timeout_s=0.3)  # `cookbook serve`: the Tinker API on this machine
        st.caption(
            "**Local Tinker API** (`cookbook serve`): "
            + ("running; in a shell:" if serving.running else "not running.")
        )
        if serving.running:
            st.code(serving.env_line, language="bash")
    with c3:
        sandbox_status()
    if model_state == ModelState.PREPARING or tinker.state == TinkerState.CHECKING:
        st.caption("This box refreshes by itself.")


def sandbox_status() -> None:
    """What the sandbox that runs model-written code (RL code environments) isolates on this machine."""
    with st.container(border=True):
        st.markdown("**Code sandbox** · runs model-written code (RL)")
        try:
            capabilities = sandbox.sandbox_capabilities()
        except RuntimeError as exc:
            st.badge("unavailable", icon=":material/error:", color="red")
            widgets.error_text(str(exc))
            return
        if capabilities["network_isolated"]:
            st.badge("network isolated", icon=":material/lock:", color="green")
        else:
            st.badge("network NOT isolated", icon=":material/warning:", color="orange")
            st.warning(
                "Model-written code can reach the network on this machine: "
                + widgets.safe_markdown(capabilities["reason"]),
                icon=":material/warning:",
            )
        if capabilities["memory_cgroup"]:
            st.badge("memory capped per run", icon=":material/memory:", color="green")
        else:
            st.badge("memory capped per process only", icon=":material/warning:", color="orange")
        st.caption(
            "Each program runs in its own namespaces with a fresh uid, a private root holding only the "
            "interpreter and its standard library, a minimal /dev and a seccomp filter; the tests that grade it "
            "run in a second sandbox it cannot reach."
        )
        with st.expander("What it isolates here"):
            for name, key in (
                ("How", "description"),
                ("Files", "filesystem"),
                ("Memory", "memory_limit"),
                ("CPU", "cpu_limit"),
                ("Unix sockets", "unix_sockets"),
                ("Devices", "devices"),
                ("Seccomp", "seccomp"),
            ):
                st.caption(f"**{name}:** " + widgets.safe_markdown(capabilities[key]))
            st.caption("Not a proof against a determined attacker: the kernel is shared with the studio.")


waiting = state.default_model_status()[0] == ModelState.PREPARING or state.tinker_status().state == TinkerState.CHECKING
widgets.fragment(run_every=2 if waiting else None)(backend_status)()


def runs_at_a_glance(store, runs: list[dict]) -> None:
    running = [r for r in runs if r["status"] in statuses.ACTIVE]
    finished = [r for r in runs if r["status"] == RunStatus.COMPLETED]
    failed = [r for r in runs if r["status"] in statuses.WENT_WRONG]
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Running", len(running), border=True)
    c2.metric("Finished", len(finished), border=True)
    c3.metric("Failed", len(failed), border=True)
    c4.metric("Checkpoints", len(store.list_checkpoints()), border=True)


def next_steps(runs: list[dict]) -> None:
    st.subheader("Next steps")
    c1, c2, c3 = st.columns(3)
    with c1.container(border=True):
        st.markdown("**Train a model**")
        st.caption("SL on a built-in dataset takes a few minutes on this CPU; watch the loss fall live.")
        nav.link("new_run", "Start a new run")
    with c2.container(border=True):
        if any(r["status"] == RunStatus.COMPLETED for r in runs):
            st.markdown("**Chat with what you trained**")
            st.caption("Compare the base model and your checkpoint side by side.")
        else:
            st.markdown("**Chat with the base model**")
            st.caption("See what the model says before you train it.")
        nav.link("chat", "Open the chat")
    with c3.container(border=True):
        st.markdown("**Bring your own data**")
        st.caption("Upload JSONL, CSV or Parquet; see errors by row and the tokens the loss trains on.")
        nav.link("datasets", "Upload a dataset")


def recent_runs(store, runs: list[dict]) -> None:
    st.subheader("Recent runs")
    if not runs:
        widgets.empty_state(
            "No runs yet. Start one: SL on builtin:facts teaches the model about a made-up country.",
            "new_run",
            "Start a new run",
        )
    else:
        values = widgets.key_metric_values(store, runs[:8])
        for run in runs[:8]:
            with st.container(border=True):
                c1, c2, c3, c4 = st.columns([3, 1.2, 2, 1], vertical_alignment="center")
                model = widgets.safe_markdown(widgets.short_model(run["base_model"]))
                c1.markdown(
                    f"**{widgets.safe_markdown(run['name'])}**  \n"
                    f"{widgets.KIND_LABEL[run['kind']]} · {model} · {widgets.age(run['created_at'])}"
                )
                with c2:
                    widgets.status_badge(run["status"])
                value = values.get(run["run_id"])
                metric = "" if value is None else f" · {key_metric(run['kind'])} {widgets.format_value(value)}"
                c3.caption(f"step {widgets.step_text(run)}{metric}")
                with c4:
                    nav.link("run", "Open", ":material/open_in_new:", run=run["run_id"])
        if len(runs) > 8:
            nav.link("runs", f"All {len(runs)} runs")


def runs_overview() -> None:
    """The runs at a glance, the next steps and the recent runs from one read of the runs list. It refreshes every
    few seconds whether or not a run is active, so runs started from any process (the CLI too) appear by
    themselves."""
    store = state.store()
    runs = store.list_runs()
    runs_at_a_glance(store, runs)
    next_steps(runs)
    recent_runs(store, runs)


widgets.fragment(run_every=widgets.LIVE_REFRESH_S)(runs_overview)()

usage = state.home_usage()
parts = sorted(((name, size) for name, size in usage.items() if size >= 1_000_000), key=lambda item: -item[1])
st.caption(
    f":material/hard_drive: Studio home {widgets.safe_markdown(str(paths.home()))}: "
    f"{paths.human_size(sum(usage.values()))}"
    + (
        " (" + ", ".join(f"{widgets.safe_markdown(name)} {paths.human_size(size)}" for name, size in parts) + ")"
        if parts
        else ""
    )
    + ". Deleting a run frees its checkpoints and exports; the Checkpoints page lists exports."
)
