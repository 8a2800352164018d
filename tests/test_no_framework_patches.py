"""No module of normrank or its integrations changes a framework's classes (issue 38): importing a
vector store must not change LlamaIndex or LangChain for every other store in the process.

Two checks: the source (every module's AST: no assignment, ``setattr`` or ``delattr`` onto a name
imported from LlamaIndex or LangChain, nor onto an attribute of one), and the running process
(every class of LlamaIndex and LangChain loaded before normrank, its ``__dict__`` compared before
and after importing every module of normrank and both integrations, in a fresh interpreter).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "normrank", REPO / "integrations" / "llamaindex", REPO / "integrations" / "langchain"]
# The frameworks; the integrations' own packages live inside their namespaces and are not them.
FRAMEWORK = ("llama_index", "langchain", "langchain_core", "langchain_community", "langchain_classic")
OURS = ("llama_index.vector_stores.normrank", "langchain_normrank")


def _framework(module: str) -> bool:
    top = module.split(".")[0]
    framework = top in FRAMEWORK or top.startswith("langchain_")
    return framework and not module.startswith(OURS)


def modules() -> list[Path]:
    out = []
    for base in SOURCES:
        out += [p for p in base.rglob("*.py") if "tests" not in p.parts and ".venv" not in p.parts]
    return sorted(out)


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches(source: str) -> list[str]:
    """Where ``source`` assigns to (or sets, deletes) an attribute of a framework name."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _framework(node.module):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if _framework(a.name)}
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        for t in targets:
            elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
            for e in elts:
                if isinstance(e, (ast.Attribute, ast.Subscript)) and _root(e) in names:
                    found.append(f"line {node.lineno}: {ast.unparse(e)}")
    return found


def test_the_scan_finds_a_patch():
    old = (
        "from llama_index.core.indices.vector_store.base import VectorStoreIndex\n"
        "def install():\n"
        "    from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever\n"
        "    VectorIndexRetriever.__init__ = lambda self: None\n"
        "    setattr(VectorStoreIndex, 'as_retriever', None)\n"
        "import langchain_core.vectorstores as vs\n"
        "vs.VectorStore.search = None\n"
    )
    assert len(patches(old)) == 3
    assert not patches("from llama_index.core.schema import TextNode\nnode = TextNode()\nnode.text = 'a'\n")


def test_no_module_assigns_to_a_framework_class():
    found = {
        str(p.relative_to(REPO)): hits for p in modules() if (hits := patches(p.read_text(encoding="utf-8")))
    }
    assert not found, f"framework attributes assigned: {found}"


_PROBE = r"""
import importlib, json, pkgutil, sys, warnings
warnings.simplefilter("ignore")
frameworks = [
    "llama_index.core", "llama_index.core.indices.vector_store.base",
    "llama_index.core.indices.vector_store.retrievers.retriever", "llama_index.core.vector_stores",
    "llama_index.core.query_engine", "llama_index.core.retrievers", "llama_index.core.schema",
    "langchain_core.vectorstores", "langchain_core.retrievers", "langchain_core.documents",
    "langchain_core.embeddings", "langchain_community.vectorstores", "langchain_community.docstore",
]
for name in frameworks:
    try:
        importlib.import_module(name)
    except ImportError:
        pass

def framework(mod):
    top = mod.split(".")[0]
    ours = mod.startswith(("llama_index.vector_stores.normrank", "langchain_normrank"))
    return (top == "llama_index" or top.startswith("langchain")) and not ours

def snapshot():
    out = {}
    for mname, mod in list(sys.modules.items()):
        if mod is None or not framework(mname):
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, type) and getattr(obj, "__module__", "") == mname:
                out[f"{mname}.{obj.__qualname__}"] = (obj, {k: id(v) for k, v in vars(obj).items()})
    return out

before = snapshot()
imported, failed = [], []
for top in ("normrank", "llama_index.vector_stores.normrank", "langchain_normrank"):
    pkg = importlib.import_module(top)
    imported.append(top)
    for info in pkgutil.walk_packages(pkg.__path__, top + "."):
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except Exception as e:  # an optional dependency missing here: said in the result
            failed.append(f"{info.name}: {type(e).__name__}")
changed = []
for key, (cls, attrs) in before.items():
    now = {k: id(v) for k, v in vars(cls).items()}
    diff = sorted(k for k in set(attrs) | set(now) if attrs.get(k) != now.get(k))
    # pydantic fills a model's own schema caches on first use: not a change of behaviour
    diff = [k for k in diff if not k.startswith("__pydantic") and k not in ("model_fields", "__abstractmethods__")]
    if diff:
        changed.append(f"{key}: {diff}")
print(json.dumps({"classes": len(before), "imported": imported, "failed": failed, "changed": changed}))
"""


def test_importing_normrank_changes_no_framework_class():
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, cwd=REPO, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["classes"] < 100:
        pytest.skip("LlamaIndex and LangChain are not installed here")
    assert "llama_index.vector_stores.normrank.retriever" in result["imported"]
    assert "langchain_normrank.vectorstores" in result["imported"]
    assert not result["changed"], f"framework classes changed by importing normrank: {result['changed']}"
