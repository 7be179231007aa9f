"""The sandbox's launcher: the small trusted program that turns one process into a sandboxed Python child.

What it is for: `runner.py` runs this file as `python -I -S launcher.py CONFIG_JSON` (the studio's user, a scrubbed
environment). It enters the namespaces the probe chose, builds the child's private root, sets the limits, drops
to the fresh uid and execs the child's interpreter. Any failure before exec is written to the status pipe as
"error <step>: <why>" (exit 125); with a PID namespace the namespace's init writes "status <raw wait status>" when
the program ends, followed by what it found in the work folder.

The private root (with a mount namespace): a fresh tmpfs holding only the entries the studio lists in the
config's `root` (the interpreter, its standard library, the shared libraries they load; an allow-list computed by
runner.py), a /dev of harmless devices, a /proc of the PID namespace, and the work folder. `pivot_root` makes it
the root and the old root is detached, so nothing else of the host (project source, homes, /work, sockets, the
grader's files) exists for the child. Everything but the work folder is then made read-only.

What it is not: the policy. Which paths, limits and syscalls apply is decided by runner.py and limits.py; this
file only carries them out. It imports the standard library only: it runs with -S, before any site-packages.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import struct
import sys

MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
MNT_DETACH = 2
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS = 0x10000000, 0x40000000, 0x08000000, 0x04000000
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 1, 22, 38, 2
SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64 (new syscalls share one table)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine(), -1)
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class SetupError(Exception):
    """One step of the setup failed; the message names the step and the reason."""


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def check(step: str, ret: int) -> None:
    if ret != 0:
        raise SetupError(f"{step}: {os.strerror(ctypes.get_errno())}")


def encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    ret = libc.mount(encoded(source), encoded(target), encoded(fstype), flags, encoded(data))
    check(f"mount {fstype or source} on {target}", ret)


def mount_setattr(path: str, recursive: bool, attr_set: int, attr_clr: int) -> None:
    attr = MountAttr(attr_set, attr_clr, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    ret = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr))
    check(f"mount_setattr {path}", ret)


def place_mount_point(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            with open(target, "w"):
                pass


def build_root(new_root: str, entries: list[list[str]], dev_nodes: list[str], proc: bool) -> None:
    """Fill the fresh tmpfs at `new_root` with the allowed entries: "symlink" (path, target), "dir" and "file"
    (bound read-only from the same host path), "empty" (an empty tmpfs hiding what a bound folder holds)."""
    for kind, path, target in entries:
        inside = new_root + path
        if kind == "symlink":
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            if not os.path.lexists(inside):
                os.symlink(target, inside)
        elif kind in ("dir", "file"):
            place_mount_point(inside, kind == "dir")
            mount(path, inside, None, MS_BIND | MS_REC)
        elif kind == "empty":
            if os.path.isdir(inside):
                mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,nr_inodes=4,mode=0755")
        else:
            raise SetupError(f"root entry: unknown kind {kind!r}")
    dev = new_root + "/dev"
    os.makedirs(dev)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
    for name in dev_nodes:
        if os.path.exists("/dev/" + name):
            place_mount_point(f"{dev}/{name}", False)
            mount("/dev/" + name, f"{dev}/{name}", None, MS_BIND)
    for link, link_target in DEV_LINKS:
        os.symlink(link_target, f"{dev}/{link}")
    os.mkdir(dev + "/shm")
    os.makedirs(new_root + "/proc")
    if proc:
        mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(new_root + "/tmp")


def enter_root(new_root: str) -> None:
    """Make `new_root` the root of this mount namespace and detach the old one (pivot_root(".", ".") trick)."""
    os.chdir(new_root)
    check("pivot_root", libc.syscall(SYS_PIVOT_ROOT, b".", b"."))
    check("detach the old root", libc.umount2(b".", MNT_DETACH))
    os.chdir("/")


def make_workdir(workdir: str, cfg: dict, contents: dict[str, bytes]) -> None:
    os.makedirs(workdir, exist_ok=True)
    options = "size={}k,nr_inodes=4096,mode=0700,uid={},gid={}".format(cfg["workdir_kb"], cfg["uid"], cfg["gid"])
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for name, data in contents.items():
        path = os.path.join(workdir, name)
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent)
            os.chown(parent, cfg["uid"], cfg["gid"])
        with open(path, "wb") as handle:
            handle.write(data)
        os.chown(path, cfg["uid"], cfg["gid"])


def install_seccomp(program: list[list[int]]) -> None:
    """The BPF filter built by limits.py (a list of [code, jt, jf, k]); needs no_new_privs set first."""
    raw = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = Fprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    pointer = ctypes.cast(ctypes.pointer(fprog), ctypes.c_void_p)
    check("seccomp", libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, pointer, 0, 0))


def usage_report(workdir: str, rlimits: dict[str, int], mountns: bool) -> str:
    """What the program left behind, read by this trusted process after it ended: a file at the file size cap,
    a full work folder."""
    cap = rlimits.get("RLIMIT_FSIZE", 0)
    file_at_cap = False
    for folder, _, names in os.walk(workdir):
        for name in names:
            try:
                file_at_cap = file_at_cap or os.lstat(os.path.join(folder, name)).st_size >= cap
            except OSError:
                pass
    try:
        stats = os.statvfs(workdir)
        disk_full = stats.f_bavail * stats.f_frsize < 64 * 1024 or stats.f_favail == 0
    except OSError:
        disk_full = False
    return f" fsize {int(file_at_cap)} disk {int(disk_full and mountns)}"


def wait_for(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def unshare(plan: dict[str, bool], cfg: dict) -> None:
    flags = 0
    if plan["userns"]:
        flags |= CLONE_NEWUSER
    if plan["netns"]:
        flags |= CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    if plan["mountns"]:
        flags |= CLONE_NEWNS
    if plan["pidns"]:
        flags |= CLONE_NEWPID
    if flags:
        check("unshare", libc.unshare(flags))
    if plan["userns"]:
        outer_uid, outer_gid = cfg["uid"], cfg["gid"]
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{outer_uid} {outer_uid} 1"),
            ("gid_map", f"{outer_gid} {outer_gid} 1"),
        ):
            with open("/proc/self/" + name, "w") as handle:
                handle.write(text)


def private_root(cfg: dict, plan: dict[str, bool]) -> str:
    """Build the private root over the host work folder (whose files are read first), enter it, and return the
    work folder's path inside."""
    contents = {}
    for name in cfg["file_names"]:
        with open(os.path.join(cfg["host_workdir"], name), "rb") as handle:
            contents[name] = handle.read()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    new_root = cfg["host_workdir"]
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    build_root(new_root, cfg["root"], cfg["dev_nodes"], proc=plan["pidns"])
    enter_root(new_root)
    workdir = cfg["sandbox_workdir"]
    make_workdir(workdir, cfg, contents)
    mount_setattr("/", True, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0)
    mount_setattr(workdir, False, 0, MOUNT_ATTR_RDONLY)
    return workdir


