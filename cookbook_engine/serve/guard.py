"""What `cookbook serve` refuses before any route runs, and the checks routes make on the names and paths they get.

The server is for this machine's user, so what it accepts is an allow-list:

- **Host**: the `Host` header names the address the server is bound to, or a localhost name (127.0.0.1, localhost,
  [::1]), with the server's port. Anything else (a DNS-rebinding page's own name) is refused with 421.
- **Origin**: a browser's `Origin`, when sent, is this server's own (http://<allowed host>:<port>); any other (a page
  on another site, `null`) is refused with 403. The SDK sends none.
- **Content type**: a request with a body says `application/json` (`application/x-protobuf` on forward_backward,
  as the SDK sends it), else 415; a JSON body is one JSON object, else 400. So no blind cross-site `text/plain`
  or form post reaches a route.
- **Size**: a body of more than `max_request_bytes` (`cookbook serve --max-request-mb`) is refused with 413 before
  it is read into memory past the limit.
- **Names**: checkpoint names and training-run ids are checked by `compat.check_name` (no '', '.', '..', separator
  or hidden name) before a folder is built from them: 400.
- **Paths**: a checkpoint or base-model path that is a folder on disk must lie inside the studio home or a folder
  the user named with `cookbook serve --allow-path DIR` (after resolving links); else 403.

Every refusal is a JSON `{"detail": ...}` saying what was refused and why. Not here: the routes (app.py), sessions
and futures (state.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cookbook_engine import paths
from cookbook_engine.backends import compat

DEFAULT_MAX_REQUEST_MB = 64  # a tinker-cookbook RL batch of 1M tokens is ~25 MB of protobuf
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
JSON_TYPE = "application/json"
PROTO_TYPE = "application/x-protobuf"
PROTO_PATHS = frozenset({"/api/v1/forward_backward"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Refused(Exception):
    """A request the server will not serve: answered with `status` and `detail`, never a 500."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def refusal(exc: Refused) -> JSONResponse:
    return JSONResponse({"detail": exc.detail}, status_code=exc.status)


# ---------------------------------------------------------------- the middleware: host, origin, type, size


