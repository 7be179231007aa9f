"""The Chat page's drawing pieces: the conversation with a slot for each reply still to generate, streaming one
reply into its slot, and the tools under a conversation (save as JSONL, add turns to an SL dataset, prefer one of
two replies for a DPO dataset). Model text is always shown literally (escaped markdown)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import conversation, state, state_keys, widgets
from app.conversation import PaneReply, Turn
from cookbook_engine import chat
from cookbook_engine.data import from_chat as chat_data
from storage.input_error import BAD_INPUT

NEW_DATASET = "New dataset…"
DEFAULT_DPO_DATASET = "chat-preferences"


def draw_conversation(
    turns: list[Turn],
    panes: dict[str, chat.ChatTarget],
    side_by_side: bool,
    waiting: list[tuple[int, str]],
    system_prompt: str,
) -> dict:
    """Every turn in each pane; returns an empty slot per reply still to generate (drawn as queued)."""
    columns = dict(zip(panes, st.columns(len(panes)))) if side_by_side else {"a": st.container()}
    slots = {}
    for pane, column in columns.items():
        with column:
            if side_by_side:
                st.markdown(f"**{widgets.safe_markdown(panes[pane].label)}**")
            if not turns:
                st.caption(f"Say something to {widgets.safe_markdown(panes[pane].label)}.")
            for index, turn in enumerate(turns):
                with st.chat_message("user"):
                    st.markdown(widgets.safe_markdown(turn.user))
                with st.chat_message("assistant"):
                    if (index, pane) in waiting:
                        slots[(index, pane)] = st.empty()
                        first = waiting[0] == (index, pane)
                        slots[(index, pane)].caption(
                            ":material/progress_activity: generating…"
                            if first
                            else ":material/schedule: queued: answered after the replies above"
                        )
                    else:
                        reply_view(turn, pane, panes[pane], side_by_side, index, system_prompt)
    return slots


def reply_view(
    turn: Turn, pane: str, current: chat.ChatTarget, side_by_side: bool, index: int, system_prompt: str
) -> None:
    """A finished reply: which weights, the text, and a mark when it was cut, stopped or failed."""
    pane_reply = turn.replies.get(pane)
    if pane_reply is None:
        st.caption("(no reply: this pane was not in the conversation then)")
        return
    if pane_reply.note:
        st.caption(f":material/bolt: {widgets.safe_markdown(pane_reply.note)}")
    if pane_reply.error:
        widgets.error_text(pane_reply.error)
        return
    text = pane_reply.reply.text
    st.markdown(
        widgets.safe_markdown(text)
        if text
        else "*(stopped before it wrote anything)*"
        if pane_reply.reply.finish == "stopped"
        else "*(empty reply)*"
    )
    marks = []
    if pane_reply.target.key != current.key:
        marks.append(f":material/history: from {widgets.safe_markdown(pane_reply.target.label)}")
    if pane_reply.reply.finish in conversation.FINISH_MARK:
        icon, words = conversation.FINISH_MARK[pane_reply.reply.finish]
        marks.append(f"{icon} {words}")
    if turn.preferred == pane:
        marks.append(":material/thumb_up: preferred (added to a DPO dataset)")
    if marks:
        st.caption(" · ".join(marks))
    if side_by_side and conversation.can_prefer(turn):
        st.button(
            "Prefer this reply",
            icon=":material/thumb_up:",
            key=f"prefer-{index}-{pane}",
            on_click=prefer,
            args=(index, pane, system_prompt),
            help="Append a preference pair (this reply chosen, the other rejected) to the DPO dataset named "
            "under the conversation.",
        )


def stream(pane_reply: PaneReply, messages: list[dict], params: chat.ChatParams, store) -> None:
    """Generate (or continue) one reply, drawing it as it grows; its text is kept in the conversation after every
    chunk, so an interruption loses nothing."""
    try:
        weights = chat.open_weights(pane_reply.target, store)
        if pane_reply.target.kind == "latest":
            pane_reply.note = weights.description
            st.caption(f":material/bolt: {widgets.safe_markdown(weights.description)}")
        pieces = chat.stream_reply(pane_reply.target, messages, params, store, weights=weights, reply=pane_reply.reply)
        st.write_stream(widgets.safe_markdown_stream(pieces))
    except BAD_INPUT as exc:
        pane_reply.error = str(exc)
        widgets.error_text(str(exc))


def retry_tools(turns: list[Turn], panes: dict[str, chat.ChatTarget]) -> None:
    """Under a finished conversation: answer the last message again, or edit it and send it again."""
    last = len(turns) - 1
    c1, c2, _ = st.columns([1, 1.2, 3])
    c1.button(
        "Regenerate",
        icon=":material/refresh:",
        on_click=conversation.resend,
        args=(last, turns[last].user, panes),
        help="Answer your last message again; the replies shown now are replaced.",
        width="stretch",
    )
    with c2.popover("Edit and resend", icon=":material/edit:", width="stretch"):
        key = f"chat-edit-{last}-{turns[last].user}"
        st.text_area("Your last message", turns[last].user, key=key)
        st.button(
            "Send edited",
            type="primary",
            on_click=lambda: conversation.resend(last, st.session_state[key], panes),
        )


# ---------------------------------------------------------------------------------------------- data tools


def data_tools(
    turns: list[Turn], panes: dict[str, chat.ChatTarget], side_by_side: bool, system_prompt: str, store
) -> None:
    save_conversation(turns, panes, system_prompt)
    with st.expander("Add turns to a dataset (fix the replies, then train on them)", icon=":material/playlist_add:"):
        add_to_dataset(turns, panes, side_by_side, system_prompt, store)
    if side_by_side:
        st.text_input(
            "DPO dataset for “Prefer this reply”",
            DEFAULT_DPO_DATASET,
            key=state_keys.CHAT_DPO_DATASET,
            help="Each click appends a pair to this uploaded dataset (made when it does not exist).",
        )


def save_conversation(turns: list[Turn], panes: dict[str, chat.ChatTarget], system_prompt: str) -> None:
    lines = chat_data.to_jsonl([conversation.conversation(turns, pane, system_prompt) for pane in panes])
    st.download_button(
        "Save conversation (.jsonl)",
        lines,
        file_name="conversation.jsonl",
        mime="application/jsonl",
        icon=":material/download:",
        on_click="ignore",
        help='Chat format: one {"messages": [...]} line per model, ready to upload as SL data.',
    )


def add_to_dataset(
    turns: list[Turn], panes: dict[str, chat.ChatTarget], side_by_side: bool, system_prompt: str, store
) -> None:
    pane = "a"
    if side_by_side:
        pane = st.radio(
            "Replies of", list(panes), format_func=lambda p: panes[p].label, horizontal=True, key="chat-data-pane"
        )
    st.caption(
        "Tick the turns to add and edit any reply: each ticked turn with a reply becomes one training example "
        "(the conversation before it, your message, and the reply as edited here)."
    )
    replies = [conversation.reply_text(t, pane) for t in turns]
    frame = pd.DataFrame(
        {"Add": [bool(reply.strip()) for reply in replies], "You": [t.user for t in turns], "Reply": replies}
    )
    edited = st.data_editor(
        frame,
        key=f"chat-data-editor-{pane}-{len(turns)}",
        hide_index=True,
        width="stretch",
        disabled=["You"],
        column_config={
            "Add": st.column_config.CheckboxColumn("Add", width="small"),
            "Reply": st.column_config.TextColumn("Reply (editable)", width="large"),
        },
    )
    options = [NEW_DATASET] + [d["name"] for d in chat_data.appendable(store, "chat")]  # never an upload by default
    c1, c2, c3 = st.columns([2, 2, 1.3], vertical_alignment="bottom")
    choice: str = (
        c1.selectbox(
            "Dataset",
            options,
            key="chat-data-dataset",
            help="A new dataset, or an uploaded chat dataset (JSONL) to grow.",
        )
        or NEW_DATASET
    )
    name = c2.text_input("New dataset name", "chat-examples", key="chat-data-name", disabled=choice != NEW_DATASET)
    edits = {i: str(edited["Reply"][i] or "") for i in range(len(turns))}
    picked = [i for i, add in enumerate(edited["Add"]) if add and edits[i].strip()]  # an empty reply teaches nothing
    if c3.button(
        f"Add {len(picked)} turn{'s' if len(picked) != 1 else ''}",
        type="primary",
        disabled=not picked,
        icon=":material/playlist_add:",
        width="stretch",
    ):
        target = name if choice == NEW_DATASET else choice
        rows = conversation.training_examples(turns, pane, edits, picked, system_prompt)
        try:
            count = chat_data.append_rows(store, target, "chat", rows, new=choice == NEW_DATASET)
            st.success(
                widgets.safe_markdown(
                    f"Added {len(rows)} example{'s' if len(rows) != 1 else ''} to "
                    f"{target.strip()} ({count} row{'s' if count != 1 else ''} now); "
                    "train on it from New run "
                    "(Dataset: Uploaded)."
                ),
                icon=":material/check_circle:",
            )
        except (chat_data.ChatDataError, ValueError) as exc:
            widgets.error_text(str(exc))


def prefer(index: int, pane: str, system_prompt: str) -> None:
    """ "Prefer this reply" (a button callback): append the pair to the DPO dataset named on the page."""
    turns = conversation.history()
    prompt, chosen, rejected = conversation.preference_pair(turns, index, pane, system_prompt)
    name = st.session_state.get(state_keys.CHAT_DPO_DATASET) or DEFAULT_DPO_DATASET
    try:
        count = chat_data.append_rows(
            state.store(), name, "preference", [chat_data.preference_row(prompt, chosen, rejected)]
        )
    except (chat_data.ChatDataError, ValueError) as exc:
        st.toast(widgets.safe_markdown(f"Could not add the pair: {exc}"), icon=":material/error:")
        return
    turns[index].preferred = pane
    st.toast(
        widgets.safe_markdown(f"Added a preference pair to {name} ({count} pair{'s' if count != 1 else ''} now)"),
        icon=":material/thumb_up:",
    )
