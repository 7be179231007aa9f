"""The one list of keys the studio keeps in `st.session_state` (one browser session's memory), named once.

Pages and app/ modules read and write session state only through these names, so two places cannot drift apart
on a key's spelling (tests/test_state_keys.py fails on a literal key). A widget whose value is read back by key
takes its `key=` from here too. Not here: what the values mean beyond a line each (see the modules that use them),
process-wide state (app/state.py).
"""

from __future__ import annotations

NOTICE = "_notice"  # (kind, message): shown once at the top of the next page drawn (widgets.notice)
KEY_METRIC_VALUES = "_key_metric_values"  # (signature of the runs, their key metric values): widgets' cache
WATCHED_RUNS = "watched-runs"  # run ids started or resumed here: a toast says when each ends (app/notices.py)
LAST_RUN = "last_run"  # the run the Run page showed last
RUNS_TABLE_GENERATION = "runs-table-generation"  # bumped to clear the runs table's selection (after a delete)
RUNS_TABLE_ROWS = "runs-table-rows"  # the run ids in the runs table's order, to drop a selection when rows move
PENDING_DELETE = "pending_delete"  # {"ids", "origin"}: runs waiting for the delete dialog's confirmation
NEW_RUN_BASE = "new_run_base"  # {"kind", "config", "name"}: the run the New run form starts from (Duplicate)
FORM_GENERATION = "form_generation"  # bumped to give the New run form's widgets fresh keys (and values)
NEW_RUN_KIND = "new_run_kind"  # the algorithm the New run form showed last, shown again when the page opens
NEW_RUN_DRAFTS = "new_run_drafts"  # {kind: config}: what the New run form held last for each algorithm
NEW_RUN_STARTS = "new_run_starts"  # {kind: config}: what the form's widgets for each algorithm were drawn from
CHAT_HISTORY = "chat-history"  # the chat page's conversation (app/conversation.py)
CHAT_TARGET_REQUEST = "chat_target_request"  # a run id: the Run page's "Chat with it" asks the chat page for it
CHAT_URL_RUN = "chat-url-run"  # the run id of the chat page's ?run= that its pickers already took
CHAT_LEFT = "chat-a"  # the chat page's left model (a selectbox)
CHAT_RIGHT = "chat-b"  # the chat page's right model (a selectbox)
CHAT_SIDE_BY_SIDE = "chat-side-by-side"  # the chat page's "Side by side" toggle
CHAT_DPO_DATASET = "chat-dpo-dataset"  # the dataset "Prefer this reply" appends to (a text input)
DATASET_BROWSE = "dataset-browse"  # the dataset the Datasets page shows (a selectbox)
BUILT_EXPORTS = "built-exports"  # exports built in this session, by checkpoint (the Checkpoints page)


def runs_table(generation: int) -> str:
    """The runs table's widget key: a new generation starts with nothing selected."""
    return f"runs-table-{generation}"


def eval_pairs_seen(eval_id: str) -> str:
    """The (model, eval set) pairs of an evaluation the Evaluate page has drawn, to redraw when one finishes."""
    return f"pairs-{eval_id}"
