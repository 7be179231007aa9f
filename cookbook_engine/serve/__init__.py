"""`cookbook serve`: a Tinker API server on this machine, so the unmodified tinker SDK trains and samples here.

    cookbook serve                      # http://127.0.0.1:8600
    export TINKER_BASE_URL=http://127.0.0.1:8600 TINKER_API_KEY=tml-local
    python -c "import tinker; print(tinker.ServiceClient().get_server_capabilities())"

FastAPI routes (app.py) answer the endpoints the SDK 0.38 calls with its own types; the work runs on the local
backend's model worker (one FIFO per base model, shared with the studio's runs in this process); each SDK session
is recorded as a studio run in the same DuckDB (state.py). The server binds 127.0.0.1 only and accepts any API key:
it is for this machine's user, not a network service. So it refuses what is not its own (guard.py): a Host other
than its address (DNS rebinding), a foreign Origin, bodies that are not JSON (or the SDK's protobuf), bodies over
`--max-request-mb`, checkpoint and run names that are not one plain folder name, and paths outside the studio home
unless `--allow-path DIR` names their folder. While it runs, `<home>/serve.json` names its address and pid;
`status()` reads it and probes /api/v1/healthz, which is how the studio's Home shows whether it is up. It also
answers OpenAI's /v1/models, /v1/chat/completions and /v1/completions for the base model and local checkpoints
(openai_api.py); `openai_snippet()` is the line to copy the Checkpoints page shows.

Not here: authentication, multiple machines, the hosted service's projects, billing or console.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from cookbook_engine import paths

DEFAULT_PORT = 8600
HOST = "127.0.0.1"
STATUS_FILE = "serve.json"
LOCAL_API_KEY = "tml-local"  # the SDK refuses keys that do not start with tml-; the server accepts any


@dataclass(frozen=True)
class ServeStatus:
    running: bool
    url: str | None = None
    pid: int | None = None

    @property
    def env_line(self) -> str | None:
        """The line to paste into a shell before using the tinker SDK against this server."""
        return f"export TINKER_BASE_URL={self.url} TINKER_API_KEY={LOCAL_API_KEY}" if self.url else None


def openai_snippet(url: str, model: str) -> str:
    """The lines to paste to call `model` through the OpenAI-compatible endpoint of the server at `url`: the
    `openai` Python client, and the same request with curl."""
    return (
        "from openai import OpenAI\n"
        f'client = OpenAI(base_url="{url}/v1", api_key="{LOCAL_API_KEY}")\n'
        f'reply = client.chat.completions.create(model="{model}", messages=[{{"role": "user", "content": "Hello"}}])\n'
        "print(reply.choices[0].message.content)\n\n"
        f"# or: curl {url}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        f'#   -d \'{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}]}}\''
    )


def _status_path():
    return paths.home() / STATUS_FILE


def status(timeout_s: float = 0.5) -> ServeStatus:
    """Is a `cookbook serve` of this studio home running? Answers within about `timeout_s`."""
    import httpx

    try:
        info = json.loads(_status_path().read_text())
    except (OSError, ValueError):
        return ServeStatus(False)
    url = info.get("url")
    try:
        healthy = httpx.get(f"{url}/api/v1/healthz", timeout=timeout_s).status_code == 200
    except Exception:  # not listening (a stale file from a killed server), or too slow to count as up
        healthy = False
    return ServeStatus(healthy, url if healthy else None, info.get("pid") if healthy else None)


def run_server(
    port: int = DEFAULT_PORT,
    *,
    record: bool = True,
    log_level: str = "warning",
    max_request_mb: int | None = None,
    allow_paths: tuple[str, ...] = (),
    session_timeout_s: float | None = None,
    device: str = "auto",
    dtype: str = "auto",
) -> None:
    """Serve until interrupted (Ctrl-C); then the open sessions' runs are marked interrupted. A session ends after
    `session_timeout_s` (default state.SESSION_TIMEOUT_S) without a heartbeat or request. Every session's models
    compute on `device` in `dtype` (device.py's choices)."""
    import uvicorn

    from cookbook_engine.log import setup_logging
    from cookbook_engine.serve import guard
    from cookbook_engine.serve.app import create_app
    from cookbook_engine.serve.state import SESSION_TIMEOUT_S, ServerState

    setup_logging()  # also when called without the CLI; uvicorn's own lines take the same format (log_config=None)
    state = ServerState(
        record=record, session_timeout_s=session_timeout_s or SESSION_TIMEOUT_S, device=device, dtype=dtype
    )
    limit_mb = max_request_mb if max_request_mb is not None else guard.DEFAULT_MAX_REQUEST_MB
    app = create_app(state, max_request_bytes=limit_mb << 20, allow_paths=allow_paths)
    url = f"http://{HOST}:{port}"
    _status_path().write_text(json.dumps({"url": url, "pid": os.getpid()}))
    print(
        f"cookbook serve: the tinker API on {url} (Ctrl-C stops it). In another shell:\n"
        f"  export TINKER_BASE_URL={url} TINKER_API_KEY={LOCAL_API_KEY}",
        flush=True,
    )
    try:
        uvicorn.run(app, host=HOST, port=port, log_level=log_level, log_config=None)
    finally:
        state.finish_all()
        try:
            if json.loads(_status_path().read_text()).get("pid") == os.getpid():
                _status_path().unlink()
        except (OSError, ValueError):
            pass
