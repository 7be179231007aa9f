"""The `cookbook` command line: the same runs as the studio's forms, with tinker-cookbook's key=value arguments.

    cookbook sl  model=... dataset=builtin:facts max_steps=20 batch_size=8 learning_rate=1e-3 lora_rank=32
    cookbook dpo dataset=builtin:concise-prefs dpo_beta=0.1 rpo_alpha=1
    cookbook rl  env=arithmetic group_size=4 groups_per_batch=8 [kl_penalty_coef=0.05]
    cookbook distill teacher=CHECKPOINT dataset=builtin:sums max_tokens=16 evals=builtin:arithmetic-fresh   (on-policy)
    cookbook sl --help              (every setting of a kind: its default, help and allowed values)
    cookbook runs [--json]          cookbook resume RUN_ID          cookbook cancel RUN_ID
    cookbook eval models=base,RUN_ID[@STEP] evals=builtin:facts-probes,file.jsonl [max_examples=N]
    cookbook evals                  (list evaluations; see cookbook_engine/evals/commands.py)
    cookbook sweep FILE [--dry-run] (train each configuration, evaluate each)   cookbook sweep --resume SWEEP_ID
    cookbook studio [--port 8501] [--address 127.0.0.1] [--allowed-host NAME]
    cookbook serve [--port 8600] [--allow-path DIR] [--max-request-mb 64] [--session-timeout-s 60]
                   [--device auto] [--dtype auto]  (Tinker API)

`--dry-run` validates everything (settings, model, renderer, data) and prints the resolved config without
training. learning_rate=auto (the default) uses the model's suggested rate. Bad input exits with code 2 and a
one-line reason. A run started here shows up live in the studio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from cookbook_engine.exit_codes import EXIT_BAD_INPUT, bad_input as _bad_input

BAR_READ_EVERY_S = 2.0  # the progress bar of `cookbook sl|dpo|rl` reads the run this often
USAGE = __doc__.split("\n\n")[1]


def run_training(kind: str, args: list[str]) -> int:
    from cookbook_engine import config as cfg
    from cookbook_engine.runs import preflight
    from storage.input_error import BAD_INPUT

    if "--help" in args or "-h" in args:
        print(cfg.usage(kind))  # every setting with its default, help and allowed values, from the dataclass
        return 0
    dry_run = "--dry-run" in args
    args = [a for a in args if a != "--dry-run"]
    try:
        config = cfg.parse_overrides(kind, args)
        prepared = preflight(config)
    except BAD_INPUT as exc:
        return _bad_input(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if dry_run:
        print(cfg.dumps(config))
        summary = getattr(prepared, "summary", None)
        if summary:
            print(f"# {summary()}")
        print(f"# {cfg.to_command(config)}")
        return 0
    return _follow(config, prepared)


def _follow(config, prepared) -> int:
    """Start the run in this process and follow it with a progress bar until it ends (Ctrl-C cancels it)."""
    from cookbook_engine.runs import get_manager

    manager = get_manager(child_processes=False)  # the run trains in this process, which follows it
    notes: list[str] = []
    run_id = manager.start(config, prepared=prepared, echo=notes.append)
    print(f"run {run_id}  (folder {(manager.store.get_run(run_id) or {}).get('log_dir')})", file=sys.stderr)
    return _watch(manager, run_id, notes)


def _watch(manager, run_id: str, notes: list[str]) -> int:
    from cookbook_engine import compute_lease
    from cookbook_engine.progress import progress_display
    from cookbook_engine.training.metric_names import key_metric
    from storage import statuses

    bar = progress_display(sys.stderr)  # a bar on a terminal, a line every 30 s or tenth of the run otherwise
    read_at = float("-inf")
    told_waiting = None
    try:
        while True:
            alive = manager.is_alive(run_id)
            waiting = compute_lease.waiting_note()  # another process computes: say so once per wait
            if waiting and waiting != told_waiting:
                notes.append(waiting)
            told_waiting = waiting
            while notes:
                bar.write(notes.pop(0))
            # Each read is a call the database's owner runs between the training's writes, competing with training
            # for the CPU: read the bar's figures no more often than every BAR_READ_EVERY_S.
            if not alive or time.monotonic() - read_at >= BAR_READ_EVERY_S:
                read_at = time.monotonic()
                run = manager.store.get_run(run_id)
                if run.get("step") is not None:
                    key = manager.store.last_metrics([run_id], key_metric(run["kind"])).get(run_id)
                    bar.update(
                        run["step"],
                        run.get("total_steps"),
                        f"{key_metric(run['kind'])}={key:.4f}" if key is not None else "",
                    )
            if not alive:
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        bar.write("cancelling (a checkpoint is saved first; `cookbook resume` continues it)...")
        manager.cancel(run_id)
        manager.wait(run_id)
    bar.close()
    while notes:
        print(notes.pop(0), file=sys.stderr)
    run = manager.store.get_run(run_id)
    print(f"run {run_id}: {run['status']}" + (f" ({run['error']})" if run.get("error") else ""), file=sys.stderr)
    return 0 if run["status"] in statuses.ENDED_AS_ASKED else 1


def list_runs(as_json: bool) -> int:
    from cookbook_engine.training.metric_names import KEY_METRIC, key_metric
    from storage import Store

    store = Store.default()
    store.mark_orphans_interrupted()
    runs = store.list_runs()
    keys = {}
    for kind in KEY_METRIC:
        keys.update(store.last_metrics([r["run_id"] for r in runs if r["kind"] == kind], key_metric(kind)))
    if as_json:
        rows = [
            {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.items()}
            | {"key_metric": key_metric(r["kind"]), "key_metric_value": keys.get(r["run_id"])}
            for r in runs
        ]
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not runs:
        print("no runs yet: try `cookbook sl max_steps=20`")
        return 0
    print(f"{'run':34} {'kind':4} {'status':11} {'step':>9}  {'key metric':>22}  model")
    for r in runs:
        step = f"{r.get('step') or 0}/{r.get('total_steps') or '?'}"
        value = keys.get(r["run_id"])
        metric = f"{key_metric(r['kind'])}={value:.4f}" if value is not None else ""
        print(f"{r['run_id']:34} {r['kind']:4} {r['status']:11} {step:>9}  {metric:>22}  {r['base_model']}")
    return 0


def resume_run(run_id: str) -> int:
    from cookbook_engine.runs import get_manager

    manager = get_manager(child_processes=False)  # the run trains in this process, which follows it
    notes: list[str] = []
    try:
        manager.resume(run_id, echo=notes.append)
    except (KeyError, ValueError) as exc:
        return _bad_input(str(exc).strip("'\""))
    return _watch(manager, run_id, notes)


def cancel_run(run_id: str) -> int:
    from storage import Store, statuses
    from storage.statuses import RunStatus

    store = Store.default()
    run = store.get_run(run_id)
    if run is None:
        return _bad_input(f"run {run_id}: not found")
    if run["status"] not in statuses.STOPPABLE:
        return _bad_input(f"run {run_id}: not running (status {run['status']})")
    store.update_run(run_id, status=RunStatus.CANCELLING)
    print(f"run {run_id}: asked to stop after its current step")
    return 0


STUDIO_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")  # also in .streamlit/config.toml


def studio_allowed_hosts(address: str, extra: list[str]) -> list[str]:
    """The Host names Streamlit's websocket accepts (server.allowedHosts, against DNS rebinding): localhost, the
    address it listens on, this machine's names when it listens on every interface, and the --allowed-host names."""
    import socket

    hosts = list(STUDIO_LOCAL_HOSTS)
    if address in ("0.0.0.0", "::"):
        hosts += [socket.gethostname(), socket.getfqdn()]
    else:
        hosts.append(address)
    hosts += extra
    return list(dict.fromkeys(h for h in hosts if h))


