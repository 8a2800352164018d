"""Backends where users keep their vectors at scale: Qdrant (client and embedded Edge), Postgres.

Each answers to the same interface as :class:`normrank.NormIndex` (add, search with one alpha or one
per query, remove, norm_of, set_bases) and ranks by the same band + bound method (``normrank.search``).
"""
