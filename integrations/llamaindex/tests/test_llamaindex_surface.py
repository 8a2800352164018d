"""The surface test: LlamaIndex's ``SimpleVectorStore`` flows, enumerated now (not listed by hand),
run over SimpleVectorStore and over NormRankVectorStore (default norm_alpha = 0, so similarities
are cosines on both): every public method of ``SimpleVectorStore`` with each of its arguments,
every public method and property of a ``VectorStoreIndex`` over the store, ``as_retriever`` with
each ``VectorIndexRetriever`` argument, and a query in each ``VectorStoreQueryMode`` with each
``VectorStoreQuery`` field. Each outcome must be the same, or a difference or typed refusal
listed in this adapter's README table (between the ``surface-table`` markers); an untyped error
always fails, and so does a README row no call produces any more.

Query results are compared by ids and similarities (4 decimals); SimpleVectorStore returns no
nodes (it keeps none), this store returns them too.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.vector_stores.normrank import NormRankVectorStore

from normrank.errors import NormrankError

pytestmark = pytest.mark.filterwarnings("ignore")
README = Path(__file__).resolve().parents[1] / "README.md"
N, DIM = 30, 8


class Table(BaseEmbedding):
    """Raw vectors by the last line of the text (LlamaIndex puts metadata lines first)."""

    _table: dict = PrivateAttr()

    def __init__(self) -> None:
        super().__init__(model_name="table")
        rng = np.random.default_rng(2028)
        x = rng.normal(size=(N + 8, DIM)) * np.exp(rng.normal(0, 0.6, size=(N + 8, 1)))
        self._table = {f"doc {i}": v.tolist() for i, v in enumerate(x)}
        self._table |= {f"query {j}": rng.normal(size=DIM).tolist() for j in range(2)}

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._table[query]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._table[query]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._table[text.splitlines()[-1]]


EMB = Table()
FILTERS = MetadataFilters(filters=[MetadataFilter(key="group", value=1)])


def make_nodes(first: int = 0, count: int = N, embedded: bool = False) -> list[TextNode]:
    nodes = []
    for i in range(first, first + count):
        node = TextNode(id_=f"n{i}", text=f"doc {i}", metadata={"group": i % 3})
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"d{i // 2}")
        if embedded:
            node.embedding = EMB._table[f"doc {i}"]
        nodes.append(node)
    return nodes


def fresh_store(cls: type) -> Any:
    return cls() if cls is SimpleVectorStore else cls(dim=DIM)


def index_kwargs(cls: type) -> dict[str, Any]:
    """The README's drop-in line: over NormRankVectorStore, ``store_nodes_override=True`` (LlamaIndex's
    own argument) fills the index's docstore as over SimpleVectorStore."""
    return {} if cls is SimpleVectorStore else {"store_nodes_override": True}


def build_index(cls: type) -> VectorStoreIndex:
    ctx = StorageContext.from_defaults(vector_store=fresh_store(cls))
    return VectorStoreIndex(make_nodes(), storage_context=ctx, embed_model=EMB, **index_kwargs(cls))


