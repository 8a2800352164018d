"""The package's import graph has no loop: data flows one way (texts -> embeddings -> norms and
unit vectors -> scores -> rankings -> metrics -> report), so no module imports one that imports
it back at import time."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "normrank"


def module_imports() -> dict[str, set[str]]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found = set()
        for node in ast.parse(path.read_text()).body:  # module level: what runs at import
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                continue
            # what runs at import: top-level statements and the bodies of top-level try / if,
            # not function bodies (a lazy import inside a function makes no import-time loop)
            for sub in ast.walk(node) if isinstance(node, (ast.Try, ast.If)) else [node]:
                if isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                    for alias in sub.names:
                        full = f"{sub.module}.{alias.name}"
                        found.add(full if full in names else sub.module)
                elif isinstance(sub, ast.Import):
                    found.update(a.name for a in sub.names)
        graph[name] = {m for m in found if m in names and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_has_no_loop():
    graph = module_imports()
    assert len(graph) > 40 and "normrank.index" in graph  # the walk saw the package
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_planted_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
