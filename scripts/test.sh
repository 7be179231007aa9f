#!/usr/bin/env bash
# Runs the test suite and lists its 30 slowest tests. pytest's exit code 5 (nothing collected) counts as a failure.
# With no arguments: every test except those marked `slow` (minutes each on a 2-core CPU; `make test-slow` runs
# them). Arguments replace that selection (e.g. `scripts/test.sh -m slow`, or a test file).
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ $# -eq 0 ]]; then set -- -m "not slow"; fi
.venv/bin/python -m pytest -q --durations=30 "$@"
rc=$?
if [[ $rc -eq 5 ]]; then echo "test: pytest collected no tests" >&2; exit 1; fi
exit $rc
