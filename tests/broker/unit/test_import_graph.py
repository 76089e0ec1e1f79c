"""The broker package's modules import each other without a cycle; so do the tools' (``mqadmin``'s
command modules are listed by a registry, never imported back).

Every ``import`` counts, wherever it stands: module level, inside a function, or under
``TYPE_CHECKING`` (a type-only import back into a module that imports you is still a loop in
the design, and the first refactoring that needs the name at run time makes it a real one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import aiorocketmq.broker
import aiorocketmq.tools

PACKAGE = "aiorocketmq.broker"
ROOT = Path(aiorocketmq.broker.__file__).resolve().parent


def _module_name(path: Path, package: str = PACKAGE, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _modules(package: str = PACKAGE, root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(path, package, root): path for path in sorted(root.rglob("*.py"))}


def _imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of the package that ``module`` imports, by any kind of import statement."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    found.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in known:
                    found.add(f"{target}.{alias.name}")
                elif target in known:
                    found.add(target)
    found.discard(module)
    return found


def import_graph(package: str = PACKAGE, root: Path = ROOT) -> dict[str, set[str]]:
    modules = _modules(package, root)
    known = set(modules)
    return {name: _imported(name, path, known) for name, path in modules.items()}


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & component):
                if succ == start:
                    return [*paths[node], start]
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    # A relative package import, a relative module import and an absolute one.
    assert f"{PACKAGE}.store" in graph[f"{PACKAGE}.server"]
    assert f"{PACKAGE}.config" in graph[f"{PACKAGE}.server"]
    assert f"{PACKAGE}.store.config" in graph[f"{PACKAGE}.config"]


def test_cycle_finder_finds_function_level_and_type_only_loops() -> None:
    graph = {"a": {"b"}, "b": {"c", "e"}, "c": {"a"}, "d": {"a"}, "e": {"b"}}
    assert import_loops(graph) == [["a", "b", "c", "e"]]
    assert a_cycle(graph, {"a", "b", "c", "e"}) == ["a", "b", "c", "a"]
    assert import_loops({"a": {"b"}, "b": set()}) == []


def _short(name: str) -> str:
    return name.removeprefix(PACKAGE + ".")


def test_broker_package_has_no_import_cycle() -> None:
    graph = import_graph()
    loops = import_loops(graph)
    assert not loops, "import cycles in the broker package:\n" + "\n".join(
        f"{', '.join(map(_short, loop))} (e.g. {' -> '.join(map(_short, a_cycle(graph, set(loop))))})"
        for loop in loops
    )


def test_tools_package_has_no_import_cycle() -> None:
    package = "aiorocketmq.tools"
    graph = import_graph(package, Path(aiorocketmq.tools.__file__).resolve().parent)
    # The registry reaches every command module; the command modules reach back to none of it.
    assert f"{package}.mqadmin.topic" in graph[f"{package}.mqadmin.registry"]
    assert f"{package}.mqadmin.command" in graph[f"{package}.mqadmin.topic"]
    loops = import_loops(graph)
    assert not loops, "import cycles in the tools package:\n" + "\n".join(
        " -> ".join(a_cycle(graph, set(loop))) for loop in loops
    )


#: The broker's fronts: each turns one wire protocol into calls on the broker's parts, and none
#: calls another (a gRPC request served by building a remoting command is the doubling back
#: this rule keeps out).
FRONTS = {
    "remoting": ("aiorocketmq.broker.handlers", "aiorocketmq.broker.pop.handlers"),
    "gRPC": ("aiorocketmq.broker.grpc",),
}


def _front(module: str) -> str | None:
    for front, prefixes in FRONTS.items():
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return front
    return None


def test_fronts_do_not_import_each_other() -> None:
    graph = import_graph()
    crossings = sorted(
        f"{module} ({_front(module)}) imports {target} ({_front(target)})"
        for module, targets in graph.items()
        for target in targets
        if _front(module) is not None and _front(target) not in (None, _front(module))
    )
    assert crossings == []
    # The rule sees a crossing where there is one.
    planted = {**graph, "aiorocketmq.broker.grpc.service": {"aiorocketmq.broker.handlers.send"}}
    assert any(
        _front(m) == "gRPC" and _front(t) == "remoting" for m, targets in planted.items() for t in targets
    )


#: What the proxy (cluster mode) must never reach: the broker's state. The proxy is stateless;
#: the 5.x front it shares with the broker reaches the messages through its hooks only.
BROKER_STATE = (
    "aiorocketmq.broker.store",
    "aiorocketmq.broker.pop",
    "aiorocketmq.broker.topics",
    "aiorocketmq.broker.groups",
    "aiorocketmq.broker.offsets",
    "aiorocketmq.broker.transactions",
    "aiorocketmq.broker.accept",
    "aiorocketmq.broker.server",
    "aiorocketmq.broker.grpc.local",
)


def _reached(graph: dict[str, set[str]], starts: set[str]) -> set[str]:
    seen, todo = set(starts), list(starts)
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_proxy_reaches_no_broker_state() -> None:
    import aiorocketmq.proxy

    proxy_root = Path(aiorocketmq.proxy.__file__).resolve().parent
    broker = _modules()
    proxy = _modules("aiorocketmq.proxy", proxy_root)
    known = set(broker) | set(proxy)
    graph = {name: _imported(name, path, known) for name, path in {**broker, **proxy}.items()}
    reached = _reached(graph, set(proxy))
    assert "aiorocketmq.broker.grpc.consume" in reached  # the shared front, as the proxy uses it

    def state(module: str) -> bool:
        # The store's settings are no state (the broker's config, which ACL 2.0 reads, has them).
        if module == "aiorocketmq.broker.store.config":
            return False
        return any(module == s or module.startswith(s + ".") for s in BROKER_STATE)

    assert sorted(m for m in reached if state(m)) == []
    # The rule sees it when a proxy module does reach the store.
    planted = {
        **graph,
        "aiorocketmq.proxy.cluster": graph["aiorocketmq.proxy.cluster"] | {"aiorocketmq.broker.grpc.local"},
    }
    assert any(state(m) for m in _reached(planted, set(proxy)))
