"""No import cycles between the project's modules.

Every module under the packages below is parsed with ``ast`` (nothing is imported); each ``import`` and
``from ... import`` adds an edge to the most specific project module it names — at module level and inside
functions alike, since an import moved into a function only postpones the cycle to the first call. Imports
under ``if TYPE_CHECKING:`` are skipped: they never run. Any strongly connected component of more than one
module (or a module importing itself) is a cycle, listed with one concrete path through it.

Edges go to the named module only, not to the parent packages Python also initialises on the way: a
package ``__init__`` that re-exports its submodules would otherwise close a "cycle" with every one of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reference_broker", "harness", "chaos", "spark_reports", "scenarios", "sysctl_profiles")

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement below ``node`` except the body of an ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield from _imports_in(sub)
            continue
        yield from _imports_in(child)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The most specific project module ``name`` (dotted) names, or None outside the project."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imported_modules(mod: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            targets = [_resolve(a.name, modules) for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` imports the submodule pkg.sub when there is one, else pkg itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else _resolve(base, modules)
                       for a in node.names]
        found.update(t for t in targets if t is not None)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {mod: imported_modules(mod, path, modules) for mod, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, succs = work[-1]
            for succ in succs:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start, members = component[0], set(component)
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    return [*paths[node], start]
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    nxt.append(succ)
        frontier = nxt
    raise AssertionError(f"{component} is not a cycle")  # pragma: no cover


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One line per cycle: ``a -> b -> a``."""
    return [" -> ".join(one_cycle(graph, c)) for c in strongly_connected(graph)
            if len(c) > 1 or c[0] in graph[c[0]]]



def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(found)


# ---------------------------------------------------------------- the checker itself


def test_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert sorted(cycles(graph)) == ["a -> b -> c -> a", "e -> e"]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    modules = {}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        parts = name.removesuffix(".py").split("/")
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return {mod: imported_modules(mod, path, modules) for mod, path in modules.items()}


def test_edges_cover_function_level_and_relative_imports_not_type_checking(tmp_path: Path) -> None:
    graph = _graph_of(tmp_path, {
        "p/__init__.py": "",
        "p/a.py": "def f():\n    from p import b\n",
        "p/b.py": "from . import c\nfrom .c import X\n",
        "p/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.a\nelse:\n    import p.d\n",
        "p/d.py": "import os\nfrom p import missing\n",
    })
    assert graph == {"p": set(), "p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.d"}, "p.d": {"p"}}