def drop_privileges(cfg: dict, plan: dict[str, bool], workdir: str) -> None:
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if plan["uid_drop"]:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    os.chdir(workdir)
    check("no_new_privs", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0))
    check("pdeathsig", libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, None, 0, 0))
    if cfg["seccomp"]:
        install_seccomp(cfg["seccomp"])


def launch(cfg: dict) -> None:
    plan: dict[str, bool] = cfg["plan"]
    status_fd: int = cfg["status_fd"]
    os.umask(0o022)  # the mount points made below must be traversable by the child's uid, whatever the studio's
    for procs_file in cfg["cgroup_procs"]:
        with open(procs_file, "w") as handle:
            handle.write(str(os.getpid()))
    unshare(plan, cfg)
    if plan["pidns"]:
        # The launcher stays outside as the namespace's parent; the forked child becomes the namespace's init.
        init = os.fork()
        if init:
            os.close(status_fd)
            status = wait_for(init)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    workdir = private_root(cfg, plan) if plan["mountns"] else cfg["host_workdir"]
    drop_privileges(cfg, plan, workdir)
    argv: list[str] = cfg["argv"]
    if plan["pidns"]:
        # This process is the namespace's init (signals without a handler do not reach an init), so the user's
        # program runs in a forked child as an ordinary process; init reaps orphans and reports the program's
        # raw wait status on the status pipe. When init exits, the kernel kills everything left in the namespace.
        program = os.fork()
        if program == 0:
            os.execve(argv[0], argv, os.environ)
        while True:
            try:
                pid, status = os.wait()
            except InterruptedError:
                continue
            if pid == program:
                report = usage_report(workdir, cfg["rlimits"], plan["mountns"])
                os.write(status_fd, f"status {status}{report}".encode())
                os._exit(0)
    os.execve(argv[0], argv, os.environ)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)
    try:
        launch(cfg)
        message = "setup: the launcher returned"
    except SetupError as error:
        message = str(error)
    except OSError as error:
        message = f"setup: {error.strerror} ({getattr(error, 'filename', '')})"
    except Exception as error:
        message = f"setup: {error!r}"
    os.write(status_fd, f"error {message}".encode())
    os._exit(125)


if __name__ == "__main__":
    main()
