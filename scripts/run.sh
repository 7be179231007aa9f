#!/usr/bin/env bash
# Starts Cookbook Studio (the README's first command, `make run`, calls this after setup).
# Listens on 127.0.0.1 only; COOKBOOK_PORT picks another port. To expose it deliberately, run
# `.venv/bin/cookbook studio --address 0.0.0.0` instead (see README). Ctrl-C stops the studio; runs that were
# training stop with it and can be resumed from their last checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${COOKBOOK_PORT:-8501}
echo ""
echo "  Cookbook Studio: open http://127.0.0.1:${PORT} in your browser"
echo ""
# Convert the default model into the model cache now (first time only, ~20 s), in the background, so the home page
# shows it "being prepared" and then "ready"; the studio waits on the same file lock instead of converting twice.
.venv/bin/python -m app.state &
exec .venv/bin/cookbook studio --port "$PORT" --address 127.0.0.1
