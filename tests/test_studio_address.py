"""The studio listens on localhost only unless someone deliberately asks for another address.

Started the way the README starts it (`cookbook studio`, here on a free port and with no --address), the server's
listening sockets are read from /proc/net/tcp{,6}: every one on the studio's port must be bound to 127.0.0.1 (or
::1), never to 0.0.0.0 / ::. The repository's Streamlit config, which `streamlit run app/main.py` would read, must
say the same.
"""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path

import pytest
from test_browser import studio_process  # tests/ is on sys.path under pytest

REPO = Path(__file__).resolve().parent.parent
LISTEN = "0A"


def listening_addresses(port: int) -> list[str]:
    """IP addresses with a listening TCP socket on `port` (IPv4 and IPv6), from /proc/net."""
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address_hex, port_hex = fields[1].split(":")
            if int(port_hex, 16) != port or fields[3] != LISTEN:
                continue
            raw = bytes.fromhex(address_hex)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(socket.inet_ntop(family, raw))
    return found


def test_repository_streamlit_config_binds_localhost():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"


@pytest.mark.slow
def test_cookbook_studio_listens_on_127_0_0_1_by_default(tmp_path):
    with studio_process(tmp_path / "home", tmp_path / "studio.log") as (url, _):
        port = int(url.rsplit(":", 1)[1])
        addresses = listening_addresses(port)
    assert addresses, f"nothing listens on port {port}"
    assert set(addresses) <= {"127.0.0.1", "::1"}, f"the studio listens on {addresses}"


# --- Host and origin review (issue 21): DNS rebinding and cross-site pages ---------------------------------------
def test_repository_streamlit_config_checks_host_origin_and_xsrf():
    server = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())["server"]
    assert server["enableCORS"] is True and server["enableXsrfProtection"] is True
    assert set(server["allowedHosts"]) == {"localhost", "127.0.0.1", "::1"}
    assert not server.get("corsAllowedOrigins")


def test_cookbook_studio_allows_localhost_its_address_and_named_hosts_only():
    from cookbook_engine.cli import studio_allowed_hosts

    assert studio_allowed_hosts("127.0.0.1", []) == ["localhost", "127.0.0.1", "::1"]
    assert studio_allowed_hosts("10.0.0.5", ["studio.lan"]) == [
        "localhost",
        "127.0.0.1",
        "::1",
        "10.0.0.5",
        "studio.lan",
    ]
    assert socket.gethostname() in studio_allowed_hosts("0.0.0.0", [])
    assert "0.0.0.0" not in studio_allowed_hosts("0.0.0.0", [])


def websocket_status(port: int, host: str, origin: str | None = None) -> int:
    """The HTTP status Streamlit answers a websocket upgrade of its page stream with, for a given Host and Origin."""
    lines = [
        "GET /_stcore/stream HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if origin:
        lines.append(f"Origin: {origin}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


@pytest.mark.slow
def test_the_studio_websocket_refuses_a_rebound_host_and_a_foreign_origin(tmp_path):
    with studio_process(tmp_path / "home", tmp_path / "studio.log") as (url, _):
        port = int(url.rsplit(":", 1)[1])
        assert websocket_status(port, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}") == 101  # the control
        assert websocket_status(port, f"localhost:{port}") == 101
        assert websocket_status(port, f"rebind.example:{port}", f"http://rebind.example:{port}") >= 400
        assert websocket_status(port, f"127.0.0.1:{port}", "http://evil.example") >= 400
