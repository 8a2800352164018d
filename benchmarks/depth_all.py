"""Produce the committed depth results (issue 23): depth sets built from real heading-structured
documentation that installs offline, × the four offline text models, swept with --by-depth and
the controls (the paper's Appendix C, Table 3 / Figure 6 layout).

    apt-get install -y python3-doc postgresql-doc-15 nodejs   # the corpora (nodejs ships its API docs as Markdown)
    python benchmarks/depth_all.py --encode-only              # build the sets, fill the embedding cache
    python benchmarks/depth_all.py                            # the sweeps and the reports

all-mpnet-base-v2 is slow on a shared 2-core CPU (11-33 min per 1.3-1.7k paragraphs): encode it on
the corpora there is time for (--encode-only --corpora C --models all-mpnet-base-v2) and sweep with
--only-cached, which leaves out (and reports) the pairs not encoded instead of encoding them.

Corpora (pages sampled whole with --max-pages, seed 0, so that each is ~1.3-1.7k paragraphs):
the Python 3.11 documentation (Sphinx HTML), the PostgreSQL 15 manual (DocBook HTML) and the
Node.js API documentation (Markdown). The sets are built under $NORMRANK_CACHE/depthsets (outside
the repo; deterministic), embeddings are cached under $NORMRANK_CACHE.
Writes benchmarks/results/depth/: sweep.{json,md,png}, depth.png, depth.md, depthsets.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

from normrank.settings import DEFAULT_PERMUTATIONS, cache_root

CORPORA = {  # name: (source, format, max_pages)
    "python-docs": ("/usr/share/doc/python3-doc/html", "html", 22),
    "nodejs-docs": ("/usr/share/doc/nodejs/api", "markdown", 14),
    "postgresql-docs": ("/usr/share/doc/postgresql-doc-15/html", "html", 90),
}
MODELS = ["all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2", "use-multilingual-v3", "all-mpnet-base-v2"]
ALPHAS = "-1:1:0.05"  # finer than the BEIR sweep's: the paper's Table 3 text rows sit at -0.1 / -0.3
METRICS = "ndcg@10,recall@100"
FOLDS = 5
SEED = 0
OUT = Path(__file__).resolve().parent / "results" / "depth"


def build_sets(names: list[str], root: Path) -> dict[str, dict]:
    """Build each depth set (skipped when the folder's manifest already has the same arguments)."""
    from normrank.corpus.depthset import build_depthset

    info = {}
    for name in names:
        src, fmt, pages = CORPORA[name]
        out = root / name
        manifest = out / "depthset.json"
        args = {"sources": [src], "format": fmt, "qrels": "hierarchical", "max_pages": pages, "seed": SEED,
                "min_words": 5}  # fmt: skip
        if manifest.is_file() and json.loads(manifest.read_text())["args"] == args:
            info[name] = json.loads(manifest.read_text())
            continue
        build_depthset([src], out, fmt=fmt, max_pages=pages, seed=SEED, show_progress=True)
        info[name] = json.loads(manifest.read_text())
    return info


def full_builds(names: list[str], root: Path) -> dict[str, dict]:
    """What a build of each whole corpus costs here (every page; not swept)."""
    from normrank.corpus.depthset import build_depthset

    out = {}
    for name in names:
        src, fmt, _ = CORPORA[name]
        st = build_depthset([src], root / f"{name}-full", fmt=fmt)
        out[name] = st.to_dict()
    return out


def is_cached(ds, model: str, cache) -> bool:
    """Whether the cache holds both the corpus and the judged queries of ``ds`` under ``model``
    (the same keys normrank.sweep.embed_dataset reads), without loading the model."""
    from normrank.sweep.embed import model_key

    key, (qids, qtexts) = model_key(model, None), ds.judged()
    return (
        cache.load(key, ds.doc_ids, "title+text", texts=ds.doc_texts) is not None
        and cache.load(key, qids, "text", texts=qtexts) is not None
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--sets", type=Path, default=None, help="where the depth sets are built")
    ap.add_argument(
        "--encode-only", action="store_true", help="build the sets, fill the embedding cache, stop"
    )
    ap.add_argument("--permutations", type=int, default=DEFAULT_PERMUTATIONS)
    ap.add_argument("--no-full-builds", action="store_true", help="skip timing the whole-corpus builds")
    ap.add_argument("--skip", nargs="*", default=[], metavar="CORPUS:MODEL",
                    help="pairs left out of the sweep (e.g. not encoded in the time there was); reported")  # fmt: skip
    ap.add_argument("--only-cached", action="store_true",
                    help="sweep only the pairs whose embeddings are cached (never encode); the others are reported")  # fmt: skip
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    root = args.sets or cache_root() / "depthsets"
    t = time.perf_counter()
    built = build_sets(args.corpora, root)
    build_s = time.perf_counter() - t
    print(f"depth sets built / checked in {build_s:.1f}s", flush=True)

    from normrank.corpus.beir import load_dataset
    from normrank.corpus.embedding_cache import EmbeddingCache
    from normrank.sweep import embed_dataset, run_sweep

    if args.encode_only:
        cache, encoders = EmbeddingCache(), {}
        sets = {name: load_dataset(root / name) for name in args.corpora}
        for model in args.models:  # model-major: the fast models finish every corpus first
            for name, ds in sets.items():
                qids, qtexts = ds.judged()
                t = time.perf_counter()
                embed_dataset(ds, model, cache, encoders, 32, False, None, qids, qtexts)
                print(f"{name} {model}: {len(ds.doc_ids)} paragraphs + {len(qids)} queries encoded in "
                      f"{time.perf_counter() - t:.0f}s", flush=True)  # fmt: skip
            encoders.clear()
        return 0

    from normrank.sweep.depth_report import depth_markdown
    from normrank.sweep.report import write_all

    datasets = []
    for name in args.corpora:
        ds = load_dataset(root / name)
        ds.name = name
        datasets.append(ds)
    skipped = {pair: "left out with --skip" for pair in args.skip}
    if args.only_cached:
        cache = EmbeddingCache()
        for ds in datasets:
            for m in args.models:
                if f"{ds.name}:{m}" not in skipped and not is_cached(ds, m, cache):
                    skipped[f"{ds.name}:{m}"] = "not encoded in the time there was (--only-cached)"
    for pair, why in skipped.items():
        print(f"not swept: {pair}: {why}", flush=True)
    t = time.perf_counter()
    runs = []
    for ds in datasets:
        models = [m for m in args.models if f"{ds.name}:{m}" not in skipped]
        runs += run_sweep([ds], models, alphas=ALPHAS, metrics=METRICS, folds=FOLDS, by_depth=True,
                          show_progress=True, permutations=args.permutations, seed=SEED)  # fmt: skip
    sweep_s = time.perf_counter() - t
    args.out.mkdir(parents=True, exist_ok=True)
    write_all(runs, args.out)
    (args.out / "per_query.csv").unlink()  # ~1.5 MB of per-query rows: regenerated, not committed
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"
    full = {} if args.no_full_builds else full_builds(args.corpora, root)
    meta = {
        name: {
            "source": CORPORA[name][0],
            "format": CORPORA[name][1],
            "max_pages": CORPORA[name][2],
            "seed": SEED,
            "stats": built[name]["stats"],
        }
        for name in args.corpora
    }
    (args.out / "depthsets.json").write_text(
        json.dumps(
            {"machine": machine, "sweep_s": sweep_s, "sets": meta, "full_builds": full, "skipped": skipped},
            indent=1,
        )
    )
    (args.out / "depth.md").write_text(
        depth_markdown(runs, meta, sweep_s=sweep_s, machine=machine, full=full, skipped=skipped)
    )
    print((args.out / "depth.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
