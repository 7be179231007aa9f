"""The chat page's conversation, kept in the browser session: turns, each model's reply to each turn, and what
became of it (finished, cut at max tokens, stopped, failed, or still to generate).

A turn records which chat target answers it in each pane ("a" left, "b" right) when it is sent, so a reply that
was interrupted (the page reran: another message was sent, or a setting changed) is continued by the same model
from the tokens it already had, and a message sent meanwhile waits its turn: nothing a model produced is lost.
A reply's Stop button ends that reply only, keeping its text: the replies queued after it (and the other pane's)
still come. The last turn can be answered again (regenerate) or edited and sent again; a turn whose reply is empty
(stopped before it wrote anything, or failed) is left out of the conversation the models see and the one saved or
added to a dataset, so no conversation has two user messages in a row. This module draws nothing; pages/chat.py
does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from app import state_keys
from cookbook_engine import chat

PANES = ("a", "b")
FINISH_MARK = {  # reply.finish -> (icon, what a person reads under the reply)
    "length": (":material/content_cut:", "cut at the max tokens limit: raise Max tokens for longer replies"),
    "stopped": (":material/stop_circle:", "stopped by you"),
}


@dataclass
class PaneReply:
    target: chat.ChatTarget
    reply: chat.Reply = field(default_factory=chat.Reply)
    note: str | None = None  # which weights answered ("latest weights" targets)
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or self.reply.finish is not None


@dataclass
class Turn:
    user: str
    replies: dict[str, PaneReply] = field(default_factory=dict)  # pane -> its reply (made when the turn is sent)
    preferred: str | None = None  # the pane whose reply went to a preference dataset


def history() -> list[Turn]:
    return st.session_state.setdefault(state_keys.CHAT_HISTORY, [])


def clear() -> None:
    st.session_state[state_keys.CHAT_HISTORY] = []


def send(text: str, targets: dict[str, chat.ChatTarget]) -> None:
    """Add a turn; each pane's model answers it once the replies before it are done."""
    history().append(Turn(text, {pane: PaneReply(target) for pane, target in targets.items()}))


def pending(turns: list[Turn]) -> list[tuple[int, str]]:
    """(turn index, pane) of every reply still to generate, in the order they are generated."""
    return [
        (index, pane)
        for index, turn in enumerate(turns)
        for pane in PANES
        if pane in turn.replies and not turn.replies[pane].done
    ]


def stop_reply(index: int, pane: str) -> None:
    """A Stop button's callback: the reply it sits under ends now, keeping what it has; the others still come."""
    stop(history(), index, pane)


def stop(turns: list[Turn], index: int, pane: str) -> None:
    pane_reply = turns[index].replies.get(pane)
    if pane_reply is not None and not pane_reply.done:
        pane_reply.reply.finish = "stopped"


def resend(index: int, text: str, targets: dict[str, chat.ChatTarget]) -> None:
    """Forget turn `index` and every turn after it, and send `text` in its place (regenerate: the same text)."""
    turns = history()
    del turns[index:]
    send(text, targets)


def messages_for(
    turns: list[Turn], pane: str, upto: int, system_prompt: str = "", edits: dict[int, str] | None = None
) -> list[dict]:
    """The conversation a pane's model sees for turn `upto` (its own replies, partial ones too; `edits` replaces
    some replies' text), ending with that turn's user message."""
    edits = edits or {}
    messages = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    for index, turn in enumerate(turns[:upto]):
        text = edits.get(index, reply_text(turn, pane))
        if text.strip():  # a turn with no reply is left out: never two user messages in a row
            messages += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": text}]
    messages.append({"role": "user", "content": turns[upto].user})
    return messages


def reply_text(turn: Turn, pane: str) -> str:
    pane_reply = turn.replies.get(pane)
    return pane_reply.reply.text if pane_reply and not pane_reply.error else ""


def conversation(turns: list[Turn], pane: str, system_prompt: str = "") -> list[dict]:
    """The whole conversation as one pane's model had it (chat format)."""
    if not turns:
        return []
    messages = messages_for(turns, pane, len(turns) - 1, system_prompt)
    last = reply_text(turns[-1], pane)
    return messages + [{"role": "assistant", "content": last}] if last.strip() else messages[:-1]


def training_examples(
    turns: list[Turn], pane: str, edits: dict[int, str], picked: list[int], system_prompt: str = ""
) -> list[dict]:
    """One chat-format row per picked turn: the conversation up to it (with the edited replies) and its reply."""
    rows = []
    for index in picked:
        messages = messages_for(turns, pane, index, system_prompt, edits)
        rows.append(
            {
                "messages": messages
                + [{"role": "assistant", "content": edits.get(index, reply_text(turns[index], pane))}]
            }
        )
    return rows


def preference_pair(turns: list[Turn], index: int, preferred: str, system_prompt: str = "") -> tuple[list, str, str]:
    """(prompt messages, chosen reply, rejected reply) for "prefer this reply" on a side-by-side turn; the prompt
    is the conversation as the preferred pane's model saw it."""
    other = "b" if preferred == "a" else "a"
    prompt = messages_for(turns, preferred, index, system_prompt)
    return prompt, reply_text(turns[index], preferred), reply_text(turns[index], other)


def can_prefer(turn: Turn) -> bool:
    """Both panes answered (text, finished) and no preference was recorded for this turn yet."""
    both = all(pane in turn.replies and turn.replies[pane].done and reply_text(turn, pane) for pane in PANES)
    return both and turn.preferred is None and reply_text(turn, "a") != reply_text(turn, "b")
