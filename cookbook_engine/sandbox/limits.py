"""Kernel-level limits for the sandbox that rlimits cannot give: a seccomp filter, a memory and a CPU cgroup.

What it is for: `runner.py` builds the filter here and hands it to its launcher, and puts each sandboxed program
in a fresh memory cgroup made here, so that memory is limited in total (every process of the run, and the pages
that RLIMIT_AS does not count: SysV shared memory, memfd, tmpfs files) and an out-of-memory kill is read from the
kernel's own counter, never from what the program printed. A fresh CPU cgroup per run schedules the run's
processes as one group capped at one core: a reply that starts many busy processes (in new sessions or not) gets
one group's share, never its siblings'.

The seccomp filter refuses (EPERM) the system calls that a graded program never needs and that give memory or
kernel surface outside the rlimits: SysV IPC (shmget, shmat, msgget, semget), memfd_create and memfd_secret, new
user namespaces (clone/unshare with CLONE_NEWUSER, setns), userfaultfd, bpf, perf_event_open, io_uring, the
kernel keyring, mount and ptrace; clone3 answers ENOSYS so the C library falls back to clone, whose flags the
filter can read. Other architectures than the two listed are refused outright (the whole process is killed).

What it is not: the sandbox (namespaces, mounts, uids live in runner.py and launcher.py), nor a complete syscall
allow-list.
Where the machine offers no cgroup or no seccomp, the probe in runner.py finds out and the capabilities say so.
"""

from __future__ import annotations

import os
import platform
import secrets
import time
from pathlib import Path
from typing import TypedDict

# ---------------------------------------------------------------- seccomp

_EPERM, _ENOSYS = 1, 38
_CLONE_NEWUSER = 0x10000000
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16


class _ArchSyscalls(TypedDict):
    arch: int
    refused: dict[str, int]
    clone: int
    unshare: int
    clone3: int


# Per architecture: the audit arch, then the numbers of the refused calls (EPERM), then clone/unshare/clone3.
_SYSCALLS: dict[str, _ArchSyscalls] = {
    "x86_64": {
        "arch": 0xC000003E,
        "refused": {
            "shmget": 29,
            "shmat": 30,
            "semget": 64,
            "msgget": 68,
            "memfd_create": 319,
            "memfd_secret": 447,
            "setns": 308,
            "userfaultfd": 323,
            "bpf": 321,
            "perf_event_open": 298,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "io_uring_setup": 425,
            "mount": 165,
            "ptrace": 101,
        },
        "clone": 56,
        "unshare": 272,
        "clone3": 435,
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "refused": {
            "shmget": 194,
            "shmat": 196,
            "semget": 190,
            "msgget": 186,
            "memfd_create": 279,
            "memfd_secret": 447,
            "setns": 268,
            "userfaultfd": 282,
            "bpf": 280,
            "perf_event_open": 241,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "io_uring_setup": 425,
            "mount": 40,
            "ptrace": 117,
        },
        "clone": 220,
        "unshare": 97,
        "clone3": 435,
    },
}
REFUSED_SYSCALLS = sorted(_SYSCALLS["x86_64"]["refused"])


def seccomp_program() -> list[list[int]] | None:
    """The BPF program as [code, jt, jf, k] rows for this machine's architecture; None where none is known."""
    table = _SYSCALLS.get(platform.machine())
    if table is None:
        return None
    program = [
        [_LD_W_ABS, 0, 0, _OFFSET_ARCH],
        [_JEQ_K, 1, 0, table["arch"]],
        [_RET_K, 0, 0, _RET_KILL_PROCESS],
        [_LD_W_ABS, 0, 0, _OFFSET_NR],
    ]
    if platform.machine() == "x86_64":  # the x32 ABI shares the arch value with numbers above 0x40000000
        program += [[_JGE_K, 0, 1, 0x40000000], [_RET_K, 0, 0, _RET_ERRNO | _EPERM]]
    for number in table["refused"].values():
        program += [[_JEQ_K, 0, 1, number], [_RET_K, 0, 0, _RET_ERRNO | _EPERM]]
    program += [[_JEQ_K, 0, 1, table["clone3"]], [_RET_K, 0, 0, _RET_ERRNO | _ENOSYS]]
    for number in (table["clone"], table["unshare"]):  # refused only when asking for a new user namespace
        program += [
            [_JEQ_K, 0, 4, number],
            [_LD_W_ABS, 0, 0, _OFFSET_ARG0],
            [_JSET_K, 0, 1, _CLONE_NEWUSER],
            [_RET_K, 0, 0, _RET_ERRNO | _EPERM],
            [_LD_W_ABS, 0, 0, _OFFSET_NR],
        ]
    program.append([_RET_K, 0, 0, _RET_ALLOW])
    return program


