"""Does the norm tell a specific answer from a general one? The paper's Table 5 (Appendix D) on
real text, with length controls (issue 39).

    apt-get install -y wordnet-base python3-doc postgresql-doc-15   # the two sources
    nice -n 10 python benchmarks/specificity_pairs.py                # pairs, encodes, table

Sources: WordNet 3.0 noun synsets (question "What is a <lemma>?", the synset's gloss = specific,
its hypernym's gloss = general) and two manuals (the Python 3.11 documentation and the PostgreSQL
15 manual, built whole with ``normrank depthset build``; question = a heading path, general = the
parent heading's first paragraph, specific = the heading's first paragraph). A fixed-seed sample
of each (``--wordnet-n``, ``--manual-n``) is encoded raw by the four offline text models, with the
general answer encoded once as is and once repeated twice (the paper's protocol), and the question.
Embeddings are cached under $NORMRANK_CACHE, so a second run only recomputes the statistics.
Writes benchmarks/results/specificity/: specificity.json, specificity.md, specificity.png.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from normrank.settings import cache_root

MODELS = ["paraphrase-MiniLM-L3-v2", "use-multilingual-v3", "all-MiniLM-L6-v2", "all-mpnet-base-v2"]
LABELS = {"paraphrase-MiniLM-L3-v2": "MiniLM-L3 (ONNX)", "use-multilingual-v3": "USE-multilingual",
          "all-MiniLM-L6-v2": "MiniLM-L6", "all-mpnet-base-v2": "MPNet"}  # fmt: skip
MANUALS = {  # name: source folder (HTML)
    "python-docs": "/usr/share/doc/python3-doc/html",
    "postgresql-docs": "/usr/share/doc/postgresql-doc-15/html",
}
MANUAL_MAX_WORDS = 50  # the general paragraph repeated stays within MiniLM-L3's 128 tokens (mostly)
PAPER = {  # Table 5, encoder and CLIP rows: z, %Norm down, %Cos down (n = 1060 LLM triples)
    "MiniLM-L3": (-45.0, 93.5, 66.9), "E5-Large-v2": (-52.7, 96.1, 85.4),
    "SBERT (all-mpnet)": (-20.1, 73.2, 64.6), "BGE-M3": (-12.5, 65.1, 74.0),
    "CLIP ViT-B/32": (-6.3, 60.6, 87.1),
}  # fmt: skip
OUT = Path(__file__).resolve().parent / "results" / "specificity"
SEED = 0


def manual_sets(root: Path) -> dict[str, Path]:
    """Each manual built whole as a depth set under ``root`` (skipped when already built)."""
    from normrank.corpus.depthset import build_depthset

    out = {}
    for name, src in MANUALS.items():
        folder = root / name
        manifest = folder / "depthset.json"
        if not (manifest.is_file() and json.loads(manifest.read_text())["args"]["sources"] == [src]
                and json.loads(manifest.read_text())["args"]["max_pages"] is None):  # fmt: skip
            build_depthset([src], folder, fmt="html")
        out[name] = folder
    return out


def build_pairs(wordnet_n: int, manual_n: int) -> tuple[dict[str, list], dict[str, dict]]:
    from normrank.corpus.specificity import document_order, manual_pairs, one_per, sample_pairs, wordnet_pairs

    info: dict[str, dict] = {}
    t = time.perf_counter()
    wn, counts = wordnet_pairs()
    wn = one_per(wn, "hypernym", SEED)  # no general gloss serves two pairs
    counts = {**counts, "one per hypernym": len(wn)}
    info["wordnet"] = {"counts": counts, "sample": min(wordnet_n, len(wn)), "seed": SEED,
                       "seconds": round(time.perf_counter() - t, 1)}  # fmt: skip
    t = time.perf_counter()
    manual: list = []
    per: dict[str, dict] = {}
    for name, folder in manual_sets(cache_root() / "depthsets" / "specificity").items():
        pairs, c = manual_pairs(folder, document_order([MANUALS[name]]), max_words=MANUAL_MAX_WORDS)
        pairs = one_per(pairs, "parent_id", SEED)  # no general paragraph serves two pairs
        per[name] = {**c, "one per parent heading": len(pairs)}
        manual += pairs
    info["manuals"] = {"counts": per, "sample": min(manual_n, len(manual)), "seed": SEED,
                       "max_words": MANUAL_MAX_WORDS, "seconds": round(time.perf_counter() - t, 1)}  # fmt: skip
    return {
        "wordnet": sample_pairs(wn, wordnet_n, SEED),
        "manuals": sample_pairs(manual, manual_n, SEED),
    }, info


def repeat(text: str) -> str:
    return f"{text} {text}"  # the paper: "the general answer text is concatenated with itself"


def encode(model: str, source: str, pairs: list, only_cached: bool) -> dict[str, np.ndarray] | None:
    """Raw embeddings and token counts of every text the pairs need, from the cache or encoded."""
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.encoders import load_encoder
    from normrank.sweep import document_lengths

    roles = {
        "q": [p.question for p in pairs],
        "s": [p.specific for p in pairs],
        "g": [p.general for p in pairs],
        "g2": [repeat(p.general) for p in pairs],
    }
    texts = sorted({t for ts in roles.values() for t in ts})
    ids = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
    cache = EmbeddingCache()
    if only_cached and cache.load(model, ids, "text", texts=texts) is None:
        return None
    t = time.perf_counter()
    emb, hit = cache.get_or_encode(model, f"specificity-{source}", "texts", ids, texts,
                                   lambda: load_encoder(model), fields="text", batch_size=32,
                                   show_progress=False)  # fmt: skip
    if not hit:
        print(f"{source} {model}: {len(texts)} texts encoded in {time.perf_counter() - t:.0f}s", flush=True)
    lengths, unit = document_lengths(model, texts)
    row = {t: i for i, t in enumerate(texts)}
    out = {}
    for role, ts in roles.items():
        idx = np.array([row[t] for t in ts])
        out[role], out[f"len_{role}"] = emb[idx], lengths[idx]
    out["unit"] = unit
    return out


def run(pairs: dict[str, list], models: list[str], only_cached: bool, permutations: int) -> tuple[list, dict]:
    from normrank.sweep.specificity import specificity_table

    rows, missing = [], {}
    for model in models:  # model-major: the fast models finish both sources first
        for source, ps in pairs.items():
            e = encode(model, source, ps, only_cached)
            if e is None:
                missing[f"{source}:{model}"] = "not encoded (--only-cached)"
                continue
            kw = {"permutations": permutations, "seed": SEED}
            plain = specificity_table(e["q"], e["s"], e["g"], e["len_s"], e["len_g"], **kw)
            # Repetition against length: a text twice as long has, by the plain fit's law, its norm
            # times 2**b; the repeated general's norm against its single copy's, per pair
            ratio = np.linalg.norm(e["g2"], axis=1) / np.linalg.norm(e["g"], axis=1)
            law = np.exp(plain["fit"]["slope"] * np.log(e["len_g2"] / e["len_g"]))
            rows.append({
                "source": source, "model": model, "label": LABELS.get(model, model), "unit": e["unit"],
                "repeated": specificity_table(e["q"], e["s"], e["g2"], e["len_s"], e["len_g2"], **kw),
                "plain": plain,
                "repetition": {"median_norm_ratio": float(np.median(ratio)), "median_law_ratio": float(np.median(law)),
                               "pct_above_law": 100.0 * float(np.mean(ratio > law))},
                "deltas": {"repeated": (np.linalg.norm(e["s"], axis=1) - np.linalg.norm(e["g2"], axis=1)).tolist(),
                           "plain": (np.linalg.norm(e["s"], axis=1) - np.linalg.norm(e["g"], axis=1)).tolist()},
            })  # fmt: skip
    return rows, missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wordnet-n", type=int, default=2000)
    ap.add_argument("--manual-n", type=int, default=1000)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--permutations", type=int, default=9999)
    ap.add_argument(
        "--only-cached", action="store_true", help="never encode: table the cached pairs, list the rest"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    t0 = time.perf_counter()
    pairs, info = build_pairs(args.wordnet_n, args.manual_n)
    print(f"pairs: wordnet {len(pairs['wordnet'])}, manuals {len(pairs['manuals'])} "
          f"({time.perf_counter() - t0:.0f}s)", flush=True)  # fmt: skip
    rows, missing = run(pairs, args.models, args.only_cached, args.permutations)
    from specificity_report import write_report

    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"
    meta = {"machine": machine, "seconds": round(time.perf_counter() - t0, 1), "pairs": info,
            "missing": missing, "permutations": args.permutations, "paper": PAPER,
            "samples": {s: [p.to_dict() for p in ps[:5]] for s, ps in pairs.items()}}  # fmt: skip
    write_report(rows, meta, args.out)
    print((args.out / "specificity.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
