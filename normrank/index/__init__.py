"""The index wing: ``NormIndex`` and what it stands on.

The document table (ids, raw norms, weights), the state a search reads, wrapping a user's FAISS
index, and saving and loading without pickle. Searches are delegated to ``normrank.search``.
"""
