"""The surface test: every public method, keyword argument and attribute of
``langchain_community.vectorstores.FAISS``, enumerated now (not listed by hand), called on FAISS
and on NormRankVectorStore with the arguments a FAISS user passes. Each call must give the same
result, or be a difference or a typed refusal listed in this adapter's README table
(``integrations/langchain/README.md``, between the ``surface-table`` markers); an untyped error
always fails. So a method or argument a new FAISS release adds shows up here as a failure (no
value for its argument, or an unlisted outcome), and a README row that no longer happens fails too.

The documents are unit vectors, so FAISS's L2 ranking and the cosine ranking agree, and the
swapped-in store runs at its default alpha = 0: where results differ, they differ by design.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import inspect
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from langchain_normrank import NormRankVectorStore

from normrank.errors import NormrankError

pytestmark = pytest.mark.filterwarnings("ignore")
faiss_module = pytest.importorskip("langchain_community.vectorstores.faiss")
faiss = pytest.importorskip("faiss")
FAISS = faiss_module.FAISS
DistanceStrategy = pytest.importorskip("langchain_community.vectorstores.utils").DistanceStrategy
InMemoryDocstore = pytest.importorskip("langchain_community.docstore.in_memory").InMemoryDocstore

README = Path(__file__).resolve().parents[1] / "README.md"
N, DIM = 40, 8
TEXTS = [f"doc {i}" for i in range(N)]
METAS = [{"group": i % 4, "i": i} for i in range(N)]
IDS = [str(i) for i in range(N)]


class UnitEmbeddings(Embeddings):
    """Deterministic unit vectors from a text's hash (FAISS's L2 ranking = the cosine ranking)."""

    def embed_query(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).normal(size=DIM)
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


EMB = UnitEmbeddings()


def build(cls: type) -> Any:
    return cls.from_texts(TEXTS, EMB, METAS, IDS)


# ---------------------------------------------------------------------- the enumerated surface
def public_methods() -> list[str]:
    names = [n for n in dir(FAISS) if not n.startswith("_") and callable(getattr(FAISS, n))]
    return ["__init__", *sorted(names)]


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def hidden_kwargs(name: str) -> list[str]:
    """Keyword arguments a FAISS method reads from ``**kwargs`` (``kwargs.get("x")`` /
    ``kwargs.pop("x")``), in its own source and in the private helpers it calls."""
    seen, found, todo = set(), [], [name]
    while todo:
        fn = getattr(FAISS, todo.pop(), None)
        src = _source(fn)
        if not src or src in seen:
            continue
        seen.add(src)
        found += re.findall(r"kwargs\.(?:get|pop)\(\s*[\"'](\w+)[\"']", src)
        for helper in re.findall(r"(?:self|cls)\.(_\w+)\(", src):
            todo.append(f"_FAISS{helper}" if helper.startswith("__") else helper)
    return list(dict.fromkeys(found))


@dataclass
class Call:
    """One call as a FAISS user writes it: ``label`` names it in the README table."""

    label: str
    method: str
    args: list[str] = field(default_factory=list)  # parameter names passed positionally
    kwargs: list[str] = field(default_factory=list)  # parameter names passed by keyword
    variant: dict[str, str] = field(default_factory=dict)  # values of enumerated arguments


def calls_of(name: str) -> list[Call]:
    sig = inspect.signature(getattr(FAISS, name))
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    plain = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p.name for p in plain if p.default is p.empty]
    positional = [p.name for p in plain if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required_pos = [n for n in required if n in positional]
    required_kw = [n for n in required if n not in positional]
    optional = [p.name for p in plain if p.default is not p.empty]
    extra = [k for k in hidden_kwargs(name) if k not in optional and k not in required]
    out = [Call(f"{name}()", name, required_pos, required_kw)]
    if [n for n in positional if n not in required]:
        out.append(Call(f"{name}(positional)", name, positional, required_kw))
    for opt in [*optional, *extra]:
        out.append(Call(f"{name}({opt}=)", name, required_pos, [*required_kw, opt]))
    if name == "__init__":  # FAISS's docs also call it by keyword
        out.append(Call("__init__(keywords)", name, [], required))
    expanded = []
    for call in out:
        # the argument a call is about (its keyword, else the first) takes each value, others their first
        listed = [a for a in [*call.args, *call.kwargs] if enumerated_values(a)]
        if not listed:
            expanded.append(call)
            continue
        focus = call.kwargs[-1] if call.kwargs and call.kwargs[-1] in listed else listed[0]
        rest = {a: enumerated_values(a)[0] for a in listed if a != focus}
        expanded += [
            Call(f"{call.label} @{v}", call.method, call.args, call.kwargs, {focus: v, **rest})
            for v in enumerated_values(focus)
        ]
    return expanded


def enumerated_values(arg: str) -> list[str]:
    """Arguments with a fixed set of values, each tried: read from LangChain now."""
    if arg == "distance_strategy":
        return [s.name for s in DistanceStrategy]
    if arg == "search_type":
        return list(VectorStoreRetriever.allowed_search_types)
    if arg == "index":
        return ["IndexFlatL2", "IndexFlatIP", "IndexHNSWFlat", "IndexIVFFlat"]
    return []


CLASS_LEVEL = {"from_texts", "afrom_texts", "from_documents", "afrom_documents", "from_embeddings"}
CLASS_LEVEL |= {"afrom_embeddings", "load_local", "deserialize_from_bytes", "__init__"}


def value(call: Call, arg: str, cls: type, store: Any, tmp: Path) -> Any:
    """The value a FAISS user passes for ``arg`` of ``call.method``; a new argument fails here."""
    m = call.method
    new_texts = ["new a", "new b"]
    if arg == "query":
        return "query 0"
    if arg == "embedding":
        return EMB if m in CLASS_LEVEL else EMB.embed_query("query 0")
    if arg in ("embeddings", "embedding_function"):
        return EMB
    simple = {"k": 3, "fetch_k": 8, "filter": {"group": 1}, "lambda_mult": 0.25, "score_threshold": 0.5}
    simple |= {"allow_dangerous_deserialization": True, "io_flags": 0, "index_name": "idx"}
    simple |= {
        "normalize_L2": True,
        "tags": ["t"],
        "docstore": InMemoryDocstore(),
        "index_to_docstore_id": {},
    }
    if arg in simple:
        return simple[arg]
    if arg == "relevance_score_fn":
        return lambda d: 1.0 - d / 2.0  # a FAISS user's own map from L2^2 distance to relevance
    if arg == "distance_strategy":
        return DistanceStrategy[call.variant[arg]]
    if arg == "search_type":
        return call.variant[arg]
    if arg == "index":
        return {
            "IndexFlatL2": lambda: faiss.IndexFlatL2(DIM),
            "IndexFlatIP": lambda: faiss.IndexFlatIP(DIM),
            "IndexHNSWFlat": lambda: faiss.IndexHNSWFlat(DIM, 16),
            "IndexIVFFlat": lambda: faiss.IndexIVFFlat(faiss.IndexFlatL2(DIM), DIM, 4),
        }[call.variant[arg]]()
    if arg == "texts":
        return new_texts
    if arg == "metadatas":
        return [{"group": 1}, {"group": 2}]
    if arg == "ids":
        if m in ("delete", "adelete"):
            return ["0", "1"]
        if m in ("get_by_ids", "aget_by_ids"):
            return ["1", "missing", "0"]
        return ["na", "nb"]
    if arg == "documents":
        return [Document(id=f"n{i}", page_content=t, metadata={"group": i}) for i, t in enumerate(new_texts)]
    if arg == "text_embeddings":
        return [(t, EMB.embed_query(t)) for t in new_texts]
    if arg == "target":
        return cls.from_texts(new_texts, EMB, ids=["na", "nb"])
    if arg == "folder_path":
        folder = tmp / "saved"
        if m == "load_local":  # what this store itself saved
            build(cls).save_local(str(folder), "idx")
            build(cls).save_local(str(folder), "index")
        return str(folder)
    if arg == "serialized":
        return build(FAISS).serialize_to_bytes()  # a FAISS user's bytes
    raise AssertionError(f"no FAISS-user value for {m}({arg}=): add one to this test")


UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def summary(x: Any) -> Any:
    """A comparable form of a result (scores to 4 decimals, stores by their contents, fresh
    uuid4 ids as one placeholder: both stores make them when no ids are given)."""
    if isinstance(x, str) and UUID.match(x):
        return "<uuid4>"
    if isinstance(x, Document):
        return ("doc", summary(str(x.id)), x.page_content, json.dumps(x.metadata, sort_keys=True))
    if isinstance(x, tuple):
        return tuple(summary(v) for v in x)
    if isinstance(x, list):
        return [summary(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return round(float(x), 4)
    if isinstance(x, VectorStore):
        return ("store", state(x))
    if isinstance(x, VectorStoreRetriever):
        return ("retriever", summary(x.invoke("query 0")))
    if isinstance(x, (bytes, bytearray)):
        return "bytes"
    if callable(x):
        return "callable"
    return x


def state(store: Any) -> Any:
    """What a FAISS user sees of a store: its ids (in order) and the top 5 of a query."""
    ids = [summary(str(i)) for i in store.index_to_docstore_id.values()]
    top = [summary(str(d.id)) for d in store.similarity_search("query 0", k=5)] if ids else []
    return ids, top


def run_call(call: Call, cls: type, tmp: Path) -> tuple[str, Any]:
    """("ok", summary) or ("raised", exception)."""
    tmp.mkdir(parents=True, exist_ok=True)
    store = None if call.method in CLASS_LEVEL else build(cls)
    args = [value(call, a, cls, store, tmp) for a in call.args]
    kwargs = {a: value(call, a, cls, store, tmp) for a in call.kwargs}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if call.method == "__init__":
                made = cls(*args, **kwargs)
                made.add_texts(TEXTS, METAS, IDS)
                return "ok", ("store", state(made))
            target = cls if store is None else store
            out = getattr(target, call.method)(*args, **kwargs)
            if inspect.isawaitable(out):
                out = asyncio.run(out)
            if call.method in ("save_local",):
                out = summary(cls.load_local(str(tmp / "saved"), EMB, *args[1:], allow_dangerous_deserialization=True, **kwargs))  # fmt: skip
            return "ok", (summary(out), None if store is None else state(store))
    except Exception as e:  # classified below
        return "raised", e


def retriever_calls() -> list[Call]:
    return [
        Call(f"as_retriever(search_type={t}).{how}", "as_retriever", variant={"search_type": t})
        for t in VectorStoreRetriever.allowed_search_types
        for how in ("invoke", "ainvoke")
    ]


def run_retriever(call: Call, cls: type) -> tuple[str, Any]:
    search_kwargs: dict[str, Any] = {"k": 3, "filter": {"group": 1}}
    search_type = call.variant["search_type"]
    if search_type == "similarity_score_threshold":
        search_kwargs["score_threshold"] = 0.3
    if search_type == "mmr":
        search_kwargs |= {"fetch_k": 8, "lambda_mult": 0.25}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            retriever = build(cls).as_retriever(search_type=search_type, search_kwargs=search_kwargs)
            if call.label.endswith("ainvoke"):
                return "ok", summary(asyncio.run(retriever.ainvoke("query 0")))
            return "ok", summary(retriever.invoke("query 0"))
    except Exception as e:
        return "raised", e


def _flow_existing_id(cls: type) -> Any:
    store = build(cls)
    store.add_texts(["new a"], ids=["0"])
    return state(store)


def _flow_unknown_id(cls: type) -> Any:
    store = build(cls)
    store.delete(ids=["0", "no such id"])
    return state(store)


def _flow_ties(cls: type) -> Any:
    store = cls.from_texts(["foo", "foo", "bar", "foo", "foo"], EMB, ids=["1", "2", "3", "4", "5"])
    return [[d.id for d in store.similarity_search("foo", k=k)] for k in (1, 2, 3)]


def _flow_int_ids(cls: type) -> Any:
    store = cls.from_texts(["doc 1", "doc 2", "doc 3"], EMB, ids=[1, 2, 3])
    store.delete(ids=[1])
    return summary(store.get_by_ids([2, 3]))


def _flow_docstore_edit(cls: type) -> Any:
    store = build(cls)
    store.docstore.search("5").metadata["group"] = 99
    return summary(store.similarity_search("query 0", k=3, filter={"group": 99}))


def _flow_ties_on(kind: str) -> Any:
    """Ties on a store built on each empty FAISS index a user may pass (FAISS's docs' form)."""

    def flow(cls: type) -> Any:
        index = {
            "IndexFlatL2": lambda: faiss.IndexFlatL2(DIM),
            "IndexFlatIP": lambda: faiss.IndexFlatIP(DIM),
            "IndexHNSWFlat": lambda: faiss.IndexHNSWFlat(DIM, 16),
        }[kind]()
        store = cls(EMB, index, InMemoryDocstore(), {})
        texts = [("foo" if i in (0, 3, 7) else f"other {i}") for i in range(10)]
        store.add_texts(texts, ids=[f"id{i}" for i in range(10)])
        return [d.id for d in store.similarity_search("foo", k=3)]

    return flow


def _edge(call: Any) -> Any:
    """An edge argument on the built store: the result and what the store then holds."""

    def flow(cls: type) -> Any:
        store = build(cls)
        out = call(store, cls)
        if inspect.isawaitable(out):
            out = asyncio.run(out)
        return summary(out), state(store)

    return flow


def _docs_with_and_without_id(store: Any, cls: type) -> Any:
    store.add_documents([Document(id="with", page_content="new a"), Document(page_content="new b")])
    return sorted(str(i) for i in store.index_to_docstore_id.values())[-3:]


#: What users do that no single signature shows: the README's prose claims, checked here.
FLOWS = {
    "flow add_texts(an existing id)": _flow_existing_id,
    "flow delete(an unknown id)": _flow_unknown_id,
    "flow ties in insertion order": _flow_ties,
    "flow int ids through delete and get_by_ids": _flow_int_ids,
    "flow docstore metadata edit, then filter": _flow_docstore_edit,
}
FLOWS |= {
    f"flow ties @{kind}": _flow_ties_on(kind) for kind in ("IndexFlatL2", "IndexFlatIP", "IndexHNSWFlat")
}
#: Edge arguments: empty lists, duplicates, k <= 0, None metadata, missing ids.
EDGES = {
    "similarity_search(k=0)": lambda s, c: s.similarity_search("query 0", k=0),
    "similarity_search(k=-1)": lambda s, c: s.similarity_search("query 0", k=-1),
    "similarity_search(k > len)": lambda s, c: s.similarity_search("query 0", k=N + 5),
    "similarity_search_with_score(k=0)": lambda s, c: s.similarity_search_with_score("query 0", k=0),
    "max_marginal_relevance_search(k=0)": lambda s, c: s.max_marginal_relevance_search("query 0", k=0),
    "max_marginal_relevance_search(fetch_k < k)": lambda s, c: s.max_marginal_relevance_search(
        "query 0", k=5, fetch_k=2
    ),
    "asimilarity_search(k=0)": lambda s, c: s.asimilarity_search("query 0", k=0),
    "add_texts(no texts)": lambda s, c: s.add_texts([]),
    "add_texts(no texts, ids=)": lambda s, c: s.add_texts([], ids=[]),
    "add_documents(no documents)": lambda s, c: s.add_documents([]),
    "aadd_texts(no texts)": lambda s, c: s.aadd_texts([]),
    "add_texts(duplicate ids)": lambda s, c: s.add_texts(["new a", "new b"], ids=["x", "x"]),
    "add_texts(a None metadata)": lambda s, c: s.add_texts(["new a"], metadatas=[None]),
    "add_texts(fewer metadatas)": lambda s, c: s.add_texts(["new a", "new b"], metadatas=[{}]),
    "add_documents(a Document without id)": _docs_with_and_without_id,
    "from_texts(no texts)": lambda s, c: c.from_texts([], EMB),
    "from_documents(no documents)": lambda s, c: c.from_documents([], EMB),
    "delete(no ids)": lambda s, c: s.delete([]),
    "delete(duplicate ids)": lambda s, c: s.delete(["0", "0"]),
    "adelete(no ids)": lambda s, c: s.adelete([]),
    "get_by_ids(no ids)": lambda s, c: s.get_by_ids([]),
    "get_by_ids(duplicate ids)": lambda s, c: s.get_by_ids(["1", "1"]),
    "docstore.add": lambda s, c: s.docstore.add({"z": Document(id="z", page_content="z")}),
    "docstore.delete": lambda s, c: s.docstore.delete(["0"]),
    "docstore.search(a missing id)": lambda s, c: s.docstore.search("missing"),
    "similarity_search(an empty filter)": lambda s, c: s.similarity_search("query 0", k=3, filter={}),
}
FLOWS |= {f"edge {label}": _edge(call) for label, call in EDGES.items()}


def run_flow(fn: Any, cls: type) -> tuple[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", fn(cls)
    except Exception as e:
        return "raised", e


def attribute_names() -> list[str]:
    store = build(FAISS)
    props = [n for n in dir(FAISS) if not n.startswith("_") and isinstance(getattr(FAISS, n), property)]
    return sorted({*[n for n in vars(store) if not n.startswith("_")], *props})


def attribute_outcome(name: str, cls: type) -> tuple[str, Any]:
    try:
        got = getattr(build(cls), name)
    except Exception as e:
        return "raised", e
    if name == "docstore":
        return "ok", summary(sorted(got._dict.values(), key=lambda d: d.id))
    if name == "index_to_docstore_id":
        return "ok", {int(k): str(v) for k, v in got.items()}
    if name == "index":
        return "ok", type(got).__module__.split(".")[0]
    return "ok", summary(got)


# ---------------------------------------------------------------------- classification
def classify(theirs: tuple[str, Any], ours: tuple[str, Any]) -> str:
    """same / difference / refusal: <typed error> / untyped: <error>."""
    if ours[0] == "raised":
        err = ours[1]
        if not isinstance(err, NormrankError):
            return f"untyped: {type(err).__name__}: {err}"
        if theirs[0] == "raised" and isinstance(err, type(theirs[1])):
            return "same"  # both refuse, and FAISS's `except` catches normrank's typed error
        return f"refusal: {type(err).__name__}"
    if theirs[0] == "raised":
        return "difference"
    return "same" if theirs[1] == ours[1] else "difference"


def readme_table() -> list[tuple[str, str, str]]:
    """(pattern, kind, why) rows between the README's surface-table markers."""
    text = README.read_text()
    block = text.split("<!-- surface-table:start -->")[1].split("<!-- surface-table:end -->")[0]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


