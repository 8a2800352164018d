"""The corpus wing: collections in, embeddings cached.

BEIR-layout readers (validated as they read), the depth-collection builder, and the embedding cache
that the sweep, the diagnosis and the probe share.
"""