# ---------------------------------------------------------------- cgroups: memory and CPU

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "cookbook-sandbox-"
CPU_PERIOD_US = 100_000


class _Cgroup:
    """One fresh cgroup of one sandbox run, removed with `remove()` once its processes are gone."""

    def __init__(self, parent: Path, version: int):
        self.version = version
        self.path = parent / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir()

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (they are being killed; wait briefly for the kernel)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)

    def _configure(self, settings: list[tuple[str, str]]) -> None:
        try:
            for name, value in settings:
                if name.startswith("?"):  # optional: not every kernel has it
                    _write_if_present(self.path / name[1:], value)
                else:
                    (self.path / name).write_text(value)
        except OSError:
            self.remove()
            raise


class MemoryCgroup(_Cgroup):
    """Caps the total memory of one sandbox run; `oom_kills()` reads the kernel's counter."""

    def __init__(self, parent: Path, version: int, limit_bytes: int):
        super().__init__(parent, version)
        if version == 2:
            self._configure([("memory.max", str(limit_bytes)), ("?memory.swap.max", "0")])
        else:
            self._configure(
                [("memory.limit_in_bytes", str(limit_bytes)), ("?memory.memsw.limit_in_bytes", str(limit_bytes))]
            )

    def oom_kills(self) -> int:
        name, key = ("memory.events", "oom_kill") if self.version == 2 else ("memory.oom_control", "oom_kill")
        try:
            for line in (self.path / name).read_text().splitlines():
                field, _, value = line.partition(" ")
                if field == key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


class CpuCgroup(_Cgroup):
    """Schedules all processes of one sandbox run as one group (however many sessions or processes it starts)
    and caps the group at `cpus` cores (CFS bandwidth), so one reply cannot slow its siblings' grading."""

    def __init__(self, parent: Path, version: int, cpus: float):
        super().__init__(parent, version)
        quota = max(1000, int(cpus * CPU_PERIOD_US))
        if version == 2:
            self._configure([("cpu.max", f"{quota} {CPU_PERIOD_US}")])
        else:
            self._configure([("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))])


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        try:
            path.write_text(value)
        except OSError:
            pass


def memory_cgroup_parent() -> tuple[Path, int] | None:
    """Where this machine lets the studio make memory cgroups: (parent folder, cgroup version), or None.

    Tried by making (and removing) one cgroup: cgroup v2 where the memory controller is enabled for children,
    then the v1 memory hierarchy. Stale cgroups of dead studio processes are removed on the way."""
    return _cgroup_parent("memory", "memory.limit_in_bytes", lambda p, v: MemoryCgroup(p, v, 64 * 1024 * 1024))


def cpu_cgroup_parent() -> tuple[Path, int] | None:
    """Where this machine lets the studio make CPU cgroups (cgroup v2 with the cpu controller, or the v1 cpu
    hierarchy with CFS bandwidth control): (parent folder, cgroup version), or None."""
    return _cgroup_parent("cpu", "cpu.cfs_quota_us", lambda p, v: CpuCgroup(p, v, 1.0))


def _cgroup_parent(controller: str, v1_marker: str, make) -> tuple[Path, int] | None:
    candidates = []
    if controller in _read(_CGROUP_ROOT / "cgroup.subtree_control").split():
        candidates.append((_CGROUP_ROOT, 2))
    unified = _CGROUP_ROOT / "unified"
    if controller in _read(unified / "cgroup.subtree_control").split():
        candidates.append((unified, 2))
    if (_CGROUP_ROOT / controller / v1_marker).exists():
        candidates.append((_CGROUP_ROOT / controller, 1))
    for parent, version in candidates:
        _remove_stale(parent)
        try:
            make(parent, version).remove()
            return parent, version
        except OSError:
            continue
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove_stale(parent: Path) -> None:
    for child in parent.glob(_PREFIX + "*"):
        owner = child.name[len(_PREFIX) :].split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists() and not _read(child / "cgroup.procs").strip():
            try:
                child.rmdir()
            except OSError:
                pass
