"""Run untrusted Python source (written by a model during RL) in a throwaway sandbox and report what happened.

What it is for: grading model-written code. `run_python(source)` runs the source as a script under a fresh
interpreter and returns its stdout, stderr, exit status and, when the sandbox stopped it, why. It never raises
because of anything the child does; it raises only when called wrongly. One call costs one short-lived
launcher plus one interpreter, a few tens of milliseconds.

What it isolates (on this kind of machine: root in a container, Linux namespaces allowed). The first call probes
which of the plans below works here, caches the answer, and `sandbox_capabilities()` reports it; every
`SandboxResult` carries `network_isolated`, so nothing is ever silently less isolated than the UI claims.

- Network: a fresh network namespace (only a loopback interface, down): no internet, no host services, not
  even 127.0.0.1 of the host. The probe checks that a connect really fails with ENETUNREACH.
- Processes: a fresh PID namespace whose init is a small launcher process; when the program exits or the
  launcher is killed, every process it started dies with it (even ones that called setsid or double-forked).
  RLIMIT_NPROC caps the count (threads included); it binds because the child runs as a fresh unprivileged uid
  (chosen at random per call from an unused range), so concurrent sandboxes do not share the budget. A fork
  bomb stops at `max_processes` and dies with the run.
- Files: a private root (launcher.py, root.py): a fresh mount namespace whose root is an empty tmpfs holding,
  read-only, only the interpreter, its standard library (site-packages hidden) and the shared libraries they
  load, at their host paths; a /dev of harmless devices, the PID namespace's /proc, and the work folder, the only
  writable place, a size-capped tmpfs (4 x max_file_mb) that disappears with the namespace. The old root is
  detached: the project's source, the studio home, /work, other homes, socket files and the grader's own files
  do not exist for the child (an allow-list, not a list of hidden folders).
- Resources: RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE, no core dumps; a wall-clock timeout that SIGKILLs the whole
  process group; stdout/stderr capped while reading (a flood is killed). Memory: a fresh memory cgroup per run
  (limits.py) caps all of the run's processes together, counting shared memory, memfd and tmpfs pages too;
  where no cgroup can be made, RLIMIT_AS caps each process instead. CPU: a fresh CPU cgroup per run schedules all
  of its processes as one group capped at one core, however many sessions they start.
- Kernel surface: a seccomp filter refuses SysV IPC, memfd, new user namespaces, mount, ptrace, bpf, io_uring and
  a few more (limits.py); /dev holds only null, zero, full, random and urandom; /dev/shm is read-only.
- Environment: built from scratch (PATH, LANG, HOME, PYTHONDONTWRITEBYTECODE, PYTHONHASHSEED), so no API key
  or token of the studio reaches the child. Python runs with `-I -S -B`: isolated mode, no site-packages
  (standard library only), no bytecode files. The work folder is not on sys.path.
- Privileges: no_new_privs is set, so setuid binaries cannot raise privileges.
- Talking to a running program: `start_python` returns a SandboxProcess (write stdin, read stdout line by line,
  then finish), which the code grader uses to keep a solution and its tests in two separate sandboxes.

What it does NOT do (be honest in UIs and logs about these):
- It is not a proof against a determined attacker: the host kernel is shared and the seccomp filter is a
  deny-list. Without a mount namespace (the last two plans below) everything world-readable on the host can be read.
- Without a CPU cgroup, CPU time is limited per process only; the wall-clock timeout bounds the total.
- PYTHONHASHSEED is ignored by the `-I` child itself (isolated mode ignores PYTHON* variables), so set
  ordering of strings may differ between runs.
- Where the probe finds less than the full plan (no root, no namespaces), it falls back to a user namespace
  (same isolation, but the child keeps the caller's uid and no memory cgroup), then to a bare unprivileged uid,
  then to plain rlimits, and says so in `sandbox_capabilities()` (network, memory, seccomp, devices each). In the
  last two, network_isolated is False and the reason is given; in the last, the child runs as the studio's own
  user: it can write wherever the studio can and read the studio's environment through /proc, and processes
  that leave the process group survive the run.
- `killed_reason` is decided from signals and resource use only, never from the program's output: "timeout",
  "output limit" (ours), "memory limit" (the cgroup's out-of-memory counter; without a cgroup a failed
  allocation is an ordinary error), "cpu limit" (SIGXCPU or SIGKILL with the CPU time used), "file size limit"
  and "disk limit" (what the namespace's init finds in the work folder after the program ended), "signal X",
  "sandbox setup failed". A process limit reached shows as the program's own error.
"""

