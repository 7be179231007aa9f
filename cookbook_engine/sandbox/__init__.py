"""The sandbox for model-written code: run untrusted Python in a private root, its own namespaces and limits.

- runner.py: `run_python`, `start_python` (SandboxProcess), `sandbox_capabilities`, the probe and the plans.
- launcher.py: the small trusted program that enters the namespaces, builds the root and execs the child.
- root.py: the private root's allow-list (the interpreter, the standard library, their shared libraries).
- limits.py: the seccomp filter and the memory and CPU cgroups.
"""

from cookbook_engine.sandbox.runner import (
    DEV_NODES,
    LIMIT_REASONS,
    PYTHON,
    SANDBOX_WORKDIR,
    STOPPED_BY_CALLER,
    UID_RANGE,
    SandboxLimits,
    SandboxProcess,
    SandboxResult,
    run_python,
    sandbox_capabilities,
    start_python,
)

__all__ = [
    "DEV_NODES",
    "LIMIT_REASONS",
    "PYTHON",
    "SANDBOX_WORKDIR",
    "STOPPED_BY_CALLER",
    "UID_RANGE",
    "SandboxLimits",
    "SandboxProcess",
    "SandboxResult",
    "run_python",
    "sandbox_capabilities",
    "start_python",
]
