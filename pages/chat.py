"""Chat: talk to the base model, any checkpoint, or the newest weights of a run still training; or two at once.
Replies stream with a Stop button each; a message sent meanwhile waits its turn; the last message can be answered
again or edited and resent; the conversation saves as JSONL, its
turns (edited if wanted) go into an SL dataset, and "prefer this reply" side by side goes into a DPO dataset."""

import streamlit as st

from app import chat_targets, chat_tools, conversation, state, state_keys, widgets
from cookbook_engine import chat, models

st.title("Chat")
store = state.store()
targets = chat.list_targets(store)
by_key = {t.key: t for t in targets}
keys = list(by_key)


for sentence in chat_targets.settle(targets):  # a deleted checkpoint or run: say so, never pick another run's
    st.warning(widgets.safe_markdown(sentence), icon=":material/warning:")

c1, c2, c3 = st.columns([3, 3, 1.2], vertical_alignment="bottom")
side_by_side = c3.toggle(
    "Side by side",
    key=state_keys.CHAT_SIDE_BY_SIDE,
    help="Send each message to two models, e.g. the base model and your checkpoint.",
)
key_a = c1.selectbox(
    "Model" if not side_by_side else "Left model", keys, format_func=lambda k: by_key[k].label, key=state_keys.CHAT_LEFT
)
key_b = (
    c2.selectbox("Right model", keys, format_func=lambda k: by_key[k].label, key=state_keys.CHAT_RIGHT)
    if side_by_side
    else None
)

with st.expander("System prompt and sampling", icon=":material/tune:"):
    system_prompt = st.text_area(
        "System prompt", key="chat-system", placeholder="Optional, e.g. 'Answer briefly.'", height=80
    )
    c1, c2, c3, c4 = st.columns(4)
    temperature = c1.slider(
        "Temperature",
        0.0,
        1.5,
        0.3,
        0.05,
        key="chat-temperature",
        help="0 = always the most likely token. Above ~1 the small model drifts into nonsense.",
    )
    top_p = c2.slider("Top-p", 0.05, 1.0, 0.9, 0.05, key="chat-top-p")
    max_tokens = c3.number_input(
        "Max tokens",
        1,
        4096,
        256,
        key="chat-max-tokens",
        help="A reply that reaches this many tokens is cut, and marked as cut.",
    )
    c4.button("New conversation", icon=":material/restart_alt:", width="stretch", on_click=conversation.clear)
params = chat.ChatParams(temperature=temperature, top_p=top_p, max_tokens=int(max_tokens))
panes = {"a": by_key[key_a], "b": by_key[key_b]} if key_b is not None else {"a": by_key[key_a]}
for target in panes.values():
    if target.kind == "latest":
        st.caption(
            f":material/bolt: {widgets.safe_markdown(target.label)}: each reply samples from a fresh "
            "snapshot of the run's live weights while it trains in this studio (its newest saved weights when "
            "it trains in another process, e.g. the CLI)."
        )

turns = conversation.history()
prompt = st.chat_input("Message the model")
if prompt:
    conversation.send(prompt, panes)
waiting = conversation.pending(turns)
slots = chat_tools.draw_conversation(turns, panes, side_by_side, waiting, system_prompt)
for index, pane in waiting:
    reply = turns[index].replies[pane]
    if reply.target.backend == "local" and not models.default_model_ready():
        with slots[(index, pane)].container(), st.spinner("Preparing the default model (first time only, ~20 s)…"):
            state.ensure_default_model()
    with slots[(index, pane)].container():
        c1, c2 = st.columns([4, 1], vertical_alignment="center")
        c1.caption(":material/progress_activity: generating… (a message you send now waits its turn)")
        c2.button(
            "Stop",
            icon=":material/stop:",
            key=f"chat-stop-{index}-{pane}",
            on_click=conversation.stop_reply,
            args=(index, pane),
            help="End this reply now and keep what it wrote so far (replies queued after it still come).",
            width="stretch",
        )
        chat_tools.stream(reply, conversation.messages_for(turns, pane, index, system_prompt), params, store)
if waiting:
    st.rerun()  # every reply is done: draw the conversation again, each reply with its mark, without Stop buttons

if turns and not waiting:
    chat_tools.retry_tools(turns, panes)
    chat_tools.data_tools(turns, panes, side_by_side, system_prompt, store)
