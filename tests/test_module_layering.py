"""The product's import graph: storage <- txlog <- cli, and no cycle anywhere (docs/DESIGN.md §10).

Read from the source with `ast` (every import statement, including those inside functions),
so a lazy import that closes a cycle or points the wrong way is caught too.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("storage", "txlog", "cli")
LAYER = {name: rank for rank, name in enumerate(PACKAGES)}  # a module may import its own rank or lower


def _modules() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        for directory, _, names in os.walk(os.path.join(ROOT, package)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {node.module} & modules.keys()
                deps |= {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
            elif isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names} & modules.keys()
        graph[module] = deps - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
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


def test_no_module_of_the_product_imports_itself_back():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_dependencies_point_one_way_storage_txlog_cli():
    wrong = sorted((module, dep) for module, deps in _graph().items() for dep in deps
                   if LAYER[dep.split(".")[0]] > LAYER[module.split(".")[0]])
    assert wrong == []
