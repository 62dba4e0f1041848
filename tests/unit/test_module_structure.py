"""The shape of the `raftlog` package: no import cycle among its modules (imports under
TYPE_CHECKING and inside functions count: a cycle there is still two modules that cannot be
understood apart), and no `sys.path` edits (the CLI imports `chaos` and `bench` as packages)."""

from __future__ import annotations

import ast
from pathlib import Path

RAFTLOG = Path(__file__).resolve().parents[2] / "raftlog"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(RAFTLOG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = RAFTLOG) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its text."""
    paths = {_module_name(p): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in paths and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_raftlog() -> None:
    graph = import_graph()
    assert graph.get("raftlog.broker.server")
    assert cycles(graph) == []


def test_no_sys_path_edits_in_raftlog() -> None:
    found = [
        f"{path.relative_to(RAFTLOG.parent)}:{n}"
        for path in sorted(RAFTLOG.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "sys.path" in line and not line.lstrip().startswith("#")
    ]
    assert not found, f"sys.path edited at {found}"


# "About 1,000 lines" (issue #22): a module past this has more than one job to split out.
MODULE_LINES_MAX = 1100


def test_no_module_in_raftlog_is_over_about_a_thousand_lines() -> None:
    sizes = {
        str(p.relative_to(RAFTLOG.parent)): len(p.read_text().splitlines())
        for p in sorted(RAFTLOG.rglob("*.py"))
    }
    over = {name: n for name, n in sizes.items() if n > MODULE_LINES_MAX}
    assert not over, f"modules over {MODULE_LINES_MAX} lines: {over}"