from __future__ import annotations

import json
import os
import random
import select
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from cookbook_engine.sandbox import limits as kernel_limits, root as private_root
from cookbook_engine.sandbox.root import PYTHON

LAUNCHER = str(Path(__file__).with_name("launcher.py"))
# Where the work folder appears to the child when a mount namespace is available.
SANDBOX_WORKDIR = "/tmp/work"
# The only devices the child sees (bound from the machine's own into an otherwise empty /dev).
DEV_NODES = ["null", "zero", "full", "random", "urandom"]
# Fresh uids for the child, one at random per call from a range no distribution or systemd allocates.
UID_RANGE = (1_900_000_000, 2_000_000_000)
MAX_OPEN_FILES = 256
OUTPUT_KILL_SLACK_BYTES = 1 << 20
STOPPED_BY_CALLER = "stopped by the caller"  # the killed_reason of SandboxProcess.kill()
# killed_reason values that name a limit the sandbox enforced (besides "signal X" and "sandbox setup failed")
LIMIT_REASONS = ("timeout", "output limit", "memory limit", "cpu limit", "file size limit", "disk limit")
TRUNCATION_MARKER = "\n[... sandbox: {dropped} bytes of output dropped ...]\n"


@dataclass
class SandboxLimits:
    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    max_processes: int = 32
    max_file_mb: int = 16
    max_output_chars: int = 20_000


@dataclass
class SandboxResult:
    returncode: int | None  # None when the sandbox killed the child (timeout, output limit); -N for signal N
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None
    duration_s: float
    network_isolated: bool


# ---------------------------------------------------------------- plans and the probe


@dataclass(frozen=True)
class _Plan:
    name: str
    userns: bool
    netns: bool
    mountns: bool
    pidns: bool
    uid_drop: bool
    description: str


def _candidate_plans() -> list[_Plan]:
    full = _Plan(
        "namespaces",
        False,
        True,
        True,
        True,
        True,
        "network, PID and mount namespaces (as root) and a fresh unprivileged uid",
    )
    userns = _Plan(
        "user namespace",
        True,
        True,
        True,
        True,
        False,
        "user, network, PID and mount namespaces (no root needed); the child keeps the caller's uid",
    )
    uid_only = _Plan(
        "uid only", False, False, False, False, True, "a fresh unprivileged uid and rlimits; no namespaces"
    )
    bare = _Plan("rlimits only", False, False, False, False, False, "rlimits only")
    if os.geteuid() == 0:
        return [full, userns, uid_only, bare]
    return [userns, bare]


_PROBE_SOURCE = """
import errno, socket
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.settimeout(1.0)
try:
    sock.connect(("127.0.0.1", 9))
    print("network reachable")
except OSError as error:
    print("unreachable" if error.errno in (errno.ENETUNREACH, errno.EADDRNOTAVAIL) else "network reachable")
"""

_SECCOMP_PROBE_SOURCE = """
import os
try:
    os.memfd_create("probe")
    print("allowed")
except OSError:
    print("refused")
"""

_capabilities_lock = threading.Lock()
_capabilities: dict | None = None
_setup_in_use: _Setup | None = None


@dataclass(frozen=True)
class _Setup:
    """What every run on this machine uses: the namespace plan and the kernel limits that the probe found working."""

    plan: _Plan
    network_isolated: bool
    seccomp: tuple[tuple[int, ...], ...] | None = None
    cgroup: tuple[Path, int] | None = None  # memory: (parent folder, cgroup version)
    cpu_cgroup: tuple[Path, int] | None = None  # CPU: (parent folder, cgroup version)
    root: tuple[tuple[str, str, str], ...] = ()  # the private root's allow-list (root.py)
    root_how: str = ""


