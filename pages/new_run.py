"""New run: pick an algorithm, a model and data, set the hyperparameters, check them, start the run."""

import streamlit as st

from app import forms, nav, notices, state, state_keys, widgets

st.title("New run")
widgets.show_notice()
kinds = {
    "sl": "Supervised (SL)",
    "dpo": "Preference (DPO)",
    "rl": "Reinforcement (RL)",
    "distill": "Distillation",
}
duplicate = st.session_state.get(state_keys.NEW_RUN_BASE)
kind: str = (
    st.segmented_control(
        "Algorithm",
        list(kinds),
        format_func=lambda k: kinds[k],
        required=True,
        default=st.session_state.get(state_keys.NEW_RUN_KIND) or (duplicate["kind"] if duplicate else "sl"),
        key=f"kind-{st.session_state.get(state_keys.FORM_GENERATION, 0)}",
    )
    or "sl"
)
where_from = st.container()  # filled in below, once the form says whether it holds anything but the defaults

base = forms.base_config(kind)
st.subheader("Model and data")
left, right = st.columns(2, gap="large")
with left:
    choice = forms.model_section(kind, base)
    if choice.error:
        st.warning(choice.error, icon=":material/warning:")
    forms.measure_speed(choice)
with right:
    if isinstance(base, forms.cfg.RLConfig):
        env, dataset, grader = forms.rl_task_section(base)
        data = {"env": env, "dataset": dataset, "grader": grader}
    elif isinstance(base, forms.cfg.DistillConfig):
        mode, dataset = forms.distill_task_section(base)
        data = {"mode": mode, "dataset": dataset}
    else:
        data = {"dataset": forms.dataset_section(kind, forms.DATA_KIND[kind], getattr(base, "dataset", ""))}

st.subheader("Settings")
config, action = forms.settings_form(kind, base, choice, data)
forms.remember(kind, config)  # kept while the user switches algorithm or page
with where_from:
    copied = duplicate if duplicate is not None and duplicate["kind"] == kind else None
    if copied or forms.edited(kind):
        c1, c2 = st.columns([4, 1], vertical_alignment="center")
        if copied:
            c1.info(
                f"Settings copied from run **{widgets.safe_markdown(copied['name'])}**; change what you like.",
                icon=":material/content_copy:",
            )
        else:
            c1.caption("The form keeps your settings for each algorithm while you switch algorithm or page.")
        if c2.button("Reset to defaults", width="stretch"):
            st.session_state.pop(state_keys.NEW_RUN_BASE, None)
            forms.start_over()
            st.rerun()
if action:
    result = forms.check(config)
    forms.show_check(result, config)
    if result.ok and action == "start":
        run_id = state.manager().start(config, prepared=result.prepared)
        notices.watch(run_id)  # a toast when it ends, on whatever page is open then
        st.session_state.pop(state_keys.NEW_RUN_BASE, None)
        forms.start_over(kind)  # the next visit starts from the defaults
        widgets.notice(
            f"Run {widgets.safe_markdown(config.name or run_id)} started: it trains in the background, "
            "so you can leave this page or close the tab."
        )
        nav.go("run", run=run_id)
