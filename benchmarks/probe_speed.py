"""Probe speed per scope: measure the cost components on a subset, extrapolate to a full run.

The probe's cost is linear in its parts, so it is measured by part on ``--n-docs`` documents:

* generic path (``full``, ``last:N``):  T = n*e + M*(g + n*e)
* fast head path:                       T = P*c + M*g + n*c + n*M*t

with g one virtual gradient step (batch ``--batch-size`` pairs; for the head computed from cached
pair features), e one re-encoding per document, c one feature capture per document (also paid
once for each of the P distinct pair texts the draws use, counted as documents: an upper bound
since queries are short) and t one tail replay per document and step. The model is
checked against one real ``probe()`` call on the subset (``measured`` vs ``model``), then
extrapolated to ``--target-docs`` documents and ``--target-steps`` steps.

    python benchmarks/probe_speed.py --data ../shared/data/beir/scifact --model all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _model_time(parts: dict[str, float], n: int, m: int, pair_texts: int = 0) -> float:
    """Predicted seconds for n documents, m steps and (head) P distinct pair texts."""
    g = parts["grad_step_s"]
    if "encode_per_doc_s" in parts:
        return n * parts["encode_per_doc_s"] + m * (g + n * parts["encode_per_doc_s"])
    c = parts["capture_per_doc_s"]
    return pair_texts * c + m * g + n * c + n * m * parts["tail_per_doc_step_s"]


def _n_pair_texts(pairs: list[tuple[str, str]], steps: int, batch_size: int) -> int:
    """Distinct pair texts the probe's draws use (seed 0): each is captured once on the head path."""
    from normrank.probe import sample_batches

    draws = sample_batches(len(pairs), steps, batch_size, 0)
    return len({x for b in draws for i in b for x in pairs[i]})


def _t(fn, repeat: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data/beir/scifact")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--scopes", default="head,last:1,full")
    ap.add_argument("--n-docs", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3, help="steps of the validation probe() run")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--target-docs", type=int, default=0, help="0: all documents of --data")
    ap.add_argument("--target-steps", type=int, default=64)
    ap.add_argument("--encode-batch-size", type=int, default=32)
    ap.add_argument("--json", default="", help="write the rows to this file")
    args = ap.parse_args()

    import torch

    from normrank.encoders import load_encoder
    from normrank.probe import load_pairs, probe
    from normrank.probe.estimator import replay_model, step_gradients
    from normrank.probe.fastpath import detect_tail
    from normrank.probe.pairs import read_corpus
    from normrank.probe.scopes import resolve_scope

    _, titles, bodies, texts = read_corpus(args.data)
    pairs, _ = load_pairs(args.data, titles=titles, texts=bodies)
    rng = np.random.default_rng(0)
    sub = [texts[i] for i in np.sort(rng.choice(len(texts), args.n_docs, replace=False))]
    n_target = args.target_docs or len(texts)
    M = args.target_steps
    model = load_encoder(args.model)
    module = model.torch_module
    module.eval()
    idx = rng.choice(len(pairs), args.batch_size, replace=False)
    rows = []
    for scope in args.scopes.split(","):
        sc = resolve_scope(model, scope, sub[0])
        ids_scoped = {id(p) for _, p in sc.params}
        for p in module.parameters():
            p.requires_grad_(id(p) in ids_scoped)
        g = _t(lambda sc=sc: step_gradients(model, sc, pairs, idx, 0.05), repeat=2)
        for p in module.parameters():
            p.requires_grad_(True)
        tail = detect_tail(model, sc.head, sc.head_path or "", sub[:4]) if sc.head is not None else None
        n = len(sub)
        chunks = [sub[i : i + args.encode_batch_size] for i in range(0, n, args.encode_batch_size)]
        with torch.no_grad():
            if tail is None:
                t0 = time.perf_counter()
                for ch in chunks:
                    model.embed_tensor(ch)
                e = (time.perf_counter() - t0) / n
                parts = {"grad_step_s": g, "encode_per_doc_s": e}
            else:
                t0 = time.perf_counter()
                caches = [tail.capture(ch)[1] for ch in chunks]
                c = (time.perf_counter() - t0) / n
                dw = torch.zeros_like(sc.head.weight)
                db = None if sc.head.bias is None else torch.zeros_like(sc.head.bias)
                t0 = time.perf_counter()
                for _ in range(3):
                    for ca in caches:
                        tail.delta(ca, dw, db)
                t = (time.perf_counter() - t0) / (3 * n)
                stand_in = replay_model(model, tail, pairs, [idx], args.encode_batch_size)
                for p in module.parameters():
                    p.requires_grad_(id(p) in ids_scoped)
                with torch.enable_grad():
                    g = _t(lambda stand_in=stand_in, sc=sc: step_gradients(stand_in, sc, pairs, idx, 0.05), 2)
                for p in module.parameters():
                    p.requires_grad_(True)
                del stand_in
                parts = {
                    "grad_step_s": g,
                    "capture_per_doc_s": c,
                    "tail_per_doc_step_s": t,
                }
        t0 = time.perf_counter()
        r = probe(model, sub, pairs, steps=args.steps, batch_size=args.batch_size, scope=scope)
        measured = time.perf_counter() - t0

        fast = tail is not None
        total = _model_time(parts, n_target, M, _n_pair_texts(pairs, M, args.batch_size) if fast else 0)
        row = {
            "scope": scope,
            "path": r.settings["path"],
            "scoped_params": sc.n_params,
            **{k: round(v, 5) for k, v in parts.items()},
            "cpu_threads": torch.get_num_threads(),
            "check_n_docs": n,
            "check_steps": args.steps,
            "check_measured_s": round(measured, 2),
            "check_model_s": round(
                _model_time(
                    parts, n, args.steps, _n_pair_texts(pairs, args.steps, args.batch_size) if fast else 0
                ),
                2,
            ),
            "target_docs": n_target,
            "target_steps": M,
            "target_s": round(total, 1),
            "target_docs_per_s": round(n_target / total, 3),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
