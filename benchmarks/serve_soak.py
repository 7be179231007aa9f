"""Does `cookbook serve` hold its memory flat over many SDK sessions, and do sessions whose heartbeats stop end?

    .venv/bin/python benchmarks/serve_soak.py [--sessions 50] [--session-timeout-s 15] [--port 8651]

Starts `cookbook serve --session-timeout-s T` as a subprocess with a studio home of its own (sessions recorded as
runs, as by default), then opens `--sessions` SDK sessions one after another through
`tinker.ServiceClient(base_url=..., api_key="tml-local")`. Each creates a LoRA training client (rank 4), runs one
forward_backward + optim_step on a short chat, samples 2 x 8 tokens from its own new weights
(save_weights_and_get_sampling_client), and then ends one of two ways, alternately: even sessions close
(`ServiceClient.close("success")`), odd ones just stop heartbeating (the SDK's session holder is closed as when a
process exits without closing: tinker-cookbook's train_dpo and train_on_policy end so). The server's resident memory
(VmRSS of its pid, not counting the storage owner process) is read after each session and once more when every
session has ended; each session's run status is polled from the studio's store (every 0.25 s, which does not name
the session to the server) to time how long after its last request a session that stopped heartbeating ended.
Then a heartbeat for each ended session reads back why it ended (410 Gone with "closed: success" or "expired: no
heartbeat for T s"). Written to benchmarks/results/serve_soak.json. `tests/test_serve_soak.py` runs `soak()` with
a short expiry and asserts the bound.
Not here: concurrent sessions (benchmarks/concurrency.py), the per-request overhead (serve_overhead.py).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import common  # noqa: F401 (puts the repository on sys.path)
from common import load_average, print_table, start_serve, write_result

STATUS_POLL_S = 0.25
TERMINAL = {"completed", "interrupted", "failed"}


@dataclass
class SessionRecord:
    index: int
    session_id: str
    ends_by: str  # "close" or "no heartbeat"
    stopped_at: float  # monotonic time of its last request (close sent, or heartbeats stopped)
    rss_mb_after: float
    status: str | None = None
    ended_after_s: float | None = None  # from stopped_at to its run's status turning terminal (polled)
    end_note: str | None = None  # the server's reason, read back from a late heartbeat's 410


@dataclass
class SoakResult:
    sessions: list[SessionRecord] = field(default_factory=list)
    rss_mb_start: float = 0.0  # the server up, the model not yet loaded
    rss_mb_settled: float = 0.0  # after every session has ended
    session_timeout_s: float = 0.0

    def rss_after(self, count: int) -> float:
        return self.sessions[count - 1].rss_mb_after


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def one_session(url: str, index: int, close: bool) -> str:
    """One SDK session doing a little of everything; returns its id once it has ended from the client's side."""
    import tinker
    from tinker import types

    from cookbook_engine import models

    service = tinker.ServiceClient(base_url=url, api_key="tml-local", display_name=f"soak {index}")
    training = service.create_lora_training_client(
        base_model=models.DEFAULT_MODEL, rank=4, seed=index, train_unembed=False
    ).result()
    tokens = [1, 9690, 314, 253, 1345, 30, 2, 504, 1345, 30]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0] * 4 + [1.0] * 5},
    )
    forward_backward = training.forward_backward([datum], "cross_entropy")
    optim = training.optim_step(types.AdamParams(learning_rate=1e-4))
    forward_backward.result(), optim.result()
    sampler = training.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=index)
    sampler.sample(types.ModelInput.from_ints(tokens[:4]), num_samples=2, sampling_params=params).result()
    session_id = service.holder.get_session_id()
    if close:
        service.close("success").result()
    else:
        service.holder.close()  # heartbeats stop, nothing is sent: what a process exiting without close() does
    return session_id


