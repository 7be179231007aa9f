"""Which models the Chat page's two pickers hold: the run a "Chat with it" button asked for, or the run its address
names (/chat?run=RUN_ID: a link or a reload), and what they held before, kept as long as it exists.

A picker never moves to another run's weights on its own: a request for a run with no weights (deleted, or nothing
saved yet) is refused with a message naming the run, and a picked checkpoint that was deleted (from another tab)
becomes the base model with a message naming what went. The one move within a run: a run's live weights become its
newest checkpoint when it stops training. Side by side starts with the base model beside the weights on the left, or
beside the newest weights. Not here: drawing (pages/chat.py), the conversation (app/conversation.py).
"""

from __future__ import annotations

import streamlit as st

from app import state_keys
from cookbook_engine.chat import ChatTarget


def newest_of_run(targets: list[ChatTarget], run_id: str) -> ChatTarget | None:
    """A run's live weights while it trains, else its newest checkpoint (targets list checkpoints newest first)."""
    mine = [t for t in targets if t.run_id == run_id]
    return next((t for t in mine if t.kind == "latest"), mine[0] if mine else None)


def _new_address_run() -> str | None:
    """The run the page's address names, the first time this session sees it (a model picked afterwards stays)."""
    run_id = st.query_params.get("run")
    return run_id if run_id and run_id != st.session_state.get(state_keys.CHAT_URL_RUN) else None


def settle(targets: list[ChatTarget]) -> list[str]:
    """Set the pickers' session values (before they are drawn); returns the sentences to show about what moved."""
    by_key = {t.key: t for t in targets}
    base = targets[0].key
    said: list[str] = []
    request = st.session_state.pop(state_keys.CHAT_TARGET_REQUEST, None) or _new_address_run()
    if request is not None:
        st.session_state[state_keys.CHAT_URL_RUN] = request
        wanted = newest_of_run(targets, request)
        if wanted is None:
            said.append(f"Run {request} has no weights to chat with: it was deleted, or has saved nothing yet.")
        else:
            st.session_state[state_keys.CHAT_LEFT] = wanted.key
    for key in (state_keys.CHAT_LEFT, state_keys.CHAT_RIGHT):
        held = st.session_state.get(key)
        if held is None or held in by_key:
            continue
        successor = newest_of_run(targets, held.removeprefix("latest:")) if held.startswith("latest:") else None
        if successor is not None:
            st.session_state[key] = successor.key
            said.append(f"That run stopped training: now chatting with {successor.label}.")
        else:
            st.session_state[key] = base
            said.append(f"{held.split(':', 1)[-1]} is gone (deleted, perhaps in another tab): now the base model.")
    left = st.session_state.setdefault(state_keys.CHAT_LEFT, base)
    if state_keys.CHAT_RIGHT not in st.session_state:  # side by side: a run's weights beside the base model
        newest = next((t.key for t in targets if t.kind != "base"), base)
        st.session_state[state_keys.CHAT_RIGHT] = base if left != base else newest
    return said