# ---------------------------------------------------------------------- comparable forms
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def summary(x: Any) -> Any:
    """A comparable form (fresh uuid4 node ids as one placeholder: both stores get LlamaIndex's)."""
    if isinstance(x, str) and UUID.match(x):
        return "<uuid4>"
    if isinstance(x, VectorStoreQueryResult):
        sims = None if x.similarities is None else [round(float(s), 4) for s in x.similarities]
        return ("result", summary(list(x.ids or [])), sims)
    if hasattr(x, "node") and hasattr(x, "score"):  # NodeWithScore
        return ("hit", summary(x.node.node_id), None if x.score is None else round(float(x.score), 4))
    if isinstance(x, TextNode):
        return ("node", summary(x.node_id), x.text, json.dumps(x.metadata, sort_keys=True), x.ref_doc_id)
    if isinstance(x, (list, tuple)):
        return [summary(v) for v in x]
    if isinstance(x, dict):
        return {str(k): summary(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, (SimpleVectorStore, NormRankVectorStore)):
        return ("store", store_state(x))
    if hasattr(x, "node_ids") and hasattr(x, "metadata"):  # RefDocInfo
        return ("ref_doc_info", sorted(x.node_ids))
    if hasattr(x, "source_nodes"):  # a query engine's Response
        return ("response", summary(x.source_nodes))
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return type(x).__name__


def store_state(store: Any) -> Any:
    q = VectorStoreQuery(query_embedding=EMB._table["query 0"], similarity_top_k=5)
    return summary(store.query(q))


def index_state(index: VectorStoreIndex) -> Any:
    docs = sorted(summary(list(index.docstore.docs)))
    try:
        refs = sorted(index.ref_doc_info)
    except NotImplementedError:
        refs = "NotImplementedError"
    hits = summary(index.as_retriever(similarity_top_k=5).retrieve("query 0"))
    return docs, refs, hits


# ---------------------------------------------------------------------- the enumerated calls
@dataclass
class Call:
    label: str
    kind: str  # "store", "index", "retriever", "query"
    method: str
    args: list[str] = field(default_factory=list)
    kwargs: list[str] = field(default_factory=list)
    variant: str = ""


_PYDANTIC = set(dir(__import__("pydantic").BaseModel)) | {
    "model_construct",
    "model_copy",
    "model_dump",
    "model_dump_json",
    "model_json_schema",
}
_PYDANTIC |= {"model_parametrized_name", "model_post_init", "model_rebuild", "model_validate"}
_PYDANTIC |= {"model_validate_json", "model_validate_strings", "copy", "dict", "json", "parse_file"}
_PYDANTIC |= {"parse_obj", "parse_raw", "schema", "schema_json", "update_forward_refs", "validate"}
_PYDANTIC |= {"construct", "from_orm", "custom_model_dump"}


def public(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in _PYDANTIC)


def signature_calls(cls: type, name: str, kind: str) -> list[Call]:
    fn = getattr(cls, name)
    if not callable(fn):
        return [Call(f"{kind} .{name}", kind, name)]
    params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
    plain = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p.name for p in plain if p.default is p.empty]
    optional = [p.name for p in plain if p.default is not p.empty]
    out = [Call(f"{kind} {name}()", kind, name, required)]
    out += [Call(f"{kind} {name}({o}=)", kind, name, required, [o]) for o in optional]
    return out


# Index methods that need more than the store: an LLM agent (as_chat_engine's default mode), or
# that build another index (build_index_from_nodes, index_struct_cls): the store is not involved.
_INDEX_SKIP = {"as_chat_engine", "build_index_from_nodes", "index_struct_cls", "from_documents"}
_INDEX_SKIP |= {"from_vector_store", "set_index_id", "summary", "index_id"}


def all_calls() -> list[Call]:
    calls: list[Call] = []
    for name in public(SimpleVectorStore):
        calls += signature_calls(SimpleVectorStore, name, "store")
    for name in public(VectorStoreIndex):
        if name not in _INDEX_SKIP:
            calls += signature_calls(VectorStoreIndex, name, "index")
    calls.append(Call("index from_documents", "index", "from_documents"))
    # as_retriever passes some itself (node_ids, callback_manager, object_map): not the user's
    own = set(re.findall(r"(\w+)=", inspect.getsource(VectorStoreIndex.as_retriever)))
    retriever_params = [
        p
        for p in inspect.signature(VectorIndexRetriever.__init__).parameters
        if p not in ("self", "index", "kwargs") and p not in own
    ]
    calls += [Call(f"as_retriever({p}=)", "retriever", p) for p in [*retriever_params, "vector_store_kwargs"]]
    calls += [Call(f"as_retriever(vector_store_query_mode={m.value})", "retriever", "vector_store_query_mode", variant=m.value) for m in VectorStoreQueryMode]  # fmt: skip
    for mode in VectorStoreQueryMode:
        for fld in [
            "",
            *[f for f in VectorStoreQuery.__dataclass_fields__ if f not in ("query_embedding", "mode")],
        ]:
            calls.append(
                Call(
                    f"query(mode={mode.value}{', ' + fld + '=' if fld else ''})",
                    "query",
                    fld,
                    variant=mode.value,
                )
            )
    return calls


