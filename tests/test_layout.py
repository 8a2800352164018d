"""The layout stays as a newcomer reads it: a few shared modules at the root, wings by job, data
flowing one way (texts -> embeddings -> norms and unit vectors -> scores -> rankings -> metrics ->
report). No module imports one that imports it back, at import time or inside a function, anywhere
in the tree (normrank, benchmarks, integrations), and no wing imports a wing above it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "normrank"
# Shared by every wing; nothing else may sit at the package's root.
ROOT_MODULES = {"__init__", "errors", "validation", "settings", "progress", "scoring", "unit_norms"}
# A wing may import its own modules, the root's, and wings of a lower layer only.
LAYER = {
    "root": 0,
    "search": 1,  # kernels and the ANN method: no index state
    "encoders": 1,  # texts -> raw embeddings
    "index": 2,  # NormIndex over FAISS, its state and files
    "corpus": 2,  # collections in, embeddings cached
    "store": 3,  # the adapters' keyed store over any index
    "backends": 3,  # Qdrant, Postgres: the same interface as NormIndex
    "sweep": 4,
    "probe": 4,  # heat and drift; owns the contrastive objective (probe/loss.py)
    "train": 5,  # trains a projection head (the paper's Section 5) on the probe's objective
    "normrank": 6,  # the package's public facade (normrank/__init__.py)
    "cli": 7,
}
MAX_LINES = 650


def module_names(base: Path, prefix: str = "") -> dict[str, Path]:
    names = {}
    for path in base.rglob("*.py"):
        if ".venv" in path.parts or "build" in path.parts:
            continue
        parts = path.relative_to(base).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        names[prefix + ".".join(parts)] = path
    return names


def all_modules() -> dict[str, Path]:
    """Every importable module of the tree, by the name it is imported under."""
    names = module_names(ROOT, "normrank.")
    names["normrank"] = names.pop("normrank.")
    names.update(module_names(REPO / "benchmarks"))  # run as scripts: imported by bare name
    names.update(
        module_names(REPO / "integrations" / "langchain" / "langchain_normrank", "langchain_normrank.")
    )
    names["langchain_normrank"] = names.pop("langchain_normrank.")
    llama = REPO / "integrations" / "llamaindex" / "llama_index" / "vector_stores" / "normrank"
    names.update(module_names(llama, "llama_index.vector_stores.normrank."))
    names["llama_index.vector_stores.normrank"] = names.pop("llama_index.vector_stores.normrank.")
    return names


def module_imports(names: dict[str, Path], *, lazy: bool) -> dict[str, set[str]]:
    """What each module imports from the tree: at import time only, or (lazy) inside functions too."""
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text())
        if lazy:
            nodes = list(ast.walk(tree))
        else:  # top-level statements and the bodies of top-level try / if
            nodes = []
            for node in tree.body:
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                    continue
                nodes.extend(ast.walk(node) if isinstance(node, (ast.Try, ast.If)) else [node])
        found = set()
        for sub in nodes:
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


def wing(module: str) -> str:
    parts = module.split(".")
    if parts == ["normrank"]:
        return "normrank"
    return parts[1] if (ROOT / parts[1]).is_dir() else "root"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in graph.items():
        if not src.startswith("normrank"):
            continue
        for dst in targets:
            a, b = wing(src), wing(dst)
            if a != b and LAYER[b] >= LAYER[a]:
                bad.append(f"{src} ({a}) -> {dst} ({b})")
    return sorted(bad)


def test_the_import_graph_has_no_loop_anywhere_in_the_tree():
    names = all_modules()
    assert {"normrank.index.norm_index", "speed", "langchain_normrank.vectorstores"} <= set(names)
    for lazy in (False, True):
        cycle = find_cycle(module_imports(names, lazy=lazy))
        assert cycle is None, " -> ".join(cycle)


def test_no_wing_imports_a_wing_above_it():
    names = {n: p for n, p in all_modules().items() if n.startswith("normrank")}
    assert upward_imports(module_imports(names, lazy=True)) == []


def test_the_root_holds_only_what_every_wing_uses_and_each_wing_says_what_it_does():
    at_root = {p.stem for p in ROOT.glob("*.py")}
    assert at_root == ROOT_MODULES, f"move {sorted(at_root - ROOT_MODULES)} into a wing"
    wings = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert wings == set(LAYER) - {"root", "normrank"}, "a new wing needs its place in LAYER"
    for name in wings:
        doc = ast.get_docstring(ast.parse((ROOT / name / "__init__.py").read_text()))
        first = doc.split("\n\n")[0] if doc else ""
        assert first and len(first.splitlines()) <= 3, (
            f"normrank/{name}/__init__.py: say in 3 lines what the wing does"
        )


def test_no_module_is_too_long_to_read():
    long = {
        str(p.relative_to(REPO)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_checks_find_what_they_look_for():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    planted = {"normrank.search.flat": {"normrank.index.norm_index"}, "normrank.index.norm_index": set()}
    assert upward_imports(planted) == ["normrank.search.flat (search) -> normrank.index.norm_index (index)"]
