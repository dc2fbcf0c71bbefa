"""The product's import graph: storage <- txlog <- cli, txlog's wings, and no cycle anywhere (docs/DESIGN.md §10).

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
    wrong = sorted(
        (module, dep)
        for module, deps in _graph().items()
        for dep in deps
        if LAYER[dep.split(".")[0]] > LAYER[module.split(".")[0]]
    )
    assert wrong == []


# ---- txlog's wings (docs/DESIGN.md §10) ------------------------------------------------------------
#
# The modules directly under txlog/ are the shared vocabulary (errors, value types, the request
# types, the one definition of visibility, member sessions) plus the transport, the one seam
# between clients and coordinators. Each wing may import the wings named here and nothing else
# of txlog; clients reach coordinators only through the transport and the request types.

COMMON = "common"
TRANSPORT = "transport"
WING_RULES: dict[str, set[str]] = {
    COMMON: {COMMON},
    "schemas": {COMMON},
    "coordinator": {COMMON, "schemas"},
    TRANSPORT: {COMMON, "schemas", "coordinator"},
    "clients": {COMMON, "schemas", TRANSPORT},
    # the planner and Arrow reader of `txlog.scan`: what the Spark source reads through too;
    # never Spark, never a client (it reads segment files, as a Consumer's fetch does)
    "scan": {COMMON},
    # the Spark source reads through scan; its sink (txlog/spark/writer.py) writes as a client does,
    # with the Producer's two-phase commit and a group's offsets for its decisions
    "spark": {COMMON, "schemas", "scan", "clients"},
    # `txlog export`: committed records into lake tables, read through txlog.scan; never a client, never Spark
    "export": {COMMON, "scan"},
    "tools": {COMMON, "schemas", "coordinator", TRANSPORT, "clients"},
    # the Kafka protocol server: serves the request types through the transport, describes
    # coordinator state as Admin does (ListTransactions, DescribeGroups...), never a client
    "server": {COMMON, "schemas", "coordinator", TRANSPORT},
    # `txlog mirror`: a store to a Kafka cluster and back through confluent-kafka; the store side
    # through the clients (FROM's transactional producer) and txlog.fetch; never the server
    "mirror": {COMMON, "schemas", TRANSPORT, "clients"},
    "package": {COMMON, "schemas", "coordinator", TRANSPORT, "clients", "tools", "scan", "spark"},  # txlog/__init__.py
}
# Admin is Kafka's admin client, and like kafka-transactions.sh it describes coordinator state
# the request types do not carry (docs/DESIGN.md §10).
EXCEPTIONS = {("txlog.clients.admin", "coordinator")}
# The fault-injection harness wraps a transport from outside; only tools and the CLI's demo use it.
FAULT_INJECTION = "txlog.tools.fault_injection"


def wing_of(module: str) -> str | None:
    """The wing of a txlog module, or None for storage and cli."""
    parts = module.split(".")
    if parts[0] != "txlog":
        return None
    if len(parts) == 1:
        return "package"
    if parts[1] in WING_RULES:  # a sub-package: clients, coordinator, schemas, scan, spark, tools
        return parts[1]
    return TRANSPORT if parts[1] == TRANSPORT else COMMON


def test_txlog_wings_import_only_what_their_rule_allows():
    wrong = sorted(
        (module, dep)
        for module, deps in _graph().items()
        for dep in deps
        if wing_of(module)
        and wing_of(dep)
        and wing_of(dep) != wing_of(module)
        and wing_of(dep) not in WING_RULES[wing_of(module)]
        and (module, wing_of(dep)) not in EXCEPTIONS
    )
    assert wrong == []


def test_the_wing_rule_sees_a_client_importing_a_coordinator():
    assert wing_of("txlog.clients.producer") == "clients"
    assert wing_of("txlog.coordinator.group_coordinator") == "coordinator"
    assert wing_of("txlog.transport") == TRANSPORT
    assert wing_of("txlog.requests") == COMMON
    assert "coordinator" not in WING_RULES["clients"]


def test_no_product_module_imports_the_fault_injection_harness():
    users = sorted(
        module
        for module, deps in _graph().items()
        if FAULT_INJECTION in deps and not module.startswith("txlog.tools.") and not module.startswith("cli.demo")
    )
    assert users == []


def test_only_storage_imports_the_native_extension():
    users = []
    for module, path in _modules().items():
        if module.split(".")[0] == "storage":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            names = (
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(name == "storage._native" for name in names):
                users.append(module)
    assert users == []


def test_the_scan_wing_imports_no_spark():
    """txlog.scan is the JVM-free path (docs/analysis.md): Spark imports it, never the other way."""
    users = []
    for module, path in _modules().items():
        if not module.startswith("txlog.scan"):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(name.split(".")[0] in ("pyspark", "py4j") for name in names):
                users.append(module)
    assert users == []
    assert "spark" not in WING_RULES["scan"] and "clients" not in WING_RULES["scan"]


def test_the_mirror_wing_imports_confluent_kafka_only_inside_functions():
    """confluent-kafka is the `mirror` extra: importing txlog.mirror must not need it (pyproject's extras)."""
    users = []
    for module, path in _modules().items():
        if not module.startswith("txlog.mirror"):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in tree.body:  # module level only: imports inside functions run when a mirror does
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(name.split(".")[0] == "confluent_kafka" for name in names):
                users.append(module)
    assert users == []
    assert "server" not in WING_RULES["mirror"]
