"""Honest time: the CLI's progress display when stderr is not a terminal, and the ETA from a run's own steps.

Fast tests with a fake clock: no model, no timing assertions on the real clock."""

from __future__ import annotations

import io

import pytest

from cookbook_engine import progress, speed


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_long_run_followed_without_a_terminal_writes_a_few_lines_not_one_per_update():
    out, clock = io.StringIO(), FakeClock()
    display = progress.SparseLines(out, clock=clock)
    for poll in range(1200):  # a 40-minute run polled every 2 s, 200 steps
        clock.now = poll * 2.0
        display.update(poll // 6, 200, f"loss={1 / (1 + poll):.4f}")
    display.close()
    lines = out.getvalue().splitlines()
    assert 10 <= len(lines) <= 40 * 60 / progress.LINE_EVERY_S + 11  # time- or tenth-paced, never per update
    assert "\r" not in out.getvalue()
    assert lines[-1].startswith("step 199/200 (100%)") and "elapsed" in lines[-1]
    assert any("left" in line for line in lines[1:-1])


def test_the_plain_lines_eta_comes_from_the_runs_own_rate():
    out, clock = io.StringIO(), FakeClock()
    display = progress.SparseLines(out, clock=clock)
    clock.now = 20.0  # startup (model loading) is not counted in the rate
    display.update(0, 100)
    clock.now = 50.0
    display.update(10, 100)  # 10 steps in 30 s: 3 s a step, 90 steps left
    assert display.seconds_left(10, 100) == 270.0
    assert out.getvalue().splitlines()[-1] == "step 10/100 (10%) · 50 s elapsed · about 4 min 30 s left"


def test_a_terminal_gets_the_tqdm_bar():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress.progress_display(Terminal()), progress.TerminalBar)
    assert isinstance(progress.progress_display(io.StringIO()), progress.SparseLines)


def test_eta_uses_recent_step_times_and_skips_a_resume():
    total_T = [(0, 5.0), (1, 7.0), (2, 9.0), (3, 11.5), (4, 1.0), (5, 3.0)]  # the clock restarted at step 4
    durations = speed.step_seconds(total_T)
    assert durations == [2.0, 2.0, 2.5, 2.0]
    assert speed.eta_seconds(6, 10, durations) == 4 * 2.125  # the mean step time, steps across the resume left out
    assert speed.eta_seconds(6, 10, []) is None
    assert speed.clock(45) == "45 s" and speed.clock(130) == "2 min 10 s" and speed.clock(5400) == "1 h 30 min"


def test_speeds_fall_back_to_the_idle_machine_figures_until_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_MODEL_CACHE", str(tmp_path))
    assert speed.speeds() == speed.IDLE_2_CORE and not speed.speeds().measured_at
    speed._cache_file(speed.models.DEFAULT_MODEL).write_text(
        '{"train_tok_s": 20.0, "eval_tok_s": 50.0, "sample_tok_s": 5.0, "measured_at": 1.0}'
    )
    assert speed.speeds().train_tok_s == 20.0


def test_the_run_log_gets_a_step_line_with_the_key_metrics():
    from cookbook_engine.runs import step_line

    line = step_line(
        40, 200, "sl", {"train_mean_nll": 1.23456, "learning_rate": 8e-4, "time/step": 2.14, "num_tokens": 512.0}
    )
    assert line == "step 40/200 · train_mean_nll=1.235 · learning_rate=0.0008 · 2.1 s/step"
    assert (
        step_line(3, 3, "rl", {"env/all/reward/total": 0.5, "env/all/correct": 0.25})
        == "step 3/3 · env/all/reward/total=0.5 · env/all/correct=0.25"
    )


