"""The search wing: from a query and unit vectors to a top-k by ``cos * w**alpha``.

The exact flat kernel (``flat``), the ANN candidates + weight-order scan + bound (``ann``, its
options and depths from ``plan``, its stop from ``bound``, its documents in weight order from
``weight_order``, ids to positions from ``id_lookup``, its rows from ``rows`` and ``scan_codes``,
a batch's heaps from ``batch_heaps``), the searcher that runs them (``searcher``), the Qdrant
backends' share of it (``norm_band``), MMR, the GPU flat path, and the FAISS index facts they need
(``faiss_info``). No index state lives here: the one cache (``cache.SearchCache``) is owned by a
NormIndex and dropped by any change of it.

Glossary: the 14 concepts a search on an ANN index runs through (traced: tests/test_glossary.py),
one name each, as the code uses them:

* **index**: a :class:`~normrank.NormIndex`: the FAISS index of unit vectors, the doc table
  beside it (ids, norms, custom bases, tombstones: ids removed from an HNSW, whose vectors stay
  and are skipped) and the lock every search reads it under (:mod:`normrank.index`). What a
  search reads of one index state is a :class:`~normrank.search.searcher.SearchTarget`.
* **options**: what a search was asked for (:class:`normrank.search.plan.SearchOptions`: ``k``,
  ``alpha``, ``k_factor``, ``method``, ``n_tail``, ``max_depth``, ``breadth``), built once from
  the public call (the call's values, else the index's) and checked with the query
  (:mod:`normrank.validation`).
* **searcher**: runs one search from options and an index state (:mod:`normrank.search.searcher`):
  ``OneQuery`` for one float32 query, ``search_args`` + ``search_into`` for anything else (one
  plan per alpha); the two agree bit for bit.
* **breadth**: FAISS's own search width (HNSW ``efSearch``, IVF ``nprobe``), read from the index
  at search time (:mod:`normrank.search.faiss_info`).
* **plan**: what one search does (:class:`normrank.search.plan.SearchPlan`, only from
  :func:`~normrank.search.plan.plan_search`): its ``method`` (``flat``, ``cosine``, ``scan``,
  ``overfetch``), read by every later step and reported as ``SearchStats.path``; its ``depth``
  (cosines fetched: ``k_factor`` scales it, ``max_depth`` caps it for every method), its ``trust``
  (the rank whose cosine, the ``trusted_cosine``, bounds every unseen document) and its ``band``
  (the scan's first chunk, set by ``n_tail``). Asked by NormIndex, the Qdrant and the Postgres
  backends.
* **weight**: what a score multiplies the cosine by, ``w = base**alpha``; the ``base`` is the
  raw norm, or the custom base of ``NormIndex.set_bases`` (:func:`normrank.scoring.norm_weight`,
  cached per alpha by :class:`normrank.search.cache.SearchCache`, the index's search cache,
  within its budget, dropped by any change of the index; an alpha whose array does not fit is
  read lazily, :class:`~normrank.search.cache.LazyPower`).
* **weight order**: the documents by decreasing weight for one sign of alpha
  (:class:`normrank.search.weight_order.WeightOrder`; ``positions``: their storage positions in
  that order, a view of one int32 argsort), with what a scan keeps of it (weight samples, a copy
  of the first rows, the scan codes).
* **position**: a document's place in storage order. FAISS returns ids (``*_ids``), a search
  works in positions (``*_pos``): :class:`normrank.search.id_lookup.IdLookup` maps an id to its
  position, :class:`normrank.search.doc_ids.DocIds` a position to its id (nothing stored for ids
  ``0 .. n - 1``).
* **candidates**: the ``depth`` best cosines FAISS returns for a query
  (:func:`~normrank.search.faiss_info.search_raw`), re-scored exactly (``cos * w``) by
  :func:`normrank.search.ann.rerank`.
* **scan**: reading documents in weight order after the candidates (:mod:`normrank.search.ann`:
  one query's scan in blocks, a batch's in doubling chunks with
  :mod:`normrank.search.batch_heaps` and the BLAS products of :mod:`normrank.search.flat`) until
  the bound holds. Its limit, every row read, is the plan's method ``"flat"``: flat storage, or
  a batch of 20 or more on a small HNSW, where one BLAS pass over FAISS's storage costs less
  (:func:`normrank.search.flat.weighted_flat_search`; exact over the whole collection).
* **bound**: whether an unseen document can still beat the k-th score, given the
  ``trusted_cosine`` and the weights not yet scanned (:func:`normrank.search.bound.unseen_can_beat`,
  with its one floating-point margin, asked by every backend); how far a scan must read for it to
  hold: :meth:`~normrank.search.weight_order.WeightOrder.need` / ``need_one``.
* **scan codes**: int8 codes of the first rows of a weight order (:mod:`normrank.search.scan_codes`,
  a bounded cache): a single query's scan reads them first, and the rows only of the few documents
  whose codes, with their error bound, could beat the k-th score (the same results). Not FAISS's
  SQ / PQ codes, which are "FAISS codes" (:class:`normrank.search.rows.FaissCodeRows`).
* **rows**: the unit vectors of documents, read where FAISS keeps them
  (:mod:`normrank.search.rows`: flat storage in place, FAISS codes decoded, IVF lists).
* **stats**: what a search did (:class:`normrank.search.plan.SearchStats`,
  ``search(..., return_stats=True)`` of NormIndex and PgVectorNormIndex).

Follow one search (one float32 query, an HNSW index, alpha = 0.5, after a first search has built
the caches):

1. ``NormIndex.search`` (:mod:`normrank.index.norm_index`): the **stats** and the **options**
   (:mod:`normrank.search.plan`) from the call; the **index**'s lock taken
   (:mod:`normrank.index.fair_lock`).
2. ``OneQuery.__call__`` (:mod:`normrank.search.searcher`, the **searcher**): the query checked
   and made unit (:mod:`normrank.validation`), the **breadth** read
   (:mod:`normrank.search.faiss_info`).
3. ``plan_search`` (:mod:`normrank.search.plan`): the **plan**, method ``"scan"``.
4. ``_ann_inputs`` (:mod:`normrank.search.searcher`): each document's **weight**, the **weight order** and the
   id lookup, from the search cache (:mod:`normrank.search.cache`).
5. ``adaptive_search`` (:mod:`normrank.search.ann`): ``depth`` **candidates** from FAISS
   (``search_raw``, :mod:`normrank.search.faiss_info`), then ``rerank``: their ids to
   **positions** (:mod:`normrank.search.id_lookup`), re-scored.
6. ``_scan_one`` (:mod:`normrank.search.ann`): the **scan** in weight order
   (``WeightOrder.above``, :mod:`normrank.search.weight_order`), through the **scan codes**
   (:mod:`normrank.search.scan_codes`) once a block holds ``MIN_ROWS`` rows, reading **rows**
   (:mod:`normrank.search.rows`), stopped by the **bound** (``WeightOrder.need_one``,
   :mod:`normrank.search.bound`).
7. ``DocIds.at`` (:mod:`normrank.search.doc_ids`): positions back to ids.

A batch (10 queries) takes ``search_args`` and ``search_into`` (:mod:`normrank.search.searcher`)
instead of ``OneQuery``, reads the index state through the doc table
(:mod:`normrank.index.doc_table`), groups its queries by alpha (one plan each) and scans in
doubling chunks (``_scan_batch``, with :mod:`normrank.search.batch_heaps` and
:mod:`normrank.search.flat`); the **stats** of its blocks are summed. A batch of 20 on this small
index reads every row instead (plan method ``"flat"``, ``weighted_flat_search`` in
:mod:`normrank.search.flat`).
"""
