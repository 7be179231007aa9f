"""The engine's imports only go down: read from the source (every import, at module level, inside functions and
under TYPE_CHECKING), no module of cookbook_engine takes part in an import circle, and at most MAX_UPWARD imports
run from a lower layer to a higher one. LAYERS is the architecture (docs/ARCHITECTURE.md draws it): a new module
belongs to its package's layer unless it is named here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "cookbook_engine"
MAX_UPWARD = 3

# Lowest first. A module's layer is the one of its longest matching prefix (a package or a module).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        (
            "cookbook_engine",  # the package itself
            "cookbook_engine.paths",
            "cookbook_engine.log",
            "cookbook_engine.secrets",
            "cookbook_engine.device",
            "cookbook_engine.models",
            "cookbook_engine.settings",
            "cookbook_engine.lineage",
            "cookbook_engine.speed",
            "cookbook_engine.progress",
            "cookbook_engine.compute_lease",
            "cookbook_engine.priority",
            "cookbook_engine.exit_codes",
            "cookbook_engine.sandbox",
            "cookbook_engine.renderers",
            "cookbook_engine.training.metric_names",
            "cookbook_engine.backends.clocked_settings",
        ),
    ),
    ("backends", ("cookbook_engine.backends",)),
    (
        "data",
        (
            "cookbook_engine.data",
            "cookbook_engine.rl",  # environments' problems, graders, rollouts (rl.envs and rl.loop are above)
            "cookbook_engine.sl.suggested",
            "cookbook_engine.training.lora_a",  # which runs fix LoRA's A: a rule the config checks, like suggested
            "cookbook_engine.training.null_space",  # the directions lora_a fixes: model inputs, no loop
            "cookbook_engine.evals",  # eval sets, statistics, reports (the evaluators and the jobs are above)
        ),
    ),
    ("config", ("cookbook_engine.config",)),
    (
        "training",
        (
            "cookbook_engine.training",
            "cookbook_engine.memory",
            "cookbook_engine.rl.envs",
            "cookbook_engine.sl.data",
            "cookbook_engine.dpo.data",
            "cookbook_engine.evals.evaluators",
            "cookbook_engine.evals.in_training",
        ),
    ),
    ("loops", ("cookbook_engine.sl", "cookbook_engine.dpo", "cookbook_engine.rl.loop", "cookbook_engine.distill")),
    (
        "runs",
        (
            "cookbook_engine.runs",
            "cookbook_engine.run_process",
            "cookbook_engine.chat",
            "cookbook_engine.export",
            "cookbook_engine.export_gguf",
            "cookbook_engine.evals.targets",
            "cookbook_engine.evals.jobs",
            "cookbook_engine.evals.sweeps",
        ),
    ),
    ("commands", ("cookbook_engine.cli", "cookbook_engine.evals.commands", "cookbook_engine.serve")),
]


def engine_modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ENGINE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The engine modules `name` imports: `from package import module` counts the module, anything else the
    nearest enclosing module that exists."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int:
    best, best_length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def test_every_engine_module_has_a_layer():
    assert [name for name in engine_modules() if layer_of(name) < 0] == []


def test_the_graph_reader_sees_the_engine():
    graph = import_graph()
    assert len(graph) > 60 and "cookbook_engine.training.skeleton" in graph["cookbook_engine.sl.loop"]
    assert "cookbook_engine.runs" in graph["cookbook_engine.cli"]  # imports inside functions count


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_engine_module_takes_part_in_an_import_circle():
    assert circles(import_graph()) == []


def test_at_most_three_imports_run_upward():
    upward = upward_imports(import_graph())
    assert len(upward) <= MAX_UPWARD, "\n".join(f"{a} -> {b}" for a, b in upward)