def test_the_forms_estimate_says_how_much_longer_while_other_runs_take_turns(monkeypatch):
    """Runs on one machine take turns computing (the compute lease), so with two others training the estimate
    promises up to three times the run's own time, not an unquantified 'longer'."""
    from app import forms, state
    from cookbook_engine import config as cfg
    from cookbook_engine.rl import envs, loop
    from cookbook_engine.training import estimate

    monkeypatch.setattr(speed, "speeds", lambda model: speed.Speeds(100.0, 300.0, 100.0, measured_at=1.0))
    config = cfg.parse_overrides(
        "rl", ["env=arithmetic", "max_steps=2", "groups_per_batch=2", "group_size=2", "max_tokens=25"]
    )

    class Store:
        def __init__(self, statuses):
            self.statuses = statuses

        def list_runs(self):
            return [{"status": status} for status in self.statuses]

        def step_speeds(self, **similar):
            return []  # no finished runs to learn from

    monkeypatch.setattr(state, "store", lambda: Store(["running", "queued", "completed"]))
    prepared = loop.PreparedRL(envs.build_env(config, renderer=None), "auto", None, 0)
    alone = estimate.run_time(config, prepared, loop.plan(config, prepared), speed.speeds(config.model)).total
    busy = forms.estimate(config, prepared)
    assert (
        f"2 runs training now take turns with it on the CPU: while they run, expect up to "
        f"{forms._minutes(alone * 3)}" in busy
    )
    monkeypatch.setattr(state, "store", lambda: Store(["completed"]))
    alone_text = forms.estimate(config, prepared)
    assert "take turns" not in alone_text and f"roughly {forms._minutes(alone)}" in alone_text


