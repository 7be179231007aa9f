#!/usr/bin/env bash
# Runs the whole test suite and lists its 30 slowest tests. pytest's exit code 5 (nothing collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q --durations=30 "$@"
rc=$?
if [[ $rc -eq 5 ]]; then echo "test: pytest collected no tests" >&2; exit 1; fi
exit $rc
