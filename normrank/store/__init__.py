"""The store wing: the keyed document store both framework adapters wrap.

Texts, metadata and string ids over any backend that answers to the index interface; its checks,
and its atomic files. Nothing here knows LangChain or LlamaIndex.
"""