def _probe() -> tuple[_Setup, dict]:
    failures = []
    rows, how = private_root.root_entries()
    root = tuple((kind, path, target) for kind, path, target in rows)
    for plan in _candidate_plans():
        candidate = _Setup(plan, False, root=root, root_how=how)
        result = _run(candidate, _PROBE_SOURCE, "", SandboxLimits(timeout_s=10.0), {})
        verdict = result.stdout.strip()
        if result.returncode != 0 or verdict not in ("unreachable", "network reachable"):
            failures.append(f"{plan.name}: {(result.stderr or result.stdout).strip()[-300:] or result.killed_reason}")
            continue
        isolated = plan.netns and verdict == "unreachable"
        if plan.netns and not isolated:
            failures.append(f"{plan.name}: the network namespace still reached 127.0.0.1")
        setup = _probe_kernel_limits(replace(candidate, network_isolated=isolated))
        return setup, _describe(setup, failures)
    raise RuntimeError("the sandbox cannot start any Python child on this machine: " + "; ".join(failures))


def _probe_kernel_limits(setup: _Setup) -> _Setup:
    """Add the seccomp filter where it loads and really refuses memfd_create, and a memory and a CPU cgroup where
    they can be made (as root)."""
    program = kernel_limits.seccomp_program()
    if program is not None:
        trial = replace(setup, seccomp=tuple(tuple(row) for row in program))
        result = _run(trial, _SECCOMP_PROBE_SOURCE, "", SandboxLimits(timeout_s=10.0), {})
        if result.returncode == 0 and result.stdout.strip() == "refused":
            setup = trial
    if setup.plan.uid_drop:
        setup = replace(
            setup, cgroup=kernel_limits.memory_cgroup_parent(), cpu_cgroup=kernel_limits.cpu_cgroup_parent()
        )
    return setup


def _describe(setup: _Setup, failures: list[str]) -> dict:
    plan, isolated = setup.plan, setup.network_isolated
    reason = (
        "the child runs in its own network namespace with no interface up"
        if isolated
        else "this machine does not allow a network namespace here: " + "; ".join(failures)
    )
    return {
        "network_isolated": isolated,
        "network_method": (
            "none"
            if not isolated
            else "user + network namespace (unprivileged)"
            if plan.userns
            else "network namespace (unshare CLONE_NEWNET as root)"
        ),
        "reason": reason,
        "plan": plan.name,
        "description": plan.description,
        "uid_drop": plan.uid_drop,
        "pid_namespace": plan.pidns,
        "filesystem": (
            "a private root (mount namespace + pivot_root): only the interpreter, its standard library and the "
            f"shared libraries they load, read-only ({setup.root_how}); /dev, /proc of its own, and the work folder,"
            " the only writable place. The host's other files (project, homes, /work, sockets) are not there"
            if plan.mountns
            else "unprivileged uid: can write only to world-writable folders"
            if plan.uid_drop
            else "not isolated: the child can write wherever the studio's user can"
        ),
        "devices": (
            "only null, zero, full, random, urandom"
            if plan.mountns and plan.pidns
            else "the machine's /dev (no mount namespace)"
        ),
        "memory_limit": (
            f"total for the whole run (cgroup v{setup.cgroup[1]} memory), out-of-memory kills read "
            "from the kernel's counter"
            if setup.cgroup
            else "per process only (RLIMIT_AS): no memory cgroup can be made here; shared memory and "
            "memfd are " + ("refused by seccomp" if setup.seccomp else "NOT bounded")
        ),
        "memory_cgroup": setup.cgroup is not None,
        "cpu_limit": (
            f"each run's processes are scheduled as one group capped at one core (cgroup v{setup.cpu_cgroup[1]} cpu)"
            " and each process at cpu_s CPU seconds (RLIMIT_CPU)"
            if setup.cpu_cgroup
            else "per process only (RLIMIT_CPU): no CPU cgroup can be made here, so a run with many busy processes "
            "takes more than its share of the machine while its wall-clock timeout lasts"
        ),
        "cpu_cgroup": setup.cpu_cgroup is not None,
        "private_root": plan.mountns,
        "root_paths": private_root.visible_paths([list(row) for row in setup.root]) if plan.mountns else [],
        "unix_sockets": (
            "unreachable: no host socket file is in the private root, and abstract sockets belong to the network "
            "namespace"
            if plan.mountns and isolated
            else "reachable: the child sees the host's files"
        ),
        "seccomp": (
            f"refuses {', '.join(kernel_limits.REFUSED_SYSCALLS)} and new user namespaces"
            if setup.seccomp
            else "not available on this machine"
        ),
        "process_limit_binds": plan.uid_drop or plan.userns,
        "python": PYTHON,
        "failed_plans": failures,
    }


