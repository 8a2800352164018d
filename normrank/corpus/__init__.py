"""The corpus wing: collections in, embeddings cached.

BEIR-layout readers (validated as they read), the depth-collection builder, general / specific
answer pairs from WordNet and manuals, and the embedding cache that the sweep, the diagnosis and
the probe share.
"""
