"""Cookbook Studio's Streamlit entry point: page setup, the sidebar's status lines, and st.navigation over pages/.

Run it with `cookbook studio` (or `make run`). Runs live in the engine's RunManager, each training in a child
process of this server process, independent of browser sessions. Pages are thin files in the top-level pages/ folder.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `app`, `cookbook_engine` and `storage` import from a plain checkout too
    sys.path.insert(0, str(REPO_ROOT))

import streamlit as st  # noqa: E402

from app import nav, notices, state, widgets  # noqa: E402
from cookbook_engine import compute_lease, priority  # noqa: E402
from cookbook_engine.log import setup_logging  # noqa: E402
from cookbook_engine.paths import make_files_private  # noqa: E402
from storage import statuses  # noqa: E402

make_files_private()  # also set by `cookbook studio`; here for a studio started with `streamlit run`
compute_lease.set_process_label("the studio")
setup_logging()  # the engine's log lines in the CLI's format, on the server's stderr

st.set_page_config(
    page_title="Cookbook Studio",
    page_icon=str(REPO_ROOT / "app" / "favicon.png"),  # no icon CDN
    layout="wide",
)
state.start_default_model_preparation()
state.store()  # the storage owner, when this starts it, at the studio's priority (it serves the runs too)
priority.lower_this_thread()  # the page draws below the runs training in this process (cookbook_engine/priority)

page = st.navigation(nav.sections())


def sidebar_status() -> None:
    """Runs training and the default model's preparation, refreshed while either changes (as the pages are)."""
    active = [r for r in state.store().list_runs() if r["status"] in statuses.ACTIVE]
    if active:  # counted from storage, so runs started from the command line show too
        st.caption(f":material/progress_activity: {len(active)} run{'s' if len(active) != 1 else ''} training")
    status, _ = state.default_model_status()
    if status != state.ModelState.READY:
        st.caption(":material/hourglass_top: default model: " + state.MODEL_STATE_LABEL[status])


with st.sidebar:
    st.caption("**Cookbook Studio** · post-train language models with SL, DPO and RL")
    settling = state.default_model_status()[0] == state.ModelState.PREPARING or any(
        r["status"] in statuses.ACTIVE for r in state.store().list_runs()
    )
    widgets.fragment(run_every=3 if settling else None)(sidebar_status)()

widgets.fragment(run_every=3 if notices.watching() else None)(notices.toast_finished_runs)()  # toasts for my runs

with state.page_slot():  # while a run trains here, pages draw one at a time (training keeps a core)
    page.run()