def _ensure_probed() -> tuple[_Setup, dict]:
    global _capabilities, _setup_in_use
    with _capabilities_lock:
        if _setup_in_use is None or _capabilities is None:
            _setup_in_use, _capabilities = _probe()
        return _setup_in_use, _capabilities


def sandbox_capabilities() -> dict:
    """What the sandbox isolates on this machine (probed once, then cached)."""
    return dict(_ensure_probed()[1])


# ---------------------------------------------------------------- running


def run_python(
    source: str, *, stdin: str = "", limits: SandboxLimits | None = None, files: dict[str, str] | None = None
) -> SandboxResult:
    """Run `source` as a Python script in the sandbox; `files` are extra files put in its work folder."""
    limits = limits if limits is not None else SandboxLimits()
    _check_arguments(source, stdin, limits, files)
    setup, _ = _ensure_probed()
    return _run(setup, source, stdin, limits, files or {})


def start_python(
    source: str, *, limits: SandboxLimits | None = None, files: dict[str, str] | None = None
) -> SandboxProcess:
    """Start `source` in the sandbox and return it still running, to talk to it over its stdin and stdout
    (`send`, `read_line`); `finish()` ends it and returns its SandboxResult. Use it as a context manager."""
    limits = limits if limits is not None else SandboxLimits()
    _check_arguments(source, "", limits, files)
    setup, _ = _ensure_probed()
    return SandboxProcess(setup, source, limits, files or {})


def _check_arguments(source, stdin, limits, files) -> None:
    if not isinstance(source, str):
        raise TypeError(f"run_python: source must be a str, got {type(source).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"run_python: stdin must be a str, got {type(stdin).__name__}")
    if not isinstance(limits, SandboxLimits):
        raise TypeError(f"run_python: limits must be a SandboxLimits, got {type(limits).__name__}")
    minimums = {
        "timeout_s": 0.01,
        "cpu_s": 1,
        "memory_mb": 32,
        "max_processes": 1,
        "max_file_mb": 1,
        "max_output_chars": 100,
    }
    for field, minimum in minimums.items():
        value = getattr(limits, field)
        if not isinstance(value, (int, float)) or value < minimum:
            raise ValueError(f"SandboxLimits.{field} must be a number >= {minimum}, got {value!r}")
    for name, content in (files or {}).items():
        if not isinstance(name, str) or not isinstance(content, str):
            raise TypeError(f"run_python: files must map str names to str contents, got {name!r}")
        parts = name.split("/")
        if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"run_python: file name {name!r} must be a plain relative path inside the work folder")
        if name == "main.py":
            raise ValueError("run_python: 'main.py' is reserved for the source itself")


def _run(setup: _Setup, source: str, stdin: str, limits: SandboxLimits, files: dict[str, str]) -> SandboxResult:
    with SandboxProcess(setup, source, limits, files) as process:
        return process.finish(stdin.encode("utf-8"))


