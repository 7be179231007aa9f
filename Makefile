# The README's two commands. Both set the machine up first if needed (idempotent, fast the second time).
.PHONY: setup run test test-slow lint demo

setup:
	@./scripts/setup.sh

# The main job: the studio on http://127.0.0.1:8501 (bound to localhost only).
run: setup
	@./scripts/run.sh

# The test suite, after the lint step (a lint or type error fails it before any test runs): every test except those
# marked `slow`, which CI runs this way too (22.5-24.7 minutes of tests, 25.6-28.6 with a fresh setup, on a 2-core AMD
# EPYC in fp32, 2026-12-03; 28.6 and about 32 on a 2-core Intel Xeon with AMX, 2026-12-02).
test: setup lint
	@./scripts/browser-deps.sh
	@./scripts/test.sh

# The tests marked `slow` (they train, sample or drive chromium for minutes each: about an hour on a 2-core CPU).
test-slow: setup
	@./scripts/browser-deps.sh
	@./scripts/test.sh -m slow

# The linter and formatter check (ruff, its rules in pyproject.toml) and the type checker (mypy over cookbook_engine,
# storage, app, pages). `.venv/bin/ruff format .` formats the tree.
lint: setup
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .
	@.venv/bin/mypy

# A short command-line demo: LoRA SL of the default model on a built-in dataset (one epoch, 103 steps of 8, LoRA's A
# fixed away from ordinary chats by lora_a=auto, B decayed where they still read it; a few minutes; the settings
# measured in docs/DEFAULTS.md).
demo: setup
	@.venv/bin/cookbook sl dataset=builtin:facts num_epochs=1 batch_size=8 learning_rate=1e-3 lora_rank=8
