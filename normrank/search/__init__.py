"""The search wing: from a query and unit vectors to a top-k by ``cos * w**alpha``.

The exact flat kernel (``flat``), the ANN candidates + weight-order scan + bound (``ann``, its
options and depths from ``plan``, its stop from ``bound``, its documents in weight order from
``weight_order``, ids to positions from ``id_lookup``, its rows from ``rows`` and ``scan_codes``,
a batch's heaps from ``batch_heaps``), the Qdrant backends' share of it (``norm_band``), MMR, the
GPU flat path, and the FAISS index facts they need (``faiss_info``). No index state lives here:
the one cache (``cache.SearchCache``) is owned by a NormIndex and dropped by any change of it.

Glossary (one name per concept, as the code uses them):

* **options**: what a search was asked for (:class:`normrank.search.plan.SearchOptions`: ``k``,
  ``alpha``, ``k_factor``, ``method``, ``n_tail``, ``max_depth``, ``breadth``), built once from
  the public call (the call's values, else the index's).
* **breadth**: FAISS's own search width (HNSW ``efSearch``, IVF ``nprobe``), read from the index
  at search time (:mod:`normrank.search.faiss_info`).
* **plan**: what one search does (:class:`normrank.search.plan.SearchPlan`, only from
  :func:`~normrank.search.plan.plan_search`): its **method** (``flat``, ``cosine``, ``scan``,
  ``overfetch``), read by every later step and reported as ``SearchStats.path``, and its
  **depth** / **trust** / **band**: how many cosines are fetched, the rank whose cosine (the
  **trusted cosine**) bounds every unseen document, and the first chunk of the weight-order scan
  (``n_tail`` sets the band, ``max_depth`` caps the depth of every method, ``k_factor`` scales
  it); asked by NormIndex, the Qdrant and the Postgres backends.
* **target**: what a search reads of one index state: the FAISS index, ids, bases, removed count
  and cache (:class:`normrank.search.searcher.SearchTarget`).
* **base** and **weight**: ``base`` is the raw norm, or a custom weight (``set_weights``); the
  **weight** a search multiplies by is ``w = base**alpha`` (:func:`normrank.scoring.norm_weight`,
  cached per alpha by :class:`normrank.search.cache.SearchCache`).
* **candidates**: the ``depth`` best cosines the index returns for a query, **re-scored**
  exactly (``cos * w``).
* **position**: a document's place in storage order; its id there is
  :class:`normrank.search.doc_ids.DocIds` (nothing stored for ids ``0 .. n - 1``), an id's
  position :class:`normrank.search.id_lookup.IdLookup`.
* **weight order**: the documents by decreasing weight for one sign of alpha
  (:class:`normrank.search.weight_order.WeightOrder`, a view of one int32 argsort), with the
  caches a scan reads (weight samples, a copy of the first rows).
* **rows**: the unit vectors of documents, read where FAISS keeps them
  (:mod:`normrank.search.rows`).
* **scan**: reading documents in weight order (:mod:`normrank.search.ann`: one query's scan, and
  a batch's in doubling chunks) until the **bound** says no unseen document can beat the k-th
  score: :func:`normrank.search.bound.unseen_can_beat`, with its one floating-point margin,
  asked by every backend; how far that is: :func:`normrank.search.weight_order.scan_needed`.
* **scan codes**: int8 codes of the first rows in a weight order
  (:mod:`normrank.search.scan_codes`, a bounded cache; not FAISS's SQ / PQ codes): a single
  query's scan reads them, and the rows only of the few documents whose codes, with their error
  bound, could beat the k-th score (the same results).
* **tombstones**: ids removed from an HNSW (which cannot delete); their vectors stay in FAISS,
  searches skip them.
* **stats**: what a search did (:class:`normrank.search.plan.SearchStats`,
  ``search(..., return_stats=True)`` of NormIndex and PgVectorNormIndex).

Follow one search (one query, an HNSW index, alpha = 0.5):

1. ``NormIndex.search`` (:mod:`normrank.index.norm_index`): **options** from the call.
2. ``OneQuery.__call__`` (:mod:`normrank.search.searcher`): the query checked and made unit,
   the **breadth** read, the index state as a **target**.
3. ``plan_search`` (:mod:`normrank.search.plan`): the **plan**, method ``"scan"``.
4. ``_ann_inputs`` (:mod:`normrank.search.searcher`): the **weights** and **weight order**
   (:mod:`normrank.search.cache`, :mod:`normrank.search.weight_order`, rows from
   :mod:`normrank.search.rows`) and the **id lookup** (:mod:`normrank.search.id_lookup`).
5. ``adaptive_search`` (:mod:`normrank.search.ann`): ``depth`` **candidates** from FAISS
   (``search_raw``, :mod:`normrank.search.faiss_info`), then ``rerank``: their ids to
   **positions**, **re-scored**.
6. ``_scan_one`` (:mod:`normrank.search.ann`): the **scan** in weight order, through the **scan
   codes** (:mod:`normrank.search.scan_codes`), stopped by the **bound**
   (:mod:`normrank.search.bound`, through ``WeightOrder.need_one``).
7. ``DocIds.at`` (:mod:`normrank.search.doc_ids`): positions back to ids; the **stats** filled.

A batch takes ``search_args`` and ``search_into`` (:mod:`normrank.search.searcher`) instead of
step 2, groups its queries by alpha (one plan each), and scans in chunks (``_scan_batch``, with
:mod:`normrank.search.batch_heaps`).
"""