class SandboxProcess:
    """One sandboxed program from start to end. The studio's side of it: stdin to write, stdout read line by line
    (or all at once by `finish`), stderr captured; the deadline, the output caps and the cgroup are enforced
    whichever call is waiting. `finish()` kills whatever is left and returns the SandboxResult; it is called by
    `__exit__` too, so nothing outlives a `with` block."""

    def __init__(self, setup: _Setup, source: str, limits: SandboxLimits, files: dict[str, str]):
        self.started = time.monotonic()
        self.deadline = self.started + limits.timeout_s
        self.limits, self.setup = limits, setup
        self.result: SandboxResult | None = None
        self.host_workdir = tempfile.mkdtemp(prefix="cookbook-sandbox-")
        self.cgroup: kernel_limits.MemoryCgroup | None = None
        self.cpu_cgroup: kernel_limits.CpuCgroup | None = None
        self.uid = os.getuid()
        try:
            self._write_files({"main.py": source, **files})
            if setup.cgroup is not None:
                self.cgroup = kernel_limits.MemoryCgroup(*setup.cgroup, int(limits.memory_mb) * 1024 * 1024)
            if setup.cpu_cgroup is not None:
                self.cpu_cgroup = kernel_limits.CpuCgroup(*setup.cpu_cgroup, 1.0)
            self._start(setup.plan, sorted({"main.py", *files}))
        except BaseException:
            self._cleanup()
            raise
        self._open_pipes()

    def _write_files(self, contents: dict[str, str]) -> None:
        for name, text in contents.items():
            path = os.path.join(self.host_workdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)

    def _start(self, plan: _Plan, file_names: list[str]) -> None:
        uid = gid = os.getuid()
        if plan.uid_drop:
            uid = gid = random.randrange(*UID_RANGE)
        if plan.userns:
            gid = os.getgid()
        self.uid = uid
        workdir = SANDBOX_WORKDIR if plan.mountns else self.host_workdir
        if plan.uid_drop and not plan.mountns:
            for folder, _, names in os.walk(self.host_workdir):
                os.chown(folder, uid, gid)
                for name in names:
                    os.chown(os.path.join(folder, name), uid, gid)
        self.status_read, status_write = os.pipe()
        config = {
            "plan": {
                "userns": plan.userns,
                "netns": plan.netns,
                "mountns": plan.mountns,
                "pidns": plan.pidns,
                "uid_drop": plan.uid_drop,
            },
            "uid": uid,
            "gid": gid,
            "status_fd": status_write,
            "host_workdir": self.host_workdir,
            "sandbox_workdir": SANDBOX_WORKDIR,
            "file_names": file_names,
            "root": [list(row) for row in self.setup.root],
            "dev_nodes": DEV_NODES,
            "workdir_kb": 4 * self.limits.max_file_mb * 1024,
            "rlimits": _rlimits(self.limits, plan, memory_cgroup=self.cgroup is not None),
            "seccomp": [list(row) for row in self.setup.seccomp] if self.setup.seccomp else None,
            "cgroup_procs": [group.procs_file for group in (self.cgroup, self.cpu_cgroup) if group is not None],
            "argv": [PYTHON, "-I", "-S", "-B", "main.py"],
        }
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": workdir,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        try:
            self.process = subprocess.Popen(
                [PYTHON, "-I", "-S", LAUNCHER, json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.host_workdir,
                env=environment,
                start_new_session=True,
                pass_fds=(status_write,),
            )
        except BaseException:
            os.close(self.status_read)
            raise
        finally:
            os.close(status_write)

    def _open_pipes(self) -> None:
        process = self.process
        assert process.stdin and process.stdout and process.stderr  # all three are pipes (Popen above)
        self.stdout_fd, self.stderr_fd = process.stdout.fileno(), process.stderr.fileno()
        self.captures = {
            self.stdout_fd: _Capture(self.limits.max_output_chars),
            self.stderr_fd: _Capture(self.limits.max_output_chars),
        }
        self.kill_bytes = 4 * self.limits.max_output_chars + OUTPUT_KILL_SLACK_BYTES
        self.lines = bytearray()  # stdout not yet taken by read_line
        self.status = bytearray()
        self.selector = selectors.DefaultSelector()
        for fd in (self.stdout_fd, self.stderr_fd, self.status_read):
            self.selector.register(fd, selectors.EVENT_READ)
        self.pidfd = os.pidfd_open(process.pid)
        self.selector.register(self.pidfd, selectors.EVENT_READ)
        self.stdin_fd = process.stdin.fileno()
        os.set_blocking(self.stdin_fd, False)
        self.pending_stdin = memoryview(b"")
        self.stdin_closing = False
        self.open_reads = {self.stdout_fd, self.stderr_fd, self.status_read}
        self.exited = False
        self.killed_by_us: str | None = None

    # ------------------------------------------------ talking to it

    def send(self, data: bytes) -> bool:
        """Write `data` to the program's stdin (waiting until it is taken, the deadline, or the program's end).
        False when the program no longer reads."""
        if self.result is not None or self.stdin_closing:
            return False
        self.pending_stdin = memoryview(bytes(self.pending_stdin) + data)
        self._watch_stdin()
        self._pump(lambda: not self.pending_stdin, self.deadline)
        return not self.pending_stdin and not self.stdin_closing

    def read_line(self, timeout_s: float, max_bytes: int) -> bytes | None:
        """The next line the program writes to stdout (without its newline). None when no complete line came
        within `timeout_s` (or the overall deadline), the program ended, or the line grew past `max_bytes`."""
        if self.result is not None:
            return None
        wait_until = min(self.deadline, time.monotonic() + timeout_s)
        self._pump(lambda: b"\n" in self.lines or len(self.lines) > max_bytes, wait_until)
        newline = self.lines.find(b"\n")
        if newline < 0 or newline > max_bytes:
            return None
        line = bytes(self.lines[:newline])
        del self.lines[: newline + 1]
        return line

    @property
    def unread_stdout_bytes(self) -> int:
        """How much stdout has arrived that read_line has not returned yet."""
        return len(self.lines)

    def finish(self, stdin: bytes = b"") -> SandboxResult:
        """Give the program `stdin` and its end of input, wait for it to end (or kill it at the deadline) and
        return what happened. Calling it again returns the same result."""
        if self.result is None:
            try:
                self._finish(stdin)
            finally:
                self._cleanup()
        assert self.result is not None  # _finish sets it or raises
        return self.result

    def kill(self) -> SandboxResult:
        """Stop the program now (labelled as killed by the caller) and return its result."""
        if self.result is None and self.killed_by_us is None:
            self.killed_by_us = STOPPED_BY_CALLER
            self._stop()
        return self.finish()

    def __enter__(self) -> SandboxProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.result is None:
            if exc_info[0] is not None:
                self.kill()
            else:
                self.finish()

    # ------------------------------------------------ the loop behind every call

    def _watch_stdin(self) -> None:
        registered = self.stdin_fd in self.selector.get_map()
        if self.pending_stdin and not registered:
            self.selector.register(self.stdin_fd, selectors.EVENT_WRITE)
        elif not self.pending_stdin:
            if registered:
                self.selector.unregister(self.stdin_fd)
            stdin = self.process.stdin
            if self.stdin_closing and stdin is not None and not stdin.closed:
                stdin.close()

    def _pump(self, done, wait_until: float) -> None:
        """Move data between the program and us until done(), wait_until, or the program and its pipes are gone;
        enforce the deadline and the output cap on the way."""
        linger_deadline = None  # after the program exits, how long we wait for stray writers to close the pipes
        while not done() and (self.open_reads or not self.exited):
            now = time.monotonic()
            if self.killed_by_us is None and now >= self.deadline:
                self.killed_by_us = "timeout"
                self._stop()
            if self.exited and linger_deadline is None:
                linger_deadline = now + 0.5
            if linger_deadline is not None and now >= linger_deadline:
                _kill_group(self.process.pid)
                break
            if now >= wait_until and self.killed_by_us is None:
                return
            until = min(wait_until, linger_deadline or wait_until)
            if self.killed_by_us is not None:
                until = now + 1.0 if linger_deadline is None else linger_deadline
            for key, _ in self.selector.select(timeout=max(0.0, until - now)):
                self._on_ready(key.fd)

    def _on_ready(self, fd: int) -> None:
        if fd == self.pidfd:
            self.selector.unregister(self.pidfd)
            self.exited = True
        elif fd == self.stdin_fd:
            try:
                written = os.write(self.stdin_fd, self.pending_stdin[:65536])
                self.pending_stdin = self.pending_stdin[written:]
            except BlockingIOError:
                pass
            except BrokenPipeError:
                self.pending_stdin = memoryview(b"")
                self.stdin_closing = True
            self._watch_stdin()
        else:
            data = os.read(fd, 65536)
            if not data:
                self.selector.unregister(fd)
                self.open_reads.discard(fd)
            elif fd == self.status_read:
                self.status += data
            else:
                self.captures[fd].add(data)
                if fd == self.stdout_fd and len(self.lines) < self.kill_bytes:
                    self.lines += data
                if self.captures[fd].total > self.kill_bytes and self.killed_by_us is None:
                    self.killed_by_us = "output limit"
                    self._stop()

    def _finish(self, stdin: bytes) -> None:
        if stdin:
            self.pending_stdin = memoryview(bytes(self.pending_stdin) + stdin)
        self.stdin_closing = True
        self._watch_stdin()
        self._pump(lambda: False, self.deadline)
        self.selector.close()
        os.close(self.pidfd)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        _kill_group(self.process.pid)  # nothing may outlive the call (no-op when all is gone)
        _, wait_status, usage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(wait_status)
        if self.setup.plan.uid_drop and not self.setup.plan.pidns:
            _kill_all_of_uid(self.uid)
        returncode, setup_error, usage_flags = _read_status(
            self.status.decode("utf-8", errors="replace"), self.process.returncode
        )
        oom_killed = self.cgroup is not None and self.cgroup.oom_kills() > 0
        out, err = self.captures[self.stdout_fd], self.captures[self.stderr_fd]
        outcome = _Outcome(
            returncode=returncode,
            stdout=out.text(),
            stderr=err.text(),
            setup_error=setup_error,
            killed_by_us=self.killed_by_us,
            cpu_s=usage.ru_utime + usage.ru_stime,
            oom_killed=oom_killed,
            file_at_cap="fsize" in usage_flags,
            disk_full="disk" in usage_flags,
        )
        self.result = _result(outcome, self.limits, self.setup.network_isolated, time.monotonic() - self.started)

    def _stop(self) -> None:
        """Kill the program and everything it started. With a PID namespace, kill the namespace's init first and
        let the launcher reap it (killing both at once would leave init an orphan zombie for the host's init)."""
        if self.setup.plan.pidns:
            for init_pid in _children_of(self.process.pid):
                try:
                    os.kill(init_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            select.select([self.pidfd], [], [], 0.5)
        _kill_group(self.process.pid)

    def _cleanup(self) -> None:
        if getattr(self, "status_read", None) is not None:
            try:
                os.close(self.status_read)
            except OSError:
                pass
            del self.status_read  # closed: the getattr above finds none if cleanup runs again
        for group in (self.cgroup, self.cpu_cgroup):
            if group is not None:
                group.remove()
        shutil.rmtree(self.host_workdir, ignore_errors=True)


def _rlimits(limits: SandboxLimits, plan: _Plan, memory_cgroup: bool) -> dict[str, int]:
    rlimits = {
        "RLIMIT_CPU": int(limits.cpu_s),
        "RLIMIT_FSIZE": int(limits.max_file_mb) * 1024 * 1024,
        "RLIMIT_NOFILE": MAX_OPEN_FILES,
        "RLIMIT_CORE": 0,
    }
    if not memory_cgroup:  # with a cgroup, the cgroup bounds the run's memory in total and kills it when full
        rlimits["RLIMIT_AS"] = int(limits.memory_mb) * 1024 * 1024
    if plan.uid_drop or plan.userns:  # as the studio's own non-root user it would count all of its processes
        # Counts threads too. The namespace's init (and, in a user namespace, the launcher outside it) run as the
        # same uid; they are not the program's to spend.
        rlimits["RLIMIT_NPROC"] = int(limits.max_processes) + (1 if plan.pidns else 0) + (1 if plan.userns else 0)
    return rlimits


def _kill_all_of_uid(uid: int) -> None:
    """Without a PID namespace, kill every process left running as the child's private uid: stop them all first
    (so none can fork a replacement), then kill them, until none is left."""
    for _ in range(20):
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.01)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


@dataclass
class _Outcome:
    returncode: int
    stdout: str
    stderr: str
    setup_error: str
    killed_by_us: str | None
    cpu_s: float
    oom_killed: bool
    file_at_cap: bool
    disk_full: bool


class _Capture:
    """Keeps the head and the tail of one stream, and counts what was dropped in between."""

    def __init__(self, max_chars: int):
        self.keep_bytes = 2 * max_chars  # up to 4 bytes a character: head and tail halves are kept in full
        self.max_chars = max_chars
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep_bytes - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: -self.keep_bytes]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.tail:
            if len(head) <= self.max_chars:
                return head
            tail_text = ""
        else:
            tail_text = self.tail.decode("utf-8", errors="replace")
        full = head + tail_text
        if self.total <= self.keep_bytes * 2 and len(full) <= self.max_chars:
            return full
        half = self.max_chars // 2
        kept_head, kept_tail = full[:half], full[-half:] if half else ""
        dropped = (
            self.total
            - len(kept_head.encode("utf-8", errors="replace"))
            - len(kept_tail.encode("utf-8", errors="replace"))
        )
        return kept_head + TRUNCATION_MARKER.format(dropped=max(dropped, 0)) + kept_tail


