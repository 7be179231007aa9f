"""The sandbox for model-written code: every protection is attacked for real, and a normal run must work after."""

from __future__ import annotations

import errno
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cookbook_engine import sandbox
from cookbook_engine.sandbox import UID_RANGE, SandboxLimits, run_python, sandbox_capabilities


@pytest.fixture(autouse=True)
def studio_home(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def capabilities():
    return sandbox_capabilities()


def assert_training_continues():
    result = run_python("print(6 * 7)")
    assert (result.returncode, result.stdout, result.killed_reason) == (0, "42\n", None), result


def sandbox_uid_processes() -> list[int]:
    """Host pids still running as one of the sandbox's private uids."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if UID_RANGE[0] <= os.stat(f"/proc/{entry}").st_uid < UID_RANGE[1]:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def test_capabilities_say_what_is_isolated(capabilities):
    for key in ("network_isolated", "network_method", "reason", "uid_drop", "pid_namespace", "filesystem"):
        assert key in capabilities
    assert isinstance(capabilities["network_isolated"], bool)
    assert capabilities["reason"]
    if os.geteuid() == 0 and capabilities["plan"] != "namespaces":
        pytest.fail(f"as root the full plan should work on this kind of machine: {capabilities}")
    if capabilities["plan"] in ("namespaces", "user namespace"):  # plans that make a network namespace
        assert capabilities["network_isolated"], capabilities


def test_normal_run_reports_output_exit_code_stdin_and_files(capabilities):
    source = (
        "import sys\nprint(sys.stdin.read().upper())\nprint(open('data/notes.txt').read())\n"
        "print('warn', file=sys.stderr)\nsys.exit(3)"
    )
    result = run_python(source, stdin="hello", files={"data/notes.txt": "a note"})
    assert result.returncode == 3
    assert result.stdout == "HELLO\na note\n"
    assert result.stderr == "warn\n"
    assert not result.timed_out and result.killed_reason is None
    assert result.network_isolated == capabilities["network_isolated"]
    crash = run_python("raise ValueError('boom')")
    assert crash.returncode == 1 and "ValueError: boom" in crash.stderr and crash.killed_reason is None


def test_infinite_loop_is_killed_by_the_wall_clock_timeout():
    started = time.monotonic()
    result = run_python(
        "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)",
        limits=SandboxLimits(timeout_s=1.0),
    )
    assert time.monotonic() - started < 3.0
    assert result.timed_out and result.killed_reason == "timeout" and result.returncode is None
    assert result.stdout == "started\n"  # what it printed before the kill is kept
    assert_training_continues()


def test_busy_loop_is_stopped_by_the_cpu_limit():
    result = run_python("while True:\n    pass", limits=SandboxLimits(timeout_s=10.0, cpu_s=1))
    assert result.killed_reason == "cpu limit" and not result.timed_out
    assert result.duration_s < 5.0
    assert_training_continues()


def test_fork_bomb_is_contained_and_leaves_nothing_behind(capabilities):
    count_forks = (
        "import os, time\nforked = 0\nfor _ in range(200):\n    try:\n        if os.fork() == 0:\n"
        "            time.sleep(5)\n            os._exit(0)\n        forked += 1\n"
        "    except OSError:\n        break\nprint(forked)"
    )
    if capabilities["process_limit_binds"]:
        result = run_python(count_forks, limits=SandboxLimits(max_processes=8))
        assert result.returncode == 0 and int(result.stdout) < 8, result
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run_python(bomb, limits=SandboxLimits(timeout_s=2.0))
    assert result.timed_out
    if capabilities["uid_drop"]:
        assert sandbox_uid_processes() == []
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes
    assert_training_continues()


def test_processes_that_escape_the_session_die_with_the_run(capabilities):
    if not (capabilities["pid_namespace"] or capabilities["uid_drop"]):
        pytest.skip(f"no PID namespace and no private uid here: {capabilities['reason']}")
    escape = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "    os._exit(0)\nprint('parent done')"
    )
    result = run_python(escape)
    assert result.stdout == "parent done\n"
    if capabilities["uid_drop"]:
        assert sandbox_uid_processes() == []
    assert_training_continues()


def test_huge_allocation_is_reported_as_memory_limit(capabilities):
    result = run_python("block = bytearray(4 * 1024 ** 3)\nprint('allocated')", limits=SandboxLimits(memory_mb=256))
    assert result.returncode not in (0, None) and result.stdout == ""
    if capabilities["memory_cgroup"]:  # killed by the cgroup, as its out-of-memory counter says
        assert result.killed_reason == "memory limit"
    else:  # RLIMIT_AS makes the allocation fail: an ordinary error of the program, labelled by no one
        assert "MemoryError" in result.stderr and result.killed_reason is None
    assert_training_continues()


def test_connecting_to_a_port_the_test_listens_on_fails(capabilities):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        source = (
            f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).send(b'hi')\n"
            f"    print('connected')\nexcept OSError as error:\n    print('blocked', error.errno)"
        )
        result = run_python(source)
        if not capabilities["network_isolated"]:
            assert result.network_isolated is False and capabilities["reason"]
            pytest.skip(f"this machine cannot isolate the network: {capabilities['reason']}")
        assert result.network_isolated is True
        assert result.stdout.startswith("blocked"), result
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert_training_continues()


def test_secret_environment_variables_do_not_reach_the_child(monkeypatch, capabilities):
    monkeypatch.setenv("TINKER_API_KEY", "secret-xyz")
    monkeypatch.setenv("HF_TOKEN", "secret-hf")
    source = (
        "import os\nprint(sorted(os.environ))\nprint(os.environ.get('TINKER_API_KEY'))\n"
        "print(open('/proc/self/environ', 'rb').read())\n"
        f"try:\n    print(open('/proc/{os.getpid()}/environ', 'rb').read())\nexcept OSError as error:\n"
        "    print('denied', error.errno)"
    )
    result = run_python(source)
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[0] == str(sorted(["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"]))
    assert lines[1] == "None"
    assert "secret" not in lines[2]
    if capabilities["pid_namespace"] or capabilities["uid_drop"]:  # the studio's own environ is out of reach
        assert "secret" not in result.stdout
    assert_training_continues()


def test_writing_outside_the_work_folder_fails(tmp_path, capabilities):
    if capabilities["filesystem"].startswith("not isolated"):
        pytest.skip(f"the file system is not isolated here: {capabilities['reason']}")
    owned = tmp_path / "owned"
    owned.mkdir(mode=0o755)  # the test's own folder, not world-writable
    tmp_target = f"/tmp/cookbook-sandbox-escape-{uuid.uuid4().hex}.txt"
    targets = [str(owned / "evil.txt"), tmp_target, "/var/tmp/cookbook-sandbox-escape.txt"]
    source = (
        f"targets = {targets!r}\nfor target in targets:\n    try:\n        open(target, 'w').write('x')\n"
        "        print('wrote', target)\n    except OSError as error:\n        print('refused', error.errno)\n"
        "open('inside.txt', 'w').write('fine')\nprint(open('inside.txt').read())"
    )
    try:
        result = run_python(source)
        assert result.returncode == 0, result
        lines = result.stdout.splitlines()
        assert lines[-1] == "fine"  # the work folder itself is writable
        assert not (owned / "evil.txt").exists() and lines[0].startswith("refused")
        if capabilities["private_root"]:
            # With a mount namespace even world-writable folders (/tmp, /var/tmp) are out of reach;
            # with only a private uid they are not (capabilities say so).
            assert all(line.startswith("refused") for line in lines[:3]), lines
            assert not os.path.exists(tmp_target)
    finally:
        if os.path.exists(tmp_target):
            os.remove(tmp_target)
    assert_training_continues()


WALK_EVERYTHING = """
import os, sys
found = []
for folder, folders, names in os.walk('/', followlinks=False):
    if folder in ('/proc', '/dev'):
        folders[:] = []
        continue
    for name in folders + names:
        path = os.path.join(folder, name)
        if os.path.islink(path) or not os.path.isdir(path):
            found.append(path)
print('\\n'.join(found))
"""


def test_the_private_root_holds_only_the_allow_list(tmp_path, capabilities):
    """Everything a sandboxed program can find by walking its root is the interpreter, its standard library, the
    shared libraries they load and its work folder: no project source, studio home, /work, homes or sockets."""
    if not capabilities["private_root"]:
        pytest.skip(capabilities["filesystem"])
    limits = SandboxLimits(timeout_s=30.0, max_output_chars=4_000_000)
    result = run_python(WALK_EVERYTHING, files={"data/x.txt": "x"}, limits=limits)
    assert result.returncode == 0, result
    seen = result.stdout.split()
    allowed = capabilities["root_paths"]
    stray = [
        path
        for path in seen
        if not path.startswith(f"{sandbox.SANDBOX_WORKDIR}/")
        and not any(path == top or path.startswith(top.rstrip("/") + "/") for top in allowed)
    ]
    assert stray == [], stray[:20]
    assert f"{sandbox.SANDBOX_WORKDIR}/data/x.txt" in seen and f"{sandbox.SANDBOX_WORKDIR}/main.py" in seen
    repo = Path(__file__).resolve().parent.parent
    assert not [path for path in seen if path.startswith(str(repo)) or path.startswith("/work")], "project visible"
    assert not [path for path in seen if "site-packages" in path and not path.endswith("site-packages")]
    home = os.environ["COOKBOOK_HOME"]
    probe = ("import os\nfor path in {paths!r}:\n    print(path, os.path.exists(path))").format(
        paths=[str(repo / "cookbook_engine/rl/code_problems.py"), home, "/home", "/work", "/etc/passwd"]
    )
    answers = run_python(probe).stdout.split()
    assert answers[1::2] == ["False"] * 5, answers


def test_unix_socket_files_outside_the_work_folder_are_unreachable(tmp_path, capabilities):
    if not capabilities["private_root"] or not capabilities["network_isolated"]:
        pytest.skip("needs a private root and a network namespace")
    assert capabilities["unix_sockets"].startswith("unreachable")
    path = str(tmp_path / "studio.sock")
    listeners = []
    for address in (path, "\0cookbook-test-" + uuid.uuid4().hex):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
        listener.listen()
        listeners.append((listener, address))
    try:
        source = (
            f"import socket\nfor address in {[address for _, address in listeners]!r}:\n"
            "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "    try:\n        s.connect(address)\n        print('connected')\n"
            "    except OSError as error:\n        print('refused', error.errno)\n"
        )
        result = run_python(source)
        assert result.stdout.split("\n")[:2] == [f"refused {errno.ENOENT}", f"refused {errno.ECONNREFUSED}"], result
    finally:
        for listener, _ in listeners:
            listener.close()


BUSY_SESSIONS = """
import os, time
pids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        while True:
            pass
    pids.append(pid)
time.sleep(2.0)
ticks = 0
for pid in pids:
    fields = open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()
    ticks += int(fields[11]) + int(fields[12])
print(ticks / os.sysconf('SC_CLK_TCK'))
"""


def test_a_run_with_many_busy_sessions_gets_one_core_at_most(capabilities):
    """Six busy loops in new sessions are scheduled as one group capped at one core: over 2 s of wall clock they
    get at most ~2 CPU seconds together, whatever the machine has free."""
    if not capabilities["cpu_cgroup"]:
        pytest.skip(capabilities["cpu_limit"])
    with sandbox.start_python(BUSY_SESSIONS, limits=SandboxLimits(timeout_s=20.0, cpu_s=20)) as process:
        time.sleep(1.0)
        group = process.cpu_cgroup
        assert group is not None
        # the launcher, the namespace's init, the program and its six children in new sessions: one group
        assert len((group.path / "cgroup.procs").read_text().split()) >= 8
        quota = "cpu.max" if group.version == 2 else "cpu.cfs_quota_us"
        assert (group.path / quota).read_text().split()[0] == "100000"
        result = process.finish()
    assert result.returncode == 0, result
    assert float(result.stdout) <= 2.0 * 1.2, result.stdout


def test_writing_a_huge_file_hits_the_file_size_limit():
    source = "with open('big.bin', 'wb') as handle:\n    for _ in range(64):\n        handle.write(b'x' * 1024 * 1024)"
    result = run_python(source, limits=SandboxLimits(max_file_mb=2))
    assert result.returncode not in (0, None)
    assert result.killed_reason == "file size limit", result
    assert_training_continues()


def test_many_files_fill_the_work_folder_cap(capabilities):
    if not capabilities["private_root"]:
        pytest.skip("the work folder is a size-capped tmpfs only with a mount namespace")
    source = "for index in range(64):\n    open(f'part{index}.bin', 'wb').write(b'x' * 1024 * 1024)"
    result = run_python(source, limits=SandboxLimits(max_file_mb=2))
    assert result.killed_reason == "disk limit", result
    assert_training_continues()


def test_stdout_flood_is_truncated_and_stopped():
    started = time.monotonic()
    result = run_python(
        "import sys\nwhile True:\n    sys.stdout.write('x' * 4096)",
        limits=SandboxLimits(max_output_chars=1000, timeout_s=20.0),
    )
    assert time.monotonic() - started < 5.0
    assert result.killed_reason == "output limit" and result.returncode is None and not result.timed_out
    assert len(result.stdout) <= 1100 and "output dropped" in result.stdout
    assert_training_continues()


def test_moderate_overflow_keeps_head_and_tail():
    source = "for index in range(500):\n    print(f'line {index:04d}')\nraise SystemExit('the end')"
    result = run_python(source, limits=SandboxLimits(max_output_chars=400))
    assert result.returncode == 1 and result.killed_reason is None
    assert result.stdout.startswith("line 0000\n") and result.stdout.endswith("line 0499\n")
    assert len(result.stdout) <= 500
    assert result.stderr == "the end\n"


def test_misuse_raises_clear_errors():
    with pytest.raises(TypeError, match="source must be a str"):
        run_python(b"print(1)")
    with pytest.raises(ValueError, match=r"\.\./escape\.txt"):
        run_python("pass", files={"../escape.txt": "x"})
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("pass", limits=SandboxLimits(timeout_s=0))
    with pytest.raises(ValueError, match="main.py"):
        run_python("pass", files={"main.py": "x"})


def test_overhead_per_call_is_small_and_calls_can_run_concurrently():
    run_python("pass")
    durations = [run_python("print(1)").duration_s for _ in range(5)]
    print(f"sandbox overhead: median {statistics.median(durations) * 1000:.0f} ms")
    assert statistics.median(durations) < 0.5  # ~25-60 ms measured on this 2-core machine

    def one(index: int) -> str:
        return run_python(f"import sys\nprint(len(sys.stdin.read()), {index})", stdin="ab" * 50_000).stdout

    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(one, range(12)))
    assert outputs == [f"100000 {index}\n" for index in range(12)]


# ---------------------------------------------------------------- memory that RLIMIT_AS does not count

SHM_HOLD = """
import ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(0, 512 * 1024 * 1024, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
if segment < 0:
    print('refused', ctypes.get_errno())
else:
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, 512 * 1024 * 1024)
    libc.shmdt(ctypes.c_void_p(address))
    print('held 512 MB')
"""

MEMFD_HOLD = """
import os
try:
    fd = os.memfd_create('hold')
except OSError as error:
    print('refused', error.errno)
else:
    for _ in range(512):
        os.write(fd, b'x' * 1024 * 1024)
    print('held 512 MB')
"""


def test_sysv_shared_memory_cannot_bypass_the_memory_limit(capabilities):
    result = run_python(SHM_HOLD, limits=SandboxLimits(memory_mb=128))
    assert "held" not in result.stdout, result
    assert result.stdout == f"refused {errno.EPERM}\n" or result.killed_reason == "memory limit", result
    assert_training_continues()


def test_memfd_cannot_bypass_the_memory_limit(capabilities):
    result = run_python(MEMFD_HOLD, limits=SandboxLimits(memory_mb=128, max_file_mb=1024))
    assert "held" not in result.stdout, result
    assert result.stdout == f"refused {errno.EPERM}\n" or result.killed_reason in ("memory limit", "file size limit")
    assert_training_continues()


def test_posix_shared_memory_is_a_tiny_tmpfs(capabilities):
    if not capabilities["private_root"]:
        pytest.skip("/dev/shm is replaced only with a mount namespace")
    source = (
        "try:\n    open('/dev/shm/hold', 'wb').write(b'x' * 64 * 1024 * 1024)\nexcept OSError as e:\n    print(e.errno)"
    )
    result = run_python(source, limits=SandboxLimits(max_file_mb=256))
    assert result.stdout in (f"{errno.EROFS}\n", f"{errno.ENOSPC}\n"), result  # read-only, and 1 MB if it were not


def test_memory_is_limited_in_total_across_processes(capabilities):
    if not capabilities["memory_cgroup"]:
        pytest.skip(f"no memory cgroup on this machine: {capabilities['memory_limit']}")
    two_halves = (
        "import os, time\nblock = bytearray(90 * 1024 * 1024)\nchild = os.fork()\n"
        "other = bytearray(90 * 1024 * 1024)\ntime.sleep(0.5)\nprint('both held', flush=True)"
    )
    result = run_python(two_halves, limits=SandboxLimits(memory_mb=128))
    assert "both held" not in result.stdout and result.killed_reason == "memory limit", result


def test_no_new_user_namespaces_inside(capabilities):
    if "not available" in capabilities["seccomp"]:
        pytest.skip(capabilities["seccomp"])
    source = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.unshare(0x10000000), ctypes.get_errno())"
    )
    assert run_python(source).stdout == f"-1 {errno.EPERM}\n"


def test_dev_holds_only_harmless_devices(capabilities):
    if not capabilities["devices"].startswith("only"):
        pytest.skip(capabilities["devices"])
    source = (
        "import os\nprint(sorted(os.listdir('/dev')))\n"
        "open('/dev/null', 'w').write('x')\nprint(len(open('/dev/urandom', 'rb').read(16)))"
    )
    result = run_python(source)
    assert result.stdout == (
        "['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n16\n"
    ), result


def test_killed_reason_is_never_read_from_what_the_program_prints():
    for forged in (
        "MemoryError",
        "OSError: [Errno 28] No space left on device",
        "OSError: [Errno 27] File too large",
        "BlockingIOError: [Errno 11] Resource temporarily unavailable (fork)",
    ):
        result = run_python(f"import sys\nsys.stderr.write({forged!r} + '\\n')\nsys.exit(1)")
        assert (result.returncode, result.killed_reason) == (1, None), forged


def test_a_private_umask_in_the_studio_does_not_weaken_the_sandbox(capabilities):
    """The studio and the CLI run with umask 077 (a private home); the sandbox must find the same plan then."""
    source = (
        "import os, sys\nos.umask(0o077)\nsys.path.insert(0, sys.argv[1])\n"
        "from cookbook_engine import sandbox\ncaps = sandbox.sandbox_capabilities()\n"
        "print(caps['plan'], caps['memory_cgroup'], sandbox.run_python('print(1)').stdout.strip())"
    )
    repo = str(Path(__file__).resolve().parent.parent)
    result = subprocess.run([sys.executable, "-c", source, repo], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == [capabilities["plan"], str(capabilities["memory_cgroup"]), "1"], result.stderr