def documented(label: str, rows: list[tuple[str, str, str]]) -> tuple[str, str, str] | None:
    return next((r for r in rows if fnmatch.fnmatchcase(label, r[0])), None)


def surface_outcomes(tmp: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in public_methods():
        for call in calls_of(name):
            if call.method == "as_retriever":
                continue  # the retriever flows below
            theirs = run_call(call, FAISS, tmp / "faiss" / call.label)
            ours = run_call(call, NormRankVectorStore, tmp / "ours" / call.label)
            out[call.label] = classify(theirs, ours)
    for call in retriever_calls():
        out[call.label] = classify(run_retriever(call, FAISS), run_retriever(call, NormRankVectorStore))
    for label, fn in FLOWS.items():
        out[label] = classify(run_flow(fn, FAISS), run_flow(fn, NormRankVectorStore))
    for name in attribute_names():
        out[f"attribute {name}"] = classify(
            attribute_outcome(name, FAISS), attribute_outcome(name, NormRankVectorStore)
        )
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, str]:
    return surface_outcomes(tmp_path_factory.mktemp("surface"))


def test_the_classification_names_what_a_faiss_user_catches():
    typed = ("raised", NormrankError("x"))
    assert classify(("raised", AssertionError()), typed) == "refusal: NormrankError"
    assert classify(("raised", Exception()), typed) == "same"
    assert classify(("ok", 1), ("ok", 1)) == "same" and classify(("ok", 1), ("ok", 2)) == "difference"