def _read_status(message: str, launcher_returncode: int) -> tuple[int, str, set[str]]:
    """The status pipe holds "error <what failed>" from the launcher, and/or "status <raw wait status> fsize F disk
    D" from the namespace's init: the program's own exit status (which the launcher cannot mirror faithfully) and
    what init found in the work folder afterwards. Returns (exit code, setup error, flags that are set)."""
    setup_error = ""
    returncode = launcher_returncode
    flags: set[str] = set()
    if "status " in message:
        message, _, raw = message.rpartition("status ")
        words = raw.split()
        if words and words[0].isdigit():
            returncode = os.waitstatus_to_exitcode(int(words[0]))
            flags = {name for name, value in zip(words[1::2], words[2::2]) if value == "1"}
    if message.startswith("error "):
        setup_error = message[len("error ") :].strip()
    return returncode, setup_error, flags


def _children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _result(outcome: _Outcome, limits: SandboxLimits, network_isolated: bool, duration_s: float) -> SandboxResult:
    returncode: int | None = outcome.returncode
    stderr = outcome.stderr
    reason = outcome.killed_by_us
    if reason is not None:
        returncode = None
    elif outcome.setup_error:
        reason = "sandbox setup failed"
        stderr = f"sandbox setup failed: {outcome.setup_error}\n{stderr}"
    elif returncode != 0:
        reason = _classify_failure(outcome.returncode, outcome, limits)
    return SandboxResult(
        returncode=returncode,
        stdout=outcome.stdout,
        stderr=stderr,
        timed_out=outcome.killed_by_us == "timeout",
        killed_reason=reason,
        duration_s=duration_s,
        network_isolated=network_isolated,
    )


def _classify_failure(returncode: int, outcome: _Outcome, limits: SandboxLimits) -> str | None:
    """Why a program that failed was stopped by a limit, from signals and the resources it used only: never from
    its output, which the program controls."""
    if outcome.oom_killed:
        return "memory limit"
    if returncode in (-signal.SIGKILL, -signal.SIGXCPU) and outcome.cpu_s >= limits.cpu_s - 0.5:
        return "cpu limit"
    if returncode == -signal.SIGXFSZ or outcome.file_at_cap:
        return "file size limit"
    if outcome.disk_full:
        return "disk limit"
    if returncode < 0:
        return f"signal {signal.Signals(-returncode).name}" if -returncode in signal.valid_signals() else "signal"
    return None
