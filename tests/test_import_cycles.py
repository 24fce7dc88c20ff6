"""No import circles in rlyard/: every module's imports (top-level or inside a function) form a DAG,
and so do its packages (the folders and modules right under rlyard/: agent, config, envs, ...).

A lazy import inside a function hides a circle from Python but not from a reader, so it counts.
`from pkg import name` imports the module `pkg.name` when there is one, else `pkg` itself; like
`import pkg.name`, it is not counted as an import of `pkg`'s `__init__` (which Python runs first).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_layout import PACKAGE, modules  # noqa: E402


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """{module: the rlyard modules it imports}."""
    names = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                    else node.module or ""
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in names and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "rlyard"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import one\n")
    (pkg / "sub" / "one.py").write_text("def f():\n    from rlyard.sub import two\n")
    (pkg / "sub" / "two.py").write_text("from .one import f\n")
    (pkg / "sub" / "three.py").write_text("from rlyard.sub import one\n")
    import test_import_cycles as me

    old = me.PACKAGE
    me.PACKAGE = pkg
    try:
        graph = import_graph(sorted(pkg.rglob("*.py")))
    finally:
        me.PACKAGE = old
    assert graph["rlyard.sub"] == {"rlyard.sub.one"}
    assert graph["rlyard.sub.one"] == {"rlyard.sub.two"}
    assert graph["rlyard.sub.two"] == {"rlyard.sub.one"}
    assert graph["rlyard.sub.three"] == {"rlyard.sub.one"}
    assert circles(graph) == [["rlyard.sub.one", "rlyard.sub.two"]]


def test_rlyard_has_no_import_circles():
    graph = import_graph(modules())
    assert len(graph) > 50
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def package_of(module: str) -> str:
    """The top-level part of rlyard a module belongs to: `rlyard.envs.code.env` -> `envs`, `rlyard.config` -> `config`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    """{package: the packages it imports}, and for each edge the module imports that make it.

    `rlyard/__init__.py` is left out: importing `rlyard.x` runs it, it imports nothing."""
    packages: dict[str, set[str]] = {}
    why: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        if module == "rlyard":
            continue
        source = package_of(module)
        packages.setdefault(source, set())
        for target in targets:
            if target == "rlyard" or package_of(target) == source:
                continue
            packages[source].add(package_of(target))
            why.setdefault((source, package_of(target)), []).append(f"{module} -> {target}")
    return packages, why


def test_the_package_graph_collapses_modules_into_their_packages():
    graph = {"rlyard": set(), "rlyard.a.x": {"rlyard.b", "rlyard.a.y"}, "rlyard.a.y": set(), "rlyard.b": {"rlyard.c.z"},
             "rlyard.c.z": {"rlyard.a.y"}}
    packages, why = package_graph(graph)
    assert packages == {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert why[("c", "a")] == ["rlyard.c.z -> rlyard.a.y"]
    assert circles(packages) == [["a", "b", "c"]]


def test_rlyard_packages_form_a_dag():
    """A lower layer never imports a higher one: the environment contract and the errors below the
    agent, the agent below the families, the families below config and orchestration."""
    packages, why = package_graph(import_graph(modules()))
    assert {"agent", "config", "engines", "environment", "envs", "errors", "harness", "orchestrate", "serve"} <= set(packages)
    found = circles(packages)
    edges = [f"{a} -> {b} ({'; '.join(why[(a, b)])})" for circle in found for a in circle for b in sorted(packages[a])
             if b in circle]
    assert not found, "package circles: " + "; ".join(" <-> ".join(c) for c in found) + "\nthrough:\n" + "\n".join(edges)
