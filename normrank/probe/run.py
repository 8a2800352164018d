"""The probe as one library call: documents, pairs, subset and encoder in, a :class:`ProbeRun` out.

``normrank probe`` is this function plus :func:`normrank.probe.write_probe`; nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from normrank.errors import InvalidParameterError
from normrank.probe.estimator import ProbeResult, probe
from normrank.probe.pairs import load_pairs, read_corpus, self_pairs

__all__ = ["ProbeRun", "run_probe"]


@dataclass
class ProbeRun:
    """A finished probe: the estimates, the ids they belong to, and what was actually used."""

    result: ProbeResult
    doc_ids: list[str]
    pair_source: str
    batch_size: int  # after clamping to the number of pairs
    notes: list[str] = field(default_factory=list)  # adjustments a user should be told about


def run_probe(
    data: str | Path,
    model: str | Any,
    *,
    scope: str = "head",
    steps: int = 64,
    batch_size: int = 64,
    lr: float = 1e-3,
    temperature: float = 0.05,
    probe_docs: int = 0,
    pairs: str | Path = "auto",
    seed: int = 0,
    encode_batch_size: int = 32,
    fast_path: bool = True,
    progress: bool = False,
) -> ProbeRun:
    """Probe every document of BEIR folder ``data`` (or a seeded subset of ``probe_docs``).

    ``model``: an encoder name for :func:`normrank.encoders.load_encoder`, or a loaded encoder
    with a torch backend. ``pairs``: ``"auto"`` (the folder's train qrels, else self-pairs),
    ``"self"``, or a TSV file of ``anchor<TAB>positive``. A minibatch larger than the number of
    pairs is clamped to it (and said in ``notes``).
    """
    if probe_docs < 0:
        raise InvalidParameterError(f"probe_docs must be >= 0, got {probe_docs}")
    ids, titles, bodies, texts = read_corpus(data)
    if str(pairs) == "self":
        pair_list, pair_src = self_pairs(titles, bodies), "self-pairs"
    else:
        source = Path(data) if str(pairs) == "auto" else Path(pairs)
        pair_list, pair_src = load_pairs(source, titles=titles, texts=bodies)
    notes = []
    if batch_size > len(pair_list):
        notes.append(f"only {len(pair_list)} pairs: batch size {batch_size} -> {len(pair_list)}")
        batch_size = len(pair_list)
    if 0 < probe_docs < len(ids):
        sel = np.sort(np.random.default_rng(seed).choice(len(ids), probe_docs, replace=False))
        ids, texts = [ids[i] for i in sel], [texts[i] for i in sel]
    if isinstance(model, str):
        from normrank.encoders import load_encoder

        name, encoder = model, load_encoder(model)
    else:
        name, encoder = type(model).__name__, model
    if not hasattr(encoder, "torch_module"):
        raise InvalidParameterError(f"{name} is not a torch model; the probe needs gradients")
    result = probe(
        encoder,
        texts,
        pair_list,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        temperature=temperature,
        scope=scope,
        seed=seed,
        encode_batch_size=encode_batch_size,
        fast_path=fast_path,
        progress=progress,
    )
    return ProbeRun(result=result, doc_ids=ids, pair_source=pair_src, batch_size=batch_size, notes=notes)