def studio(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cookbook studio")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="interface to listen on; 127.0.0.1 (default) keeps the studio private to this machine",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name browsers may use to reach the studio besides localhost and --address (repeatable)",
    )
    options = parser.parse_args(argv)
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    main_page = repo / "app" / "main.py"
    os.chdir(repo)  # Streamlit reads .streamlit/config.toml from the working folder
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(main_page),
        "--server.address",
        options.address,
        "--server.port",
        str(options.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    for host in studio_allowed_hosts(options.address, options.allowed_host):
        command += ["--server.allowedHosts", host]
    os.execv(sys.executable, command)
    return 0


def serve(argv: list[str]) -> int:
    """The tinker SDK's API on 127.0.0.1 (cookbook_engine/serve): the SDK trains and samples here."""
    from cookbook_engine.device import DEVICES, DTYPES, DeviceError, choose
    from cookbook_engine.serve import DEFAULT_PORT, run_server

    parser = argparse.ArgumentParser(prog="cookbook serve")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--no-record", action="store_true", help="do not record sessions as studio runs")
    parser.add_argument(
        "--max-request-mb", type=int, default=None, help="largest request body accepted, in MiB (default 64)"
    )
    parser.add_argument(
        "--session-timeout-s",
        type=float,
        default=None,
        help="end a session after this many seconds without a heartbeat or request (default 60; SDK beats every 10)",
    )
    parser.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder outside the studio home whose checkpoints and models requests may name (repeatable)",
    )
    parser.add_argument("--device", default="auto", help=f"where models compute: {', '.join(DEVICES)} (default auto)")
    parser.add_argument(
        "--dtype", default="auto", help=f"the frozen weights' precision: {', '.join(DTYPES)} (default auto)"
    )
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else 0
    if not 0 < options.port < 65536:
        return _bad_input(f"--port must be between 1 and 65535, got {options.port}")
    if options.max_request_mb is not None and not 0 < options.max_request_mb <= 65536:
        return _bad_input(f"--max-request-mb must be between 1 and 65536, got {options.max_request_mb}")
    if options.session_timeout_s is not None and not 0 < options.session_timeout_s <= 86400:
        return _bad_input(
            f"--session-timeout-s must be more than 0 and at most 86400, got {options.session_timeout_s:g}"
        )
    missing = [folder for folder in options.allow_path if not os.path.isdir(folder)]
    if missing:
        return _bad_input(f"--allow-path: no such folder: {', '.join(missing)}")
    try:  # refused now, with the reason, rather than at the first session
        choose(options.device, dtype=options.dtype)
    except DeviceError as exc:
        return _bad_input(f"--device/--dtype: {exc}")
    run_server(
        options.port,
        record=not options.no_record,
        max_request_mb=options.max_request_mb,
        allow_paths=tuple(options.allow_path),
        session_timeout_s=options.session_timeout_s,
        device=options.device,
        dtype=options.dtype,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    from cookbook_engine import compute_lease
    from cookbook_engine.log import setup_logging
    from cookbook_engine.paths import HomeError, make_files_private

    make_files_private()
    setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    compute_lease.set_process_label("cookbook " + (argv[0] if argv else ""))
    try:
        return _dispatch(argv)
    except HomeError as exc:
        return _bad_input(str(exc))


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else EXIT_BAD_INPUT
    command, rest = argv[0], argv[1:]
    from cookbook_engine.config import CONFIG_TYPES

    if command in CONFIG_TYPES:
        return run_training(command, rest)
    if command == "runs":
        return list_runs("--json" in rest)
    if command in ("resume", "cancel"):
        if len(rest) != 1:
            return _bad_input(f"usage: cookbook {command} RUN_ID")
        return resume_run(rest[0]) if command == "resume" else cancel_run(rest[0])
    if command == "studio":
        return studio(rest)
    if command == "serve":
        return serve(rest)
    if command in ("eval", "evals", "sweep"):
        from cookbook_engine.evals import commands

        handler = {"eval": commands.eval_command, "sweep": commands.sweep_command}.get(command)
        return handler(rest) if handler else commands.list_evals()
    return _bad_input(
        f"unknown command {command!r}; commands: sl, dpo, rl, distill, runs, resume, cancel, studio, eval, evals, "
        "sweep, serve"
    )


if __name__ == "__main__":
    sys.exit(main())