class StatusWatch:
    """Polls the studio store for the first time each session's run is seen in a terminal status."""

    def __init__(self):
        from storage import Store

        self.store = Store.default()
        self.ended_at: dict[str, tuple[float, str]] = {}  # session id -> (monotonic time seen, status)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="soak-status-watch", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(STATUS_POLL_S):
            now = time.monotonic()
            for run in self.store.list_runs():
                session_id = (run.get("config") or {}).get("session_id")
                if session_id and run["status"] in TERMINAL and session_id not in self.ended_at:
                    self.ended_at[session_id] = (now, run["status"])

    def wait_for(self, session_ids: list[str], deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline and not set(session_ids) <= set(self.ended_at):
            time.sleep(STATUS_POLL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def end_note(url: str, session_id: str) -> str:
    """Why an ended session ended, from the 410 its late heartbeat gets (it does not revive it)."""
    import httpx

    answer = httpx.post(f"{url}/api/v1/session_heartbeat", json={"session_id": session_id}, timeout=10)
    return answer.json().get("detail", "") if answer.status_code == 410 else f"HTTP {answer.status_code}: still open"


def soak(sessions: int, session_timeout_s: float, port: int, progress=print) -> SoakResult:
    """The soak against a fresh server; the caller's COOKBOOK_HOME is the server's studio home."""
    url = f"http://127.0.0.1:{port}"
    server = start_serve(port, "--session-timeout-s", str(session_timeout_s))
    result = SoakResult(session_timeout_s=session_timeout_s)
    watch = StatusWatch()
    try:
        result.rss_mb_start = rss_mb(server.pid)
        for index in range(sessions):
            close = index % 2 == 0
            session_id = one_session(url, index, close)
            record = SessionRecord(
                index, session_id, "close" if close else "no heartbeat", time.monotonic(), rss_mb(server.pid)
            )
            result.sessions.append(record)
            progress(f"session {index + 1}/{sessions} ({record.ends_by}): server RSS {record.rss_mb_after:.0f} MB")
        watch.wait_for([s.session_id for s in result.sessions], deadline_s=session_timeout_s + 120)
        result.rss_mb_settled = rss_mb(server.pid)
        for record in result.sessions:
            seen = watch.ended_at.get(record.session_id)
            if seen is not None:
                record.ended_after_s = max(0.0, seen[0] - record.stopped_at)
                record.status = seen[1]
            record.end_note = end_note(url, record.session_id)
        return result
    finally:
        watch.stop()
        server.terminate()
        server.wait(30)


def summary_rows(result: SoakResult) -> list[list]:
    rows = [["server up, no session", f"{result.rss_mb_start:.0f}", ""]]
    for count in (1, 5, 10, 25, len(result.sessions)):
        if count <= len(result.sessions):
            rows.append([f"after session {count}", f"{result.rss_after(count):.0f}", ""])
    rows.append(["every session ended", f"{result.rss_mb_settled:.0f}", ""])
    for ends_by in ("close", "no heartbeat"):
        group = [s for s in result.sessions if s.ends_by == ends_by]
        latencies = [s.ended_after_s for s in group if s.ended_after_s is not None]
        statuses = sorted({str(s.status) for s in group})
        span = f"{min(latencies):.1f}-{max(latencies):.1f} s" if latencies else "never seen ending"
        rows.append([f"{len(group)} sessions ending by {ends_by}", "", f"{'/'.join(statuses)} after {span}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--session-timeout-s", type=float, default=15.0)
    parser.add_argument("--port", type=int, default=8651)
    options = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cookbook_engine import models, paths

    models.prepare_default_model()
    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(paths.models_dir()))  # the server finds the model converted
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="serve-soak-") as home:
        os.environ["COOKBOOK_HOME"] = home  # the server's and the status watch's studio home
        started = time.monotonic()
        result = soak(options.sessions, options.session_timeout_s, options.port)
        elapsed = time.monotonic() - started
        from storage import stop_owner

        stop_owner(Path(home) / "studio.duckdb")
    print_table(
        f"cookbook serve over {options.sessions} SDK sessions (expiry {options.session_timeout_s:g} s)",
        ["when", "server RSS MB", "ended"],
        summary_rows(result),
    )
    if len(result.sessions) >= 5:
        print(
            f"RSS after session {len(result.sessions)} - after session 5: "
            f"{result.rss_after(len(result.sessions)) - result.rss_after(5):+.0f} MB; "
            f"settled - after session 5: {result.rss_mb_settled - result.rss_after(5):+.0f} MB"
        )
    write_result(
        "serve_soak",
        {
            "sessions": options.sessions,
            "session_timeout_s": options.session_timeout_s,
            "elapsed_s": elapsed,
            "load_average_start": load_start,
            "rss_mb_start": result.rss_mb_start,
            "rss_mb_settled": result.rss_mb_settled,
            "per_session": [asdict(s) for s in result.sessions],
        },
    )


if __name__ == "__main__":
    main()