def _host_and_port(value: str) -> tuple[str, int | None] | None:
    """("127.0.0.1", 8600) from "127.0.0.1:8600", ("::1", None) from "[::1]"; None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and port_text is None:
            return None
    else:
        host, _, port_text = value.partition(":")
        port_text = port_text if ":" in value else None
    if not host:
        return None
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return host, int(port_text)


def _allowed_hosts(scope: Scope) -> tuple[set[str], int | None]:
    server = scope.get("server") or (None, None)
    hosts = set(LOCAL_HOSTS)
    if server[0]:
        hosts.add(str(server[0]).lower().strip("[]"))
    hosts -= {"0.0.0.0", "::"}  # a wildcard bind is not a name a client may use
    return hosts, server[1]


def _port_matches(port: int | None, server_port: int | None, default: int) -> bool:
    return server_port is None or (port if port is not None else default) == server_port


def check_host(headers: Headers, scope: Scope) -> None:
    hosts, server_port = _allowed_hosts(scope)
    parsed = _host_and_port(headers.get("host", ""))
    if parsed is None or parsed[0] not in hosts or not _port_matches(parsed[1], server_port, 80):
        raise Refused(
            421,
            f"Host {headers.get('host')!r} is not this server: cookbook serve answers only requests addressed to "
            f"{', '.join(sorted(hosts))} on its own port",
        )


def check_origin(headers: Headers, scope: Scope) -> None:
    origin = headers.get("origin")
    if origin is None:
        return
    hosts, server_port = _allowed_hosts(scope)
    scheme, _, rest = origin.partition("://")
    parsed = _host_and_port(rest) if scheme == "http" and "/" not in rest else None
    if parsed is None or parsed[0] not in hosts or not _port_matches(parsed[1], server_port, 80):
        raise Refused(403, f"Origin {origin!r} is not this server's: cookbook serve takes no cross-site requests")


def check_content_type(headers: Headers, method: str, path: str) -> None:
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    allowed = {PROTO_TYPE} if path in PROTO_PATHS else {JSON_TYPE}
    if method in BODY_METHODS and media_type not in allowed:
        raise Refused(
            415,
            f"{method} {path} with content type {media_type or 'none'!r}: send {' or '.join(sorted(allowed))}",
        )


def check_json_object(body: bytes, path: str) -> None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Refused(400, f"{path}: the body is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise Refused(400, f"{path}: the body must be a JSON object, got {type(value).__name__}")


class GuardMiddleware:
    """The checks above, in order, before the app sees a request; the body is read once, bounded, and replayed."""

    def __init__(self, app: ASGIApp, max_request_bytes: int):
        self.app, self.max_request_bytes = app, max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        method, path = scope["method"], scope["path"]
        try:
            check_host(headers, scope)
            check_origin(headers, scope)
            body = await self._read_body(headers, receive, path)
            if body is None:
                return  # the client went away
            if body:
                check_content_type(headers, method, path)
                if path not in PROTO_PATHS:
                    check_json_object(body, path)
        except Refused as exc:
            await refusal(exc)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, headers: Headers, receive: Receive, path: str) -> bytes | None:
        limit = self.max_request_bytes
        too_big = Refused(413, f"{path}: the body is over the {limit} byte limit (cookbook serve --max-request-mb)")
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                raise Refused(400, f"{path}: Content-Length {length!r} is not a number")
            if int(length) > limit:
                raise too_big
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive_next: Receive) -> Receive:
    """The body read already, then the connection's own messages: a streamed response (server-sent events) waits on
    them for the client's disconnect, so they must not claim one that has not happened."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive_next()

    return receive


# ---------------------------------------------------------------- names and paths, checked by the routes


class PathPolicy:
    """Which folders a request may name: the studio home, plus the folders given with --allow-path."""

    def __init__(self, allow_paths: Iterable[str | Path] = ()):
        self.extra = [Path(p).expanduser().resolve() for p in allow_paths]

    def roots(self) -> list[Path]:
        return [paths.home().resolve(), *self.extra]

    def folder(self, what: str, path: str) -> str:
        """`path` resolved, if it lies inside an allowed root; Refused(403) otherwise."""
        resolved = Path(path).expanduser().resolve()
        if not any(resolved.is_relative_to(root) for root in self.roots()):
            raise Refused(
                403,
                f"{what} {path!r} is outside the studio home; start cookbook serve with --allow-path DIR to allow "
                "a folder elsewhere",
            )
        return str(resolved)

    def checkpoint(self, what: str, path: object) -> str:
        """A checkpoint named by tinker://<run>/<kind>/<name> (names checked) or by a folder inside an allowed root."""
        if not isinstance(path, str) or not path:
            raise Refused(400, f"{what}: a checkpoint path (tinker://... or a folder) is required, got {path!r}")
        if path.startswith("tinker://"):
            try:
                compat.parse_tinker_path(path)
            except ValueError as exc:
                raise Refused(400, f"{what}: {exc}") from None
            return path
        return self.folder(what, path)

    def base_model(self, name: str | None) -> str | None:
        """A base model's name as given, unless it names a folder on disk outside the allowed roots."""
        if name and Path(name).expanduser().exists():
            self.folder("base model folder", name)
        return name


def checkpoint_name(what: str, name: object) -> str:
    try:
        return compat.check_name(what, name)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None


def run_id(value: object) -> str:
    try:
        return compat.check_run_id(value)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None


def checkpoint_kind(kind: str) -> str:
    if kind not in compat.KIND_FOLDERS:
        raise Refused(400, f"checkpoint kind {kind!r}: choose one of {', '.join(compat.KIND_FOLDERS)}")
    return kind