def value(call: Call, arg: str, cls: type, tmp: Path) -> Any:
    """What a LlamaIndex user passes for ``arg``; a new argument fails here until it has one."""
    simple = {"ref_doc_id": "d1", "doc_id": "d1", "text_id": "n3", "filters": FILTERS, "namespace": "default"}
    simple |= {"fs": None, "delete_from_docstore": True, "llm": MockLLM(), "index_id": "x"}
    if arg in simple:
        return simple[arg]
    if arg == "nodes":
        return make_nodes(N, 2, embedded=call.kind == "store")
    if arg == "node_ids":
        return ["n1", "n2", "missing"] if call.kind == "store" else ["n1", "n2"]
    if arg == "query":
        return VectorStoreQuery(query_embedding=EMB._table["query 0"], similarity_top_k=3)
    if arg in ("document", "documents"):
        docs = [Document(id_="d1", text="doc 31"), Document(id_="d99", text="doc 32")]
        return docs[0] if arg == "document" else docs
    if arg == "persist_path":
        return "./storage/default__vector_store.json"
    if arg == "persist_dir":
        return "./storage"
    if arg == "data":
        store = fresh_store(cls)
        store.add(make_nodes(embedded=True))
        return store.to_dict()
    if arg == "data_str":
        store = fresh_store(cls)
        store.add(make_nodes(embedded=True))
        return store.to_json()
    raise AssertionError(f"no LlamaIndex-user value for {call.method}({arg}=): add one to this test")


_CLASS_LEVEL = {"from_dict", "from_json", "from_persist_dir", "from_persist_path", "from_namespaced_persist_dir", "class_name"}  # fmt: skip


