"""Chat: talk to the base model, any checkpoint, or the newest weights of a run still training; or two at once."""

import streamlit as st

from app import forms, state, widgets
from cookbook_engine import chat, models

st.title("Chat")
store = state.store()
targets = chat.list_targets(store)
by_key = {t.key: t for t in targets}
keys = list(by_key)


def requested_target() -> str | None:
    """A run's page sent us here: its latest weights while it trains, else its newest checkpoint."""
    run_id = st.session_state.pop("chat_target_request", None)
    if run_id is None:
        return None
    for target in targets:
        if target.run_id == run_id and target.kind == "latest":
            return target.key
    for target in targets:
        if target.run_id == run_id:
            return target.key
    return None


request = requested_target()
if request:
    st.session_state["chat-a"] = request
    st.session_state.setdefault("chat-side-by-side", False)
if st.session_state.get("chat-a") not in by_key:
    st.session_state["chat-a"] = keys[0]
if st.session_state.get("chat-b") not in by_key:
    st.session_state["chat-b"] = next((k for k in keys if k != keys[0] and by_key[k].kind != "base"), keys[0])

c1, c2, c3 = st.columns([3, 3, 1.2], vertical_alignment="bottom")
side_by_side = c3.toggle("Side by side", key="chat-side-by-side",
                         help="Send each message to two models, e.g. the base model and your checkpoint.")
key_a = c1.selectbox("Model" if not side_by_side else "Left model", keys, format_func=lambda k: by_key[k].label,
                     key="chat-a")
key_b = c2.selectbox("Right model", keys, format_func=lambda k: by_key[k].label, key="chat-b") \
    if side_by_side else None

with st.expander("System prompt and sampling", icon=":material/tune:"):
    system_prompt = st.text_area("System prompt", key="chat-system", placeholder="Optional, e.g. 'Answer briefly.'",
                                 height=80)
    c1, c2, c3, c4 = st.columns(4)
    temperature = c1.slider("Temperature", 0.0, 1.5, 0.3, 0.05, key="chat-temperature",
                            help="0 = always the most likely token. Above ~1 the small model drifts into nonsense.")
    top_p = c2.slider("Top-p", 0.05, 1.0, 0.9, 0.05, key="chat-top-p")
    max_tokens = c3.number_input("Max tokens", 1, 4096, 256, key="chat-max-tokens")
    if c4.button("New conversation", icon=":material/restart_alt:", width="stretch"):
        st.session_state["chat-history"] = []
params = chat.ChatParams(temperature=temperature, top_p=top_p, max_tokens=int(max_tokens))
for key in (key_a, key_b):
    if key and by_key[key].kind == "latest":
        st.caption(f":material/bolt: {widgets.safe_markdown(by_key[key].label)}: each reply samples from a fresh "
                   "snapshot of the run's live weights while it trains in this studio (its newest saved weights when "
                   "it trains in another process, e.g. the CLI).")

# history: a list of turns {"user": text, "replies": {pane: text}}; panes are "a" and "b"
history = st.session_state.setdefault("chat-history", [])
panes = {"a": key_a, "b": key_b} if side_by_side else {"a": key_a}


def messages_for(pane: str, upto: int) -> list[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    for turn in history[:upto]:
        messages.append({"role": "user", "content": turn["user"]})
        reply = turn["replies"].get(pane)
        if reply:
            messages.append({"role": "assistant", "content": reply})
    messages.append({"role": "user", "content": history[upto]["user"]})
    return messages


def weights_note(target: chat.ChatTarget, weights: chat.Weights) -> str | None:
    """For "latest weights": which weights this reply came from (live snapshot or newest saved)."""
    return weights.description if target.kind == "latest" else None


def stream_into(pane: str, target_key: str, turn_index: int) -> None:
    target = by_key[target_key]
    raw: list[str] = []

    def pieces(weights: chat.Weights):
        for piece in chat.stream_reply(target, messages_for(pane, turn_index), params, store, weights=weights):
            raw.append(piece)
            yield piece

    try:
        weights = chat.open_weights(target, store)
        note = weights_note(target, weights)
        if note:
            history[turn_index].setdefault("notes", {})[pane] = note
            st.caption(f":material/bolt: {widgets.safe_markdown(note)}")
        st.write_stream(widgets.safe_markdown_stream(pieces(weights)))
    except (chat.ChatError, *forms.input_errors()) as exc:
        widgets.error_text(str(exc))
        raw = [f"[error: {exc}]"]
    history[turn_index]["replies"][pane] = "".join(raw) or "(empty reply)"


columns = dict(zip(panes, st.columns(len(panes)))) if side_by_side else {"a": st.container()}
prompt = st.chat_input("Message the model")
if prompt:
    history.append({"user": prompt, "replies": {}})
if not history:
    for pane, column in columns.items():
        column.caption(f"Say something to {by_key[panes[pane]].label}.")
for pane, column in columns.items():
    with column:
        if side_by_side:
            st.markdown(f"**{widgets.safe_markdown(by_key[panes[pane]].label)}**")
        for index, turn in enumerate(history):
            with st.chat_message("user"):
                st.markdown(widgets.safe_markdown(turn["user"]))
            with st.chat_message("assistant"):
                if pane in turn["replies"]:
                    if turn.get("notes", {}).get(pane):
                        st.caption(f":material/bolt: {widgets.safe_markdown(turn['notes'][pane])}")
                    st.markdown(widgets.safe_markdown(turn["replies"][pane]))
                elif not (prompt and index == len(history) - 1):
                    st.caption("(no reply: this model was not in the conversation then)")
                else:
                    if by_key[panes[pane]].backend == "local" and not models.default_model_ready():
                        with st.spinner("Preparing the default model (first time only, about 20 s)…"):
                            state.ensure_default_model()
                    stream_into(pane, panes[pane], index)
