"""The studio's pages in one list: main.py builds st.navigation from it, and pages link to each other through it.

A page is a file in the top-level `pages/` folder; st.Page gets its absolute path. This module only describes
pages; it renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

PAGES_DIR = Path(__file__).resolve().parent.parent / "pages"


@dataclass(frozen=True)
class PageSpec:
    file: str
    title: str
    icon: str
    section: str
    hidden: bool = False


PAGES: dict[str, PageSpec] = {
    "home": PageSpec("home.py", "Home", ":material/home:", "Studio"),
    "new_run": PageSpec("new_run.py", "New run", ":material/add_circle:", "Train"),
    "runs": PageSpec("runs.py", "Runs", ":material/monitoring:", "Train"),
    "run": PageSpec("run.py", "Run", ":material/insights:", "Train", hidden=True),
    "compare": PageSpec("compare.py", "Compare", ":material/compare_arrows:", "Train"),
    "transcripts": PageSpec("transcripts.py", "Transcripts", ":material/forum:", "Inspect"),
    "chat": PageSpec("chat.py", "Chat", ":material/chat:", "Inspect"),
    "evaluate": PageSpec("evaluate.py", "Evaluate", ":material/leaderboard:", "Inspect"),
    "sweeps": PageSpec("sweeps.py", "Sweeps", ":material/grid_view:", "Train"),
    "datasets": PageSpec("datasets.py", "Datasets", ":material/dataset:", "Data & weights"),
    "checkpoints": PageSpec("checkpoints.py", "Checkpoints", ":material/download:", "Data & weights"),
}


def page(key: str) -> st.Page:
    spec = PAGES[key]
    return st.Page(
        str(PAGES_DIR / spec.file),
        title=spec.title,
        icon=spec.icon,
        url_path=key,
        default=key == "home",
        visibility="hidden" if spec.hidden else "visible",
    )


def sections() -> dict[str, list[st.Page]]:
    grouped: dict[str, list[st.Page]] = {}
    for key, spec in PAGES.items():
        grouped.setdefault(spec.section, []).append(page(key))
    return grouped


def go(key: str, **query: str) -> None:
    """Switch to a page (stops this script run), with query parameters such as run=RUN_ID."""
    st.switch_page(page(key), query_params=query or None)


def link(key: str, label: str | None = None, icon: str | None = None, **query: str) -> None:
    spec = PAGES[key]
    st.page_link(page(key), label=label or spec.title, icon=icon or spec.icon, query_params=query or None)
