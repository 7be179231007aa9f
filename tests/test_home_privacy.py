"""The studio home is private: the folder is created 0700 and what the CLI writes in it is 0600 (issue 11)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys


def test_cli_creates_a_private_home_and_private_files(tmp_path):
    home = tmp_path / "fresh-home"
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-m", "cookbook_engine.cli", "runs"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    entries = [path for path in home.rglob("*")]
    assert entries, "the CLI wrote nothing in the home to check"
    for path in entries:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, f"{path.relative_to(home)} is readable by others: {oct(mode)}"