def run_store(call: Call, cls: type, tmp: Path) -> tuple[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(tmp)  # default paths (./storage) land in this call's folder
    try:
        return _run_store(call, cls, tmp)
    finally:
        os.chdir(here)


def _run_store(call: Call, cls: type, tmp: Path) -> tuple[str, Any]:
    store = fresh_store(cls)
    store.add(make_nodes(embedded=True))
    if call.method.startswith("from_") and "persist" in call.method:  # what a user loads: a persist
        saved = fresh_store(cls)
        saved.add(make_nodes(embedded=True))
        saved.persist("./storage/default__vector_store.json")
    try:
        kwargs = {a: value(call, a, cls, tmp) for a in [*call.args, *call.kwargs]}
        target = cls if call.method in _CLASS_LEVEL else store
        out = getattr(target, call.method)
        out = out(**kwargs) if callable(out) else out
        if inspect.isawaitable(out):
            out = asyncio.run(out)
        if call.method == "client":
            out = None if out is None else "client"
        if call.method == "persist":
            out = summary(cls.from_persist_path(kwargs.get("persist_path", "./storage/vector_store.json")))
        if call.method in ("to_dict", "to_json"):  # formats differ; what they carry must not
            out = (cls.from_dict if call.method == "to_dict" else cls.from_json)(out)
        if call.method in ("class_name",):
            out = "class_name"
        return "ok", (summary(out), store_state(store))
    except Exception as e:
        return "raised", e


def run_index(call: Call, cls: type, tmp: Path) -> tuple[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(tmp)
    try:
        return _run_index(call, cls, tmp)
    finally:
        os.chdir(here)


def _run_index(call: Call, cls: type, tmp: Path) -> tuple[str, Any]:
    try:
        if call.method == "from_documents":
            docs = [Document(id_=f"d{i}", text=f"doc {i}", metadata={"group": i % 3}) for i in range(N)]
            ctx = StorageContext.from_defaults(vector_store=fresh_store(cls))
            index = VectorStoreIndex.from_documents(
                docs, storage_context=ctx, embed_model=EMB, **index_kwargs(cls)
            )
            return "ok", ("index", index_state(index))
        index = build_index(cls)
        kwargs = {a: value(call, a, cls, tmp) for a in [*call.args, *call.kwargs]}
        out = getattr(index, call.method)
        out = out(**kwargs) if callable(out) else out
        if inspect.isawaitable(out):
            out = asyncio.run(out)
        if call.method == "as_query_engine":
            out = out.query("query 0")
        if call.method == "as_retriever":
            out = out.retrieve("query 0")
        if call.method in ("vector_store", "storage_context", "index_struct"):
            out = type(out).__name__ if call.method != "index_struct" else sorted(out.nodes_dict)
            if call.method == "vector_store":
                out = "vector store"
        if call.method == "docstore":
            out = sorted(out.docs)
        return "ok", (summary(out), index_state(index))
    except Exception as e:
        return "raised", e


def run_retriever(call: Call, cls: type) -> tuple[str, Any]:
    values = {"similarity_top_k": 3, "filters": FILTERS, "alpha": 0.5, "node_ids": ["n1", "n4", "n7"]}
    values |= {"doc_ids": ["d1", "d2"], "sparse_top_k": 3, "hybrid_top_k": 3, "callback_manager": None}
    values |= {
        "object_map": {},
        "embed_model": EMB,
        "verbose": True,
        "vector_store_kwargs": {"mmr_threshold": 0.3},
    }
    values |= {"vector_store_query_mode": call.variant or "mmr"}
    if call.method not in values:
        raise AssertionError(f"no value for as_retriever({call.method}=): add one to this test")
    try:
        index = build_index(cls)
        kwargs = {call.method: values[call.method]}
        if call.method == "vector_store_kwargs":
            kwargs["vector_store_query_mode"] = "mmr"
        return "ok", summary(index.as_retriever(**kwargs).retrieve("query 0"))
    except Exception as e:
        return "raised", e


def run_query(call: Call, cls: type) -> tuple[str, Any]:
    values = {"similarity_top_k": 4, "doc_ids": ["d1", "d2"], "node_ids": ["n1", "n4", "n7", "n9"]}
    values |= {"query_str": "query 0", "output_fields": ["text"], "embedding_field": "embedding"}
    values |= {"alpha": 0.5, "filters": FILTERS, "mmr_threshold": 0.3, "sparse_top_k": 3, "hybrid_top_k": 3}
    if call.method and call.method not in values:
        raise AssertionError(f"no value for VectorStoreQuery({call.method}=): add one to this test")
    try:
        store = fresh_store(cls)
        store.add(make_nodes(embedded=True))
        fields = {
            "query_embedding": EMB._table["query 0"],
            "similarity_top_k": 4,
            "mode": VectorStoreQueryMode(call.variant),
        }
        if call.method:
            fields[call.method] = values[call.method]
        return "ok", summary(store.query(VectorStoreQuery(**fields)))
    except Exception as e:
        return "raised", e


def classify(theirs: tuple[str, Any], ours: tuple[str, Any]) -> str:
    if ours[0] == "raised" and theirs[0] == "raised" and type(ours[1]) is type(theirs[1]):
        return "same"  # LlamaIndex's own error, raised for both (e.g. no LLM configured)
    if ours[0] == "raised":
        err = ours[1]
        if not isinstance(err, NormrankError):
            return f"untyped: {type(err).__name__}: {err}"
        return "same" if theirs[0] == "raised" else f"refusal: {type(err).__name__}"
    if theirs[0] == "raised":
        return "difference"
    return "same" if theirs[1] == ours[1] else "difference"


# ---------------------------------------------------------------------- edge arguments
# The calls above pass ordinary arguments; these pass what users pass by accident or on purpose:
# empty lists, duplicates, k <= 0, missing ids, None / "" / [] values, a filter across kinds,
# ties, and each FAISS index kind the store's factory= takes. Shared with the PGVectorStore peer
# (test_llamaindex_surface_postgres.py), which runs the same calls on a real server.
def edge_nodes() -> list[TextNode]:
    nodes = make_nodes(embedded=True)
    extra = {0: {"tags": []}, 1: {"tags": ""}, 2: {"tags": None}, 3: {"tags": ["a", "b"]}, 4: {"name": "x4"}}
    for i, meta in extra.items():
        nodes[i].metadata.update(meta)
    return nodes


def _node(node_id: str, vec: Any, **meta: Any) -> TextNode:
    return TextNode(id_=node_id, text="doc 0", metadata=meta, embedding=[float(v) for v in vec])


def _q(k: int = 4, mode: str = "default", **fields: Any) -> VectorStoreQuery:
    return VectorStoreQuery(query_embedding=EMB._table["query 1"], similarity_top_k=k, mode=mode, **fields)


def _f(key: str, op: str, value: Any = None) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key=key, operator=op, value=value)])


