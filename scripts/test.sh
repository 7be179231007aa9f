#!/usr/bin/env bash
# Runs the whole test suite. pytest's exit code 5 (nothing collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q "$@"
rc=$?
if [[ $rc -eq 5 ]]; then echo "test: pytest collected no tests" >&2; exit 1; fi
exit $rc
