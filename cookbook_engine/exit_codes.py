"""How the `cookbook` command ends on bad input: one line on stderr and exit code 2 (cli.py and evals/commands.py
both answer this way). Not here: which inputs are bad (storage.input_error.BAD_INPUT), the commands themselves.
"""

from __future__ import annotations

import sys

EXIT_BAD_INPUT = 2


def bad_input(message: str) -> int:
    """Print `cookbook: error: MESSAGE` on stderr and return the bad-input exit code."""
    print(f"cookbook: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