def test_every_faiss_method_has_calls_here():
    labels = {c.method for name in public_methods() for c in calls_of(name)}
    assert set(public_methods()) <= labels
    assert "similarity_search_with_score_by_vector(score_threshold=)" in {
        c.label for c in calls_of("similarity_search_with_score_by_vector")
    }  # a keyword read from **kwargs is enumerated too


def test_surface_is_same_or_documented(outcomes):
    rows = readme_table()
    problems = []
    for label, kind in outcomes.items():
        row = documented(label, rows)
        if kind.startswith("untyped"):
            problems.append(f"{label}: {kind}")
        elif kind == "same":
            if row is not None:
                problems.append(f"{label}: same as FAISS, but the README lists it as {row[1]!r} ({row[0]})")
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
    assert counts["untyped"] == 0
    said = re.search(
        r"Current count: (\d+) calls, (\d+) the same, (\d+)\s+documented differences, (\d+) documented refusals",
        README.read_text(),
    )
    assert said, "the README's count sentence is missing"
    have = (len(outcomes), counts["same"], counts["difference"], counts["refusal"])
    assert tuple(int(x) for x in said.groups()) == have, f"the README's counts are stale: now {have}"


if __name__ == "__main__":  # prints every outcome, to write the README table from
    import tempfile

    warnings.simplefilter("ignore")
    for label, kind in surface_outcomes(Path(tempfile.mkdtemp())).items():
        print(f"{label:75s} {kind}")
