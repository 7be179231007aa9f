"""Secrets the studio handles (the Tinker API key, Hugging Face tokens): where the key comes from, and redaction.

The Tinker key comes from the `TINKER_API_KEY` environment variable, or is entered in the studio and kept in this
process's memory until the process ends (`set_session_key`; shared by the studio's browser tabs, which all belong
to the one local user): it is never put into os.environ (child processes such as the code sandbox do not inherit
it), never written to DuckDB, run folders, logs, exported configs or the displayed CLI command. Configs have no
key field at all. `redact(text)` replaces every known secret value with "***"; loggers and exporters pass text
through it as a second line of defence.

Not here: talking to the service (backends/tinker.py), storing anything (there is nothing to store).
"""

from __future__ import annotations

import os
import threading
from typing import Any

TINKER_KEY_ENV = "TINKER_API_KEY"
# Other environment variables whose values are secrets and must never appear in what the studio writes.
OTHER_SECRET_ENVS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MASK = "***"
MIN_SECRET_LENGTH = 6  # shorter values are not redacted: replacing "abc" everywhere would mangle text

_lock = threading.Lock()
_session_key: str | None = None


def set_session_key(key: str | None) -> None:
    """Use this Tinker key for the rest of this process (the studio's key field). Empty or None clears it."""
    global _session_key
    cleaned = (key or "").strip()
    with _lock:
        _session_key = cleaned or None


def clear_session_key() -> None:
    set_session_key(None)


def tinker_key() -> str | None:
    """The Tinker key to use: the session's, else TINKER_API_KEY, else None."""
    with _lock:
        if _session_key:
            return _session_key
    from_env = os.environ.get(TINKER_KEY_ENV, "").strip()
    return from_env or None


def key_source() -> str | None:
    """Where the key in use comes from: "session", "environment", or None when there is none."""
    with _lock:
        if _session_key:
            return "session"
    return "environment" if os.environ.get(TINKER_KEY_ENV, "").strip() else None


def masked(key: str | None) -> str:
    """A key shown to its owner without revealing it: its prefix and last four characters."""
    if not key:
        return "(none)"
    if len(key) < 16:
        return MASK
    return f"{key[:4]}{MASK}{key[-4:]}"


def known_secrets() -> list[str]:
    """Every secret value this process knows of (longest first, so overlapping values redact fully)."""
    values = set()
    with _lock:
        if _session_key:
            values.add(_session_key)
    for name in (TINKER_KEY_ENV, *OTHER_SECRET_ENVS):
        value = os.environ.get(name, "").strip()
        if value:
            values.add(value)
    return sorted((v for v in values if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True)


def redact(text: str) -> str:
    """`text` with every known secret value replaced by "***"."""
    if not isinstance(text, str) or not text:
        return text
    for secret in known_secrets():
        text = text.replace(secret, MASK)
    return text


def redact_obj(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings, numbers) with secrets redacted in every string."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_obj(v) for v in value)
    return value