def test_the_time_left_holds_still_while_the_machines_load_comes_and_goes():
    """The Runs table and the Run page said 5 min 17 s and 9 min 32 s left for the same 400-step run, read at steps 52
    and 57: a median of the last five steps followed each swing of a shared machine's load. Steps of 0.9 s and 1.7 s
    in turns of five (and a 6 s evaluation every 10 steps) give one time left, read five steps apart."""
    durations = [0.9 if (step // 5) % 2 == 0 else 1.7 for step in range(60)]
    durations = [d + (6.0 if step % 10 == 0 else 0.0) for step, d in enumerate(durations)]
    per_step = [speed.eta_seconds(step, 400, durations[:step]) / (400 - step) for step in (52, 57)]
    assert abs(per_step[0] - per_step[1]) <= 0.1 * min(per_step), per_step
    assert 1.8 <= per_step[0] <= 2.0  # 1.3 s a step, plus the evaluations' 0.6 s a step


def test_an_rl_runs_time_left_comes_from_its_own_step_times():
    """RL's time/total is each step's own time (tinker-cookbook's metric), not the time since the start as in SL:
    two steps of 80 s and 30 s are two durations, so the time left is known from the first step on (issue 27, item
    7: 'time left: known after two steps' never resolved in a 3-step RL run)."""
    durations = speed.step_seconds([(0, 80.0), (1, 30.0)], "rl")
    assert durations == [80.0, 30.0]
    assert speed.eta_seconds(2, 3, durations) == 55.0
    assert speed.step_seconds([(0, 80.0), (1, 110.0)], "sl") == [30.0]  # SL: seconds since the run started


def test_the_estimate_counts_rl_evaluations_and_checkpoint_saves(monkeypatch):
    """What the form's estimate missed (issue 27, item 11, 'said 1.6 min for a run of 2 min 16 s'): RL's held-out
    evaluations at step 0, every eval_every steps and at the end (one reply per problem), and the checkpoint saves."""
    from cookbook_engine import config as cfg
    from cookbook_engine.rl import envs, loop
    from cookbook_engine.training import estimate

    rate = speed.Speeds(100.0, 300.0, 100.0, measured_at=1.0, single_sample_tok_s=20.0)
    config = cfg.parse_overrides(
        "rl", ["env=arithmetic", "max_steps=12", "eval_every=10", "save_every=5", "anchor.dataset="]
    )
    prepared = loop.PreparedRL(envs.build_env(config, renderer=None), "auto", None, 46)
    plan = loop.plan(config, prepared)
    time = estimate.run_time(config, prepared, plan, rate)
    assert time.steps == pytest.approx(plan.tokens / 100.0 + plan.tokens / 100.0)
    assert time.num_evaluations == 3  # before steps 0 and 10, and at the end
    assert time.evaluations == pytest.approx(3 * len(prepared.env.test) * config.max_tokens / 20.0)
    assert time.num_saves == 3 and time.saves == 3 * estimate.SAVE_S  # after steps 5 and 10, and the final one
    assert time.total == time.loading + time.steps + time.evaluations + time.saves
    assert "3 evaluations" in time.parts() and "3 checkpoint saves" in time.parts()
    sl = cfg.parse_overrides("sl", ["max_steps=25", "eval_every=10"])
    assert estimate.evaluation_points(sl, 25) == 4  # steps 0, 10, 20 and the end (the form counted 3)


def test_the_estimate_counts_the_anchors_scoring_and_its_rows_every_step():
    """An anchored run trains anchor.rows chats every step and scores each chat it uses once (issue 23: an RL run
    anchored to builtin:replay took 3 minutes more than the same run without, which the estimate did not say)."""
    from cookbook_engine import config as cfg
    from cookbook_engine.rl import envs, loop
    from cookbook_engine.training import estimate

    rate = speed.Speeds(100.0, 300.0, 100.0, measured_at=1.0, single_sample_tok_s=20.0)
    plain = cfg.parse_overrides("rl", ["env=arithmetic", "max_steps=12", "anchor.dataset="])
    anchored = cfg.parse_overrides(
        "rl", ["env=arithmetic", "max_steps=12", "anchor.dataset=builtin:replay", "anchor.rows=8"]
    )
    prepared = loop.PreparedRL(envs.build_env(plain, renderer=None), "auto", None, 46)
    without = estimate.run_time(plain, prepared, loop.plan(plain, prepared), rate)
    with_anchor = estimate.run_time(anchored, prepared, loop.plan(anchored, prepared), rate)
    assert estimate.anchor_seconds(plain, rate, 12) == 0
    added = estimate.anchor_seconds(anchored, rate, 12)
    # 96 chats of ~80 tokens trained at 100 tok/s, and scored twice at 300 tok/s: about 77 + 51 s
    assert 80 < added < 250
    assert estimate.anchor_seconds(anchored, rate, 48) < 4 * added  # 384 rows of 292 chats: each scored once
    assert with_anchor.steps == pytest.approx(without.steps + added)
    assert with_anchor.total == pytest.approx(without.total + added)
    missing = cfg.parse_overrides("rl", ["env=arithmetic", "anchor.dataset=/no/such/file.jsonl"])
    assert estimate.anchor_seconds(missing, rate, 12) == 0.0  # the check names the missing file


def test_the_estimate_counts_computing_the_null_space_directions_once(tmp_path, monkeypatch):
    """RL's default (lora_a=auto -> null_space) first computes covariances in the model cache (2-3 minutes once);
    the estimate counts them while they are missing and not after, nor for a run whose A trains."""
    from cookbook_engine import config as cfg, paths
    from cookbook_engine.rl import arithmetic, envs, loop
    from cookbook_engine.training import estimate, lora_a, null_space

    monkeypatch.setenv("COOKBOOK_MODEL_CACHE", str(tmp_path))
    rate = speed.Speeds(100.0, 300.0, 100.0, measured_at=1.0, single_sample_tok_s=20.0)
    fixed = cfg.parse_overrides("rl", ["env=arithmetic", "max_steps=12"])
    trained = cfg.parse_overrides("rl", ["env=arithmetic", "max_steps=12", "lora_a=trained"])
    prepared = loop.PreparedRL(envs.build_env(fixed, renderer=None), "auto", None, 46)
    plan = loop.plan(fixed, prepared)
    first = estimate.run_time(fixed, prepared, plan, rate)
    solve = estimate.NULL_SPACE_SOLVE_S["attention"]  # RL's default adapts the attention projections only
    assert first.loading == estimate.STARTUP_S + estimate.NULL_SPACE_FIRST_S + estimate.NULL_SPACE_TASK_S + solve
    assert "for LoRA's null-space directions, once" in first.parts()
    assert estimate.run_time(trained, prepared, plan, rate).loading == estimate.STARTUP_S
    task_chats = arithmetic.null_space_task_chats()
    keep, task, directions = null_space.cache_paths(
        fixed.model, task_chats, lora_a.modules(fixed), lora_a.rank_used(fixed)
    )
    assert keep.parent == task.parent == directions.parent == paths.models_dir() / null_space.CACHE_FOLDER
    keep.parent.mkdir(parents=True)
    keep.write_bytes(b"")  # what another task's first run leaves: the task's own covariances are still missing
    loading = estimate.run_time(fixed, prepared, plan, rate).loading
    assert loading == estimate.STARTUP_S + estimate.NULL_SPACE_TASK_S + solve
    task.write_bytes(b"")  # what a first run at another rank leaves: this rank's directions are still missing
    assert estimate.run_time(fixed, prepared, plan, rate).loading == estimate.STARTUP_S + solve
    directions.write_bytes(b"")  # what a finished first run leaves
    assert estimate.run_time(fixed, prepared, plan, rate).loading == estimate.STARTUP_S


def small_rl_run(*settings: str):
    from cookbook_engine import config as cfg
    from cookbook_engine.rl import envs, loop

    config = cfg.parse_overrides(
        "rl", ["env=arithmetic", "max_steps=2", "groups_per_batch=2", "group_size=2", "max_tokens=25", *settings]
    )
    return config, loop.PreparedRL(envs.build_env(config, renderer=None), "auto", None, 0)


def test_a_completed_run_records_its_speed_and_the_next_estimate_is_scaled_by_it(tmp_path, monkeypatch):
    """Issue 27, item 11: the estimate from a short synthetic calibration was up to 2x off. A run that completes
    records its seconds per step against its estimate, and the form's next estimate for a run like it is scaled by
    what such runs measured, saying so."""
    import threading
    from datetime import timedelta
    from types import SimpleNamespace

    from app import forms, state
    from cookbook_engine import runs
    from cookbook_engine.rl import loop
    from cookbook_engine.training import estimate
    from storage import Store, utcnow

    monkeypatch.setattr(speed, "speeds", lambda model: speed.Speeds(100.0, 300.0, 100.0, measured_at=1.0))
    store = Store(tmp_path / "studio.duckdb")
    monkeypatch.setattr(state, "store", lambda: store)
    config, prepared = small_rl_run()
    raw = estimate.run_time(config, prepared, loop.plan(config, prepared), speed.speeds(config.model))
    assert f"roughly {forms._minutes(raw.total)}" in forms.estimate(config, prepared)  # nothing learned yet

    async def train(config, context, prepared):  # the run took twice its estimate
        store.update_run(context.run_id, step=2, total_steps=2, started_at=utcnow() - timedelta(seconds=2 * raw.total))

    monkeypatch.setattr(runs, "loop_module", lambda kind: SimpleNamespace(train=train, plan=loop.plan))
    store.create_run(
        "rl-1", name="rl-1", kind="rl", backend="local", base_model=config.model, config={}, log_dir=tmp_path
    )
    context = SimpleNamespace(
        run_id="rl-1", cancel_event=threading.Event(), note=lambda message: None, logger=SimpleNamespace(close=print)
    )
    runs.RunManager(store)._execute(config, context, prepared, runs.estimate_for(config, prepared))  # type: ignore[arg-type]

    [record] = store.step_speeds(**estimate._similar(config))
    assert record["steps"] == 2 and record["estimated_step_s"] == pytest.approx(raw.total / 2)
    assert record["measured_step_s"] == pytest.approx(raw.total, rel=0.05)
    text = forms.estimate(config, prepared)
    assert f"roughly {forms._minutes(2 * raw.total)}" in text, text
    assert "from 1 earlier run like it on this machine, which took 2x the estimate" in text, text
    other_shape, prepared_other = small_rl_run("group_size=4")
    assert "from 1 earlier run of this kind and model" in forms.estimate(other_shape, prepared_other)


def test_the_estimate_learns_from_the_median_of_similar_runs_only(tmp_path, monkeypatch):
    """The median ratio of the newest similar runs (same model, kind and dtype on this host; the same batch shape
    when there are some), so one run slowed by a burst of load does not swing it."""
    from cookbook_engine.training import estimate
    from storage import Store

    store = Store(tmp_path / "studio.duckdb")
    config, _ = small_rl_run()
    similar = {**estimate._similar(config), "shape": estimate.batch_shape(config), "steps": 2}
    assert estimate.correction(store, config) is None
    for run_id, ratio in (("a", 1.5), ("b", 6.0), ("c", 1.2)):
        store.record_step_speed(run_id, **similar, measured_step_s=ratio * 10, estimated_step_s=10.0)
    store.record_step_speed("other-shape", **{**similar, "shape": "1 x 1"}, measured_step_s=90, estimated_step_s=10)
    store.record_step_speed("sl", **{**similar, "kind": "sl"}, measured_step_s=90, estimated_step_s=10)
    store.record_step_speed("elsewhere", **{**similar, "host": "other"}, measured_step_s=90, estimated_step_s=10)
    assert estimate.correction(store, config) == estimate.Correction(ratio=1.5, runs=3, same_shape=True)
    with pytest.raises(ValueError, match="measured_step_s of run 'bad' must be a positive number"):
        store.record_step_speed("bad", **similar, measured_step_s=float("nan"), estimated_step_s=10.0)


def test_the_estimate_says_when_another_process_is_computing_on_this_machine(monkeypatch):
    """A CLI run, a sweep or `cookbook serve` in another process takes turns with the run (the compute lease); the
    studio's own run list does not show them, so the estimate names the one computing now."""
    from app import forms
    from cookbook_engine import compute_lease

    monkeypatch.setattr(compute_lease, "holder_now", lambda: ("cookbook sweep (pid 42)", 42))
    assert "Another process (cookbook sweep (pid 42)) is computing" in forms.other_process_note()
    monkeypatch.setattr(compute_lease, "holder_now", lambda: None)
    assert forms.other_process_note() == ""


def test_an_evaluation_followed_without_a_terminal_writes_plain_lines_not_a_redrawn_bar(monkeypatch):
    """`cookbook eval ... 2> log` used to fill the log with tqdm redraws (thousands of '\\r' frames for 600
    examples); it now writes the same sparse lines as a training run, counting examples."""
    from cookbook_engine.evals import commands

    class Store:
        def get_job(self, eval_id):
            return {"total": 600}

    class Manager:
        store = Store()
        polls = 0

        def is_alive(self, eval_id):
            self.polls += 1
            return self.polls <= 40

        def examples_done(self, eval_id):
            return self.polls * 15

        def wait(self, eval_id):
            return {"status": "completed", "done": 600, "total": 600}

        def cancel(self, eval_id):
            raise AssertionError("not cancelled")

    err = io.StringIO()
    monkeypatch.setattr(commands.sys, "stderr", err)
    monkeypatch.setattr(commands.time, "sleep", lambda s: None)
    commands.follow(Manager(), "eval-1", ["evaluating base on builtin:arithmetic"])
    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue()
    assert lines[0] == "evaluating base on builtin:arithmetic"
    assert 2 <= len(lines) <= 13 and lines[-1].startswith("examples 600/600 (100%)")


def test_the_forms_estimate_says_why_this_machines_speed_is_not_measured_yet(monkeypatch, tmp_path):
    """A calibration skipped for other work leaves the idle-machine figures; the form says so rather than 'check again
    in a minute' (it tries again only after speed.RETRY_AFTER_BUSY_S)."""
    from app import forms, state
    from cookbook_engine import config as cfg
    from cookbook_engine.rl import envs, loop

    monkeypatch.setattr(speed, "speeds", lambda model: speed.IDLE_2_CORE)
    monkeypatch.setattr(speed, "_cache_file", lambda model: tmp_path / "speed.json")
    (tmp_path / "speed.skipped.json").write_text('{"at": 9e18, "why": "it was busy"}')

    class Store:
        def list_runs(self):
            return []

        def step_speeds(self, **similar):
            return []

    monkeypatch.setattr(state, "store", lambda: Store())
    config = cfg.parse_overrides("rl", ["env=arithmetic", "max_steps=2", "groups_per_batch=2", "group_size=2"])
    prepared = loop.PreparedRL(envs.build_env(config, renderer=None), "auto", None, 0)
    text = forms.estimate(config, prepared)
    assert "on an idle 2-core CPU" in text and "measured once nothing else computes (it was busy)" in text
    (tmp_path / "speed.skipped.json").unlink()
    assert "being measured: check again in a minute" in forms.estimate(config, prepared)
