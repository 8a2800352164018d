"""The search wing: from a query and unit vectors to a top-k by ``cos * w**alpha``.

The exact flat kernel (``flat``, ``kernels``), the ANN band + bound method (``ann``, ``norm_band``,
the int8 scan), MMR, the GPU flat path, and the FAISS index facts they need. No index state lives here.
"""
