"""The search wing: from a query and unit vectors to a top-k by ``cos * w**alpha``.

The exact flat kernel (``flat``), the ANN candidates + weight-order scan + bound (``ann``, its
depths from ``plan``, its stop from ``bound``, its rows from ``rows``, a batch's heaps from
``batch_heaps``), the Qdrant backends' share of it (``norm_band``), MMR, the GPU flat path, and the FAISS index facts they
need (``faiss_info``). No index state lives here: the one cache (``cache.SearchCache``) is owned by a NormIndex and dropped by any
change of it.

Glossary (one name per concept, as the code uses them):

* **weight** ``w = base**alpha``: ``base`` is the raw norm, or a custom weight
  (``set_weights``); :func:`normrank.scoring.norm_weight`.
* **options** / **plan**: a search's options (:class:`normrank.search.plan.SearchOptions`: k,
  alpha, k_factor, method, n_tail, max_depth, breadth), built once from the call, become one
  plan (:class:`~normrank.search.plan.SearchPlan`) whose ``method`` says what runs (``flat``,
  ``cosine``, ``scan``, ``overfetch``) and which every later step reads.
* **target**: what a search reads of one index state (:class:`normrank.search.searcher.SearchTarget`).
* **candidates**: the ``depth`` best cosines the index returns for a query, re-scored exactly.
* **depth** / **trust** / **band**: how many cosines are fetched, the rank whose cosine bounds
  every unseen document, and the first chunk of the weight-order scan; one rule,
  :func:`normrank.search.plan.plan_search` (``n_tail`` sets the band, ``max_depth`` caps the
  depth of every method, ``k_factor`` scales it), asked by NormIndex, the Qdrant and the Postgres backends.
* **weight order**: the documents by decreasing weight for one sign of alpha
  (:class:`normrank.search.ann.WeightOrder`, a view of one int32 argsort).
* **scan**: reading documents in weight order, rows from FAISS's own storage
  (:mod:`normrank.search.rows`), until the **bound** (trusted cosine times the next weight)
  cannot beat the k-th score: :func:`normrank.search.bound.unseen_can_beat`, with its one
  floating-point margin, asked by every backend.
* **codes**: int8 codes of the first rows in a weight order (:mod:`normrank.search.scan_codes`,
  a bounded cache): a single query's scan reads them, and the rows only of the few documents
  whose codes, with their error bound, could beat the k-th score (the same results).
* **position**: a document's place in storage order; its id there is
  :class:`normrank.search.doc_ids.DocIds` (nothing stored for ids ``0 .. n - 1``), an id's
  position :class:`normrank.search.ann.IdLookup`.
* **tombstones**: ids removed from an HNSW (which cannot delete); their vectors stay in FAISS,
  searches skip them.
* **stats**: what a search did (:class:`normrank.search.plan.SearchStats`,
  ``search(..., return_stats=True)`` of NormIndex and PgVectorNormIndex).
"""
