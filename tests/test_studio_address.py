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