_Q = EMB._table["query 1"]
EDGE: dict[str, Any] = {
    "add(no nodes)": lambda s: s.add([]),
    "add(one id twice in a batch)": lambda s: s.add([_node("x", _Q), _node("x", [-v for v in _Q])]),
    "add(an existing id)": lambda s: s.add([_node("n3", _Q)]),
    "add(a node without embedding)": lambda s: s.add([TextNode(id_="x", text="doc 0")]),
    "add(metadata value None)": lambda s: s.add([_node("x", _Q, tags=None)]),
    "delete(a missing ref_doc_id)": lambda s: s.delete("nope"),
    "delete_nodes(no ids)": lambda s: s.delete_nodes([]),
    "delete_nodes(one id twice)": lambda s: s.delete_nodes(["n1", "n1"]),
    "delete_nodes(a missing id)": lambda s: s.delete_nodes(["nope"]),
    "get_nodes(no ids)": lambda s: s.get_nodes([]),
    "get_nodes(no arguments)": lambda s: s.get_nodes(),
    "delete_nodes(no arguments)": lambda s: s.delete_nodes(),
    "get_nodes(one id twice)": lambda s: s.get_nodes(["n1", "n1"]),
    "get_nodes(a missing id)": lambda s: s.get_nodes(["nope"]),
    "get(a missing id)": lambda s: s.get("nope"),
    "query(k=0)": lambda s: s.query(_q(0)),
    "query(k=-1)": lambda s: s.query(_q(-1)),
    "query(k > nodes)": lambda s: s.query(_q(N + 5)),
    "query(mode=mmr, k=0)": lambda s: s.query(_q(0, "mmr")),
    "query(mode=mmr, k > nodes)": lambda s: s.query(_q(N + 5, "mmr")),
    "query(node_ids=no ids)": lambda s: s.query(_q(node_ids=[])),
    "query(node_ids=a missing id)": lambda s: s.query(_q(node_ids=["nope"])),
    "query(node_ids=one id twice)": lambda s: s.query(_q(node_ids=["n1", "n1", "n2"])),
    "query(doc_ids=no ids)": lambda s: s.query(_q(doc_ids=[])),
    "query(doc_ids=a missing id)": lambda s: s.query(_q(doc_ids=["nope"])),
    "query(filters=an empty list)": lambda s: s.query(_q(filters=MetadataFilters(filters=[]))),
    "query(IS_EMPTY over empty list, empty string, None, missing)": lambda s: s.query(
        _q(N, filters=_f("tags", "is_empty"))
    ),
    "query(IN an empty list)": lambda s: s.query(_q(filters=_f("group", "in", []))),
    "query(NIN an empty list)": lambda s: s.query(_q(filters=_f("group", "nin", []))),
    "query(GT a number on a string field)": lambda s: s.query(_q(filters=_f("name", ">", 1))),
    "query(GT a string on a number field)": lambda s: s.query(_q(filters=_f("group", ">", "a"))),
    "query(CONTAINS on a number field)": lambda s: s.query(_q(filters=_f("group", "contains", "a"))),
    "query(TEXT_MATCH on a list field)": lambda s: s.query(_q(filters=_f("tags", "text_match", "a"))),
    "query(ties: equal scores)": lambda s: (s.add([_node("z", _Q), _node("a", _Q)]), s.query(_q(2)))[1],
}


def edge_outcome(name: str, make: Any) -> tuple[str, Any]:
    """(outcome, summary) of edge call ``name`` on a store ``make()`` returns, filled with edge_nodes."""
    try:
        store = make()
        store.add(edge_nodes())
        out = EDGE[name](store)
        return "ok", (summary(out), store_state(store))
    except Exception as e:
        return "raised", e


FACTORIES = ["Flat", "HNSW32", "IDMap,Flat", "IVF2,Flat", "PQ2", "SQ8"]


def edge_calls() -> dict[str, str]:
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in EDGE:
            pair = [
                edge_outcome(name, lambda c=c: fresh_store(c))
                for c in (SimpleVectorStore, NormRankVectorStore)
            ]
            out[f"edge {name}"] = classify(*pair)
        for factory in FACTORIES:  # what factory= a user may pass; SimpleVectorStore is exact
            ours = edge_outcome("query(k > nodes)", lambda f=factory: NormRankVectorStore(dim=DIM, factory=f))
            theirs = edge_outcome("query(k > nodes)", SimpleVectorStore)
            out[f"edge NormRankVectorStore(factory={factory!r})"] = classify(theirs, ours)
    return out


def surface_outcomes(tmp: Path) -> dict[str, str]:
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in all_calls():
            if call.kind == "store":
                pair = [
                    run_store(call, c, tmp / c.__name__ / call.label)
                    for c in (SimpleVectorStore, NormRankVectorStore)
                ]
            elif call.kind == "index":
                pair = [
                    run_index(call, c, tmp / c.__name__ / call.label)
                    for c in (SimpleVectorStore, NormRankVectorStore)
                ]
            elif call.kind == "retriever":
                pair = [run_retriever(call, c) for c in (SimpleVectorStore, NormRankVectorStore)]
            else:
                pair = [run_query(call, c) for c in (SimpleVectorStore, NormRankVectorStore)]
            out[call.label] = classify(*pair)
    return out | edge_calls()


