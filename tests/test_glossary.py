"""The glossary of ``normrank.search`` covers what a search runs through (issue 47): every
normrank function a traced HNSW search calls maps to one concept (:data:`MODULE_CONCEPT`, else
:data:`FUNCTION_CONCEPT`), a newcomer following one search meets at most 15 concepts, and each is
named in bold in the glossary, whose bold names are exactly the concepts the traces meet.

A function the tables do not name fails the test until someone says which concept it belongs to
(and adds that concept to the glossary if it is a new one). Nothing is excluded from the trace:
``normrank.validation`` is mapped like the rest (it checks the call's options and queries)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import numpy as np
import pytest

import normrank.search
from normrank import NormIndex

# Modules whose every function belongs to one concept.
MODULE_CONCEPT = {
    "normrank.index.norm_index": "index",
    "normrank.index.doc_table": "index",
    "normrank.index.fair_lock": "index",
    "normrank.validation": "options",
    "normrank.search.searcher": "searcher",
    "normrank.search.faiss_info": "breadth",
    "normrank.search.id_lookup": "position",
    "normrank.search.doc_ids": "position",
    "normrank.search.weight_order": "weight order",
    "normrank.search.bound": "bound",
    "normrank.search.batch_heaps": "scan",
    "normrank.search.scan_codes": "scan codes",
    "normrank.search.rows": "rows",
}

# Functions of modules that hold more than one concept (and exceptions to the table above).
# A dataclass's generated ``__init__`` is named by its class.
FUNCTION_CONCEPT = {
    ("normrank.search.searcher", "SearchTarget.__init__"): "index",
    ("normrank.search.searcher", "SearchTarget.n_stored"): "index",
    ("normrank.search.plan", "SearchOptions.__init__"): "options",
    ("normrank.search.plan", "SearchPlan.__init__"): "plan",
    ("normrank.search.plan", "plan_search"): "plan",
    ("normrank.search.plan", "_capped"): "plan",
    ("normrank.search.plan", "SearchStats.__init__"): "stats",
    ("normrank.search.plan", "SearchStats.include"): "stats",
    ("normrank.search.plan", "SearchStats.<lambda>"): "stats",  # (its per-query certificates)
    ("normrank.search.cache", "SearchCache.power"): "weight",
    ("normrank.search.cache", "SearchCache.ann_weights"): "weight",
    ("normrank.search.cache", "SearchCache._cached"): "weight",
    ("normrank.search.cache", "SearchCache._admit"): "weight",
    ("normrank.search.cache", "LazyPower.__init__"): "weight",  # (an alpha whose array does not fit)
    ("normrank.search.cache", "LazyPower.__getitem__"): "weight",
    ("normrank.search.cache", "LazyPower.take"): "weight",
    ("normrank.search.cache", "LazyPower._ends"): "weight",
    ("normrank.search.cache", "LazyPower.min"): "weight",
    ("normrank.search.cache", "LazyPower.max"): "weight",
    ("normrank.search.cache", "SearchCache.order"): "weight order",
    ("normrank.search.cache", "SearchCache.id_lookup"): "position",
    ("normrank.search.faiss_info", "search_raw"): "candidates",
    ("normrank.search.ann", "adaptive_search"): "candidates",
    ("normrank.search.ann", "_search"): "candidates",
    ("normrank.search.ann", "rerank"): "candidates",
    ("normrank.search.ann", "_rerank_one"): "candidates",
    ("normrank.search.ann", "_select"): "candidates",
    ("normrank.search.ann", "_scan_one"): "scan",
    ("normrank.search.ann", "_scan_one_loop"): "scan",
    ("normrank.search.ann", "_scan_batch"): "scan",
    ("normrank.search.ann", "_fill_short"): "scan",  # (a short IVF answer completed)
    ("normrank.search.flat", "inner_products"): "scan",
    ("normrank.search.flat", "inner_products_small"): "scan",
    ("normrank.search.flat", "_FaissProduct.__call__"): "scan",
    ("normrank.search.flat", "weighted_flat_search"): "scan",  # (the scan's limit: every row)
    ("normrank.search.flat", "weighted_lists_search"): "scan",  # (the same over an IVF-Flat's lists)
    ("normrank.search.flat", "_runs"): "scan",
    ("normrank.search.flat", "_new_heap"): "scan",
    ("normrank.search.flat", "_finish"): "scan",
    ("normrank.search.weight_order", "WeightOrder.need"): "bound",
    ("normrank.search.weight_order", "WeightOrder.need_one"): "bound",
    ("normrank.search.weight_order", "scan_needed"): "bound",
    ("normrank.search.ann", "_bound_held"): "bound",
    ("normrank.validation", "mapped_empty"): "weight order",  # (the prefix copy's memory)
}

MAX_CONCEPTS = 15


def _traced(search: Callable[[], object]) -> set[tuple[str, str]]:
    """``(module, qualname)`` of every normrank function ``search`` calls (this thread)."""
    seen: set[tuple[str, str]] = set()

    def profile(frame, event, _arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("normrank"):
            return
        name = frame.f_code.co_qualname
        if name.startswith("__create_fn__"):  # a dataclass's generated method: by its class
            name = f"{type(frame.f_locals['self']).__qualname__}.{frame.f_code.co_name}"
        seen.add((module, name))

    sys.setprofile(profile)
    try:
        search()
    finally:
        sys.setprofile(None)
    return seen


def _concept(module: str, name: str) -> str | None:
    if (module, name) in FUNCTION_CONCEPT:
        return FUNCTION_CONCEPT[(module, name)]
    return MODULE_CONCEPT.get(module)


def _concepts(functions: set[tuple[str, str]]) -> set[str]:
    unmapped = sorted(f for f in functions if _concept(*f) is None)
    assert not unmapped, f"traced functions with no concept (add them to the tables): {unmapped}"
    return {_concept(*f) for f in functions}


def _glossary_bold() -> set[str]:
    doc = normrank.search.__doc__
    glossary = doc[doc.index("Glossary") : doc.index("Follow one search")]
    return set(re.findall(r"\*\*([^*]+)\*\*", glossary))


@pytest.fixture(scope="module")
def traces():
    """Single-query traces (default options, and a first chunk deep enough for the scan codes)
    and a batch trace, each after a warm-up search (the caches built, as on a serving index)."""
    rng = np.random.default_rng(47)
    d, n = 16, 4000
    x = rng.standard_normal((n, d)).astype(np.float32)
    x *= rng.lognormal(0.0, 0.5, (n, 1)).astype(np.float32)
    q = rng.standard_normal((22, d)).astype(np.float32)
    out = {}
    for name, n_tail in (("single", None), ("deep", 2048)):
        index = NormIndex(d, factory="HNSW32", n_tail=n_tail)
        index.add(x)
        index.search(q[:1], 10, alpha=0.5)  # warm-up
        out[name] = _traced(lambda index=index: index.search(q[1:2], 10, alpha=0.5))
        out[name + "_stats"] = index.search(q[1:2], 10, alpha=0.5, return_stats=True)[2]
    index.search(q[:20], 10, alpha=0.5)  # warm-up
    # 10 queries scan in chunks; 20 on this small HNSW take the flat product (plan_search's rule).
    out["batch"] = _traced(lambda: index.search(q[2:12], 10, alpha=0.5))
    out["batch_stats"] = index.search(q[2:12], 10, alpha=0.5, return_stats=True)[2]
    out["batch"] |= _traced(lambda: index.search(q[2:22], 10, alpha=0.5))
    out["flat_stats"] = index.search(q[2:22], 10, alpha=0.5, return_stats=True)[2]
    # 20 queries on an IVF-Flat probing half its lists: the flat product over its lists.
    ivf = NormIndex(d, factory="IVF16,Flat")
    ivf.train(x)
    ivf.add(x)
    ivf.set_search_params(nprobe=8)
    ivf.search(q[:20], 10, alpha=0.5)  # warm-up
    out["batch"] |= _traced(lambda: ivf.search(q[2:22], 10, alpha=0.5))
    out["ivf_stats"] = ivf.search(q[2:22], 10, alpha=0.5, return_stats=True)[2]
    return out


def test_one_search_meets_at_most_15_concepts_all_in_the_glossary(traces):
    single = _concepts(traces["single"])
    assert traces["single_stats"].path == "scan"  # the search the glossary follows
    assert len(single) <= MAX_CONCEPTS, sorted(single)
    assert single <= _glossary_bold(), sorted(single - _glossary_bold())


def test_a_deep_scan_and_a_batch_meet_only_glossary_concepts(traces):
    # The deep single query reads the scan codes and the rows (its first chunk is >= MIN_ROWS).
    deep, batch = _concepts(traces["deep"]), _concepts(traces["batch"])
    assert {"scan codes", "rows"} <= deep
    assert traces["deep_stats"].scanned > 0
    assert (traces["batch_stats"].path, traces["flat_stats"].path, traces["ivf_stats"].path) == ("scan",) + (
        "flat",
    ) * 2
    union = _concepts(traces["single"]) | deep | batch
    assert len(union) <= MAX_CONCEPTS, sorted(union)
    # The glossary names what the traces meet, no more and no less.
    assert _glossary_bold() == union, (sorted(_glossary_bold() - union), sorted(union - _glossary_bold()))


def test_follow_one_search_names_every_module_a_search_runs_through(traces):
    doc = normrank.search.__doc__
    follow = doc[doc.index("Follow one search") :]
    modules = {m for m, _ in traces["single"] | traces["deep"] | traces["batch"]}
    missing = sorted(m for m in modules if f":mod:`{m}`" not in follow)
    assert not missing, missing
