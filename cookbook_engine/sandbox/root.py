"""What the sandboxed program's private root holds: an allow-list of host paths, computed once per studio process.

What it is for: the launcher (launcher.py) builds the child's root from an empty tmpfs and binds in, read-only,
exactly the entries listed here, at the same paths they have on the host:

- the interpreter binary (the real file behind a virtual env's `python`),
- its standard library folder, with its `site-packages` / `dist-packages` hidden by an empty folder (the child
  runs with -S: standard library only, never the studio's packages),
- the shared libraries that the interpreter and the standard library's extension modules load, as `ldd` lists
  them, plus the dynamic loader's cache; every symlink on the way is re-created as a symlink.

Nothing else of the host exists in the child's root: not the project's source, the studio home, /work, other
homes, sockets, or the grader's files. Where `ldd` is missing, the host's library folders (/lib, /lib64,
/usr/lib, /usr/lib64) are bound whole instead, and `describe()` says so.

What it is not: the mounting itself (launcher.py) or the policy of which plan runs (runner.py).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

# The interpreter the launcher and the child run: the real binary behind a virtual env's `python`.
PYTHON = os.path.realpath(sys.executable)
FALLBACK_LIBRARY_FOLDERS = ["/lib", "/lib64", "/usr/lib", "/usr/lib64"]
LOADER_CACHE = "/etc/ld.so.cache"


def stdlib_folder() -> str:
    """The standard library of the base interpreter (a virtual env's own lib folder holds only site-packages)."""
    return os.path.realpath(sysconfig.get_path("stdlib", vars={"installed_base": sys.base_prefix}))


def extension_folder() -> str:
    return os.path.realpath(sysconfig.get_config_var("DESTSHARED") or os.path.join(stdlib_folder(), "lib-dynload"))


def _chain(path: str, entries: dict[str, list[str]], kind: str) -> None:
    """Add `path` as `kind` ("file" or "dir"), re-creating each symlink met on the way as a symlink entry."""
    resolved = "/"
    parts = [part for part in path.split("/") if part]
    for index, part in enumerate(parts):
        current = os.path.join(resolved, part)
        if os.path.islink(current):
            target = os.readlink(current)
            entries.setdefault(current, ["symlink", current, target])
            rest = "/".join(parts[index + 1 :])
            _chain(_absolute(current, os.path.join(target, rest) if rest else target), entries, kind)
            return
        resolved = current
    entries.setdefault(resolved, [kind, resolved, ""])


def _absolute(link: str, target: str) -> str:
    return os.path.normpath(os.path.join(os.path.dirname(link), target))


def _shared_libraries(binaries: list[str]) -> list[str] | None:
    """The absolute paths `ldd` resolves for `binaries` (the loader included); None without ldd."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    libraries: set[str] = set()
    for start in range(0, len(binaries), 64):
        result = subprocess.run([ldd, *binaries[start : start + 64]], capture_output=True, text=True, timeout=60)
        for line in result.stdout.splitlines():
            for word in line.replace("=>", " ").split():
                if word.startswith("/") and os.path.exists(word):
                    libraries.add(word)
    return sorted(libraries)


def root_entries() -> tuple[list[list[str]], str]:
    """The allow-list as [kind, path, symlink target] rows in the order the launcher must create them, and how the
    shared libraries were found."""
    entries: dict[str, list[str]] = {}
    stdlib, extensions = stdlib_folder(), extension_folder()
    _chain(PYTHON, entries, "file")
    _chain(stdlib, entries, "dir")
    if not (extensions + "/").startswith(stdlib + "/"):
        _chain(extensions, entries, "dir")
    masks = [os.path.join(stdlib, name) for name in ("site-packages", "dist-packages")]
    # _tkinter needs a display (and brings a dozen X11 libraries): the only extension module left out
    modules = [module for module in sorted(glob.glob(os.path.join(extensions, "*.so"))) if "_tkinter" not in module]
    libraries = _shared_libraries([PYTHON, *modules])
    if libraries is None:
        how = "the host's library folders bound whole (no ldd on this machine)"
        for folder in FALLBACK_LIBRARY_FOLDERS:
            if os.path.isdir(folder):
                _chain(folder, entries, "dir")
    else:
        how = f"{len(libraries)} shared libraries found by ldd"
        for library in libraries:
            if not library.startswith(stdlib + "/"):
                _chain(library, entries, "file")
    if os.path.isfile(LOADER_CACHE):
        _chain(LOADER_CACHE, entries, "file")
    rows = list(entries.values())
    # symlinks first (they only need their parent folder), then binds from the shallowest path, then the masks
    rows.sort(key=lambda row: (row[0] != "symlink", row[1].count("/"), row[1]))
    rows += [["empty", mask, ""] for mask in masks if os.path.isdir(mask)]
    return rows, how


def visible_paths(rows: list[list[str]]) -> list[str]:
    """The top paths a child can reach in its root, besides /dev, /proc, /tmp and its work folder."""
    return sorted(row[1] for row in rows if row[0] in ("dir", "file", "symlink"))