def readme_table() -> list[tuple[str, str, str]]:
    text = README.read_text()
    block = text.split("<!-- surface-table:start -->")[1].split("<!-- surface-table:end -->")[0]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, str]:
    return surface_outcomes(tmp_path_factory.mktemp("surface"))


def test_every_simple_vector_store_method_has_calls_here():
    methods = {c.method for c in all_calls() if c.kind == "store"}
    assert set(public(SimpleVectorStore)) <= methods


def test_surface_is_same_or_documented(outcomes):
    rows = readme_table()
    problems = []
    for label, kind in outcomes.items():
        row = next((r for r in rows if fnmatch.fnmatchcase(label, r[0])), None)
        if kind.startswith("untyped"):
            problems.append(f"{label}: {kind}")
        elif kind == "same":
            if row is not None:
                problems.append(f"{label}: same as SimpleVectorStore, but the README lists it ({row[0]})")
        elif row is None:
            problems.append(f"{label}: undocumented {kind}")
        elif row[1] != kind:
            problems.append(f"{label}: {kind}, the README says {row[1]!r} ({row[0]})")
    assert not problems, "\n".join(problems)


def test_every_readme_row_still_happens(outcomes):
    stale = [r for r in readme_table() if not any(fnmatch.fnmatchcase(lab, r[0]) for lab in outcomes)]
    assert not stale, f"README rows no call produces: {stale}"


def test_counts(outcomes, record_property):
    kinds = [k.split(":")[0] for k in outcomes.values()]
    counts = {k: kinds.count(k) for k in ("same", "difference", "refusal", "untyped")}
    record_property("calls", len(outcomes))
    record_property("counts", counts)
    said = re.search(
        r"Current count: (\d+) calls, (\d+) the same, (\d+)\s+documented differences, (\d+) documented refusals",
        README.read_text(),
    )
    assert said, "the README's count sentence is missing"
    have = (len(outcomes), counts["same"], counts["difference"], counts["refusal"])
    assert tuple(int(x) for x in said.groups()) == have, f"the README's counts are stale: now {have}"


@pytest.mark.parametrize("kind", ["IndexFlatL2", "IndexFlatIP", "IndexHNSWFlat"])
def test_each_faiss_index_kind_of_faiss_vector_store(kind):
    """FaissVectorStore over each FAISS index a user may hand it, against this store at
    norm_alpha = 0 on unit vectors: the same nodes, and the scores by docs/llamaindex.md's
    conversion (an L2 index returns squared distances: similarity = 1 - L2² / 2)."""
    faiss_store = pytest.importorskip(
        "llama_index.vector_stores.faiss", reason="needs llama-index-vector-stores-faiss (not installed here)"
    )
    import faiss

    index = {"IndexFlatL2": faiss.IndexFlatL2, "IndexFlatIP": faiss.IndexFlatIP}.get(kind)
    index = faiss.IndexHNSWFlat(DIM, 32) if index is None else index(DIM)
    theirs, ours = faiss_store.FaissVectorStore(faiss_index=index), NormRankVectorStore(dim=DIM)
    nodes = make_nodes(embedded=True)
    for node in nodes:  # unit vectors: FAISS's L2 and inner product then rank by the cosine
        node.embedding = (np.asarray(node.embedding) / np.linalg.norm(node.embedding)).tolist()
    positions = {str(p): n.node_id for p, n in enumerate(nodes)}
    assert [positions[i] for i in theirs.add(nodes)] == ours.add(nodes)
    for j in range(2):
        unit = np.asarray(EMB._table[f"query {j}"]) / np.linalg.norm(EMB._table[f"query {j}"])
        q = VectorStoreQuery(query_embedding=unit.tolist(), similarity_top_k=5)
        a, b = theirs.query(q), ours.query(q)
        # unit query and nodes: inner product = cosine, squared L2 = 2 - 2 cosine
        sims = list(a.similarities) if kind == "IndexFlatIP" else [1 - d / 2 for d in a.similarities]
        assert [positions[i] for i in a.ids] == b.ids
        np.testing.assert_allclose(sims, b.similarities, atol=1e-5)


if __name__ == "__main__":  # prints every outcome, to write the README table from
    import tempfile

    warnings.simplefilter("ignore")
    for label, kind in surface_outcomes(Path(tempfile.mkdtemp())).items():
        print(f"{label:75s} {kind}")
