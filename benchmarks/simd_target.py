"""The SIMD target a benchmark runs under, set before numpy, FAISS and numba load.

* ``native``: what each library picks on this CPU (the environment left as it is).
* ``avx2``: what a machine without AVX-512 runs: FAISS's AVX2 kernels (``FAISS_SIMD_LEVEL``
  in builds that dispatch at run time, such as faiss-cpu 1.15; ``FAISS_OPT_LEVEL`` in older
  ones that ship one library per level), numba compiling for Haswell with Haswell's features
  only (AVX2 + FMA, no AVX-512; its on-disk cache keeps code per target), OpenBLAS's Haswell
  kernels (numpy's and FAISS's).

:func:`describe` reports what each library actually runs, so that a table says which target it
measured, and :func:`check` refuses a run whose libraries ignored the request (a table labelled
AVX2 that ran AVX-512 kernels would be worse than none). Not a test; imported by ``speed.py``
and ``sweep_speed.py``. This module must not import numpy, FAISS or numba at import time.
"""

from __future__ import annotations

import os
import sys

TARGETS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "FAISS_SIMD_LEVEL": "AVX2",
        "FAISS_OPT_LEVEL": "avx2",
        "NUMBA_CPU_NAME": "haswell",
        # Empty: the features of the CPU named. Left unset, numba adds the host's features to
        # the name, and on an AVX-512 host it still emits 512-bit code for "haswell".
        "NUMBA_CPU_FEATURES": "",
        "OPENBLAS_CORETYPE": "Haswell",
    },
}


def target_from_argv(argv: list[str], default: str = "native") -> str:
    """The ``--simd`` value in ``argv`` (read before argparse runs: the environment must be set
    before the libraries load)."""
    for i, a in enumerate(argv):
        if a == "--simd" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--simd="):
            return a.split("=", 1)[1]
    return default


def apply(target: str) -> None:
    """Set the environment of ``target`` (this process and the ones it starts)."""
    if target not in TARGETS:
        raise SystemExit(f"--simd must be one of {', '.join(TARGETS)}, got {target!r}")
    if all(os.environ.get(name) == value for name, value in TARGETS[target].items()):
        return  # already set (a benchmark importing another)
    if "numpy" in sys.modules or "faiss" in sys.modules:
        raise RuntimeError("simd_target.apply must run before numpy / faiss are imported")
    os.environ.update(TARGETS[target])


def describe() -> dict:
    """What the loaded libraries run: FAISS's compile options and dispatched SIMD level,
    numba's target CPU and features, and the environment variables that chose them."""
    import faiss

    out: dict = {"faiss_compile_options": faiss.get_compile_options().strip()}
    config = getattr(faiss, "SIMDConfig", None)
    out["faiss_simd_level"] = config.get_level_name() if config is not None else None
    try:
        import llvmlite.binding as llvm
        from numba.core import config as numba_config

        out["numba_cpu"] = numba_config.CPU_NAME or llvm.get_host_cpu_name()
        features = numba_config.CPU_FEATURES
        out["numba_cpu_features"] = "host" if features is None else (features or "the CPU's own")
    except ImportError:
        out["numba_cpu"] = None
    out["env"] = {name: os.environ.get(name) for name in TARGETS["avx2"]}
    return out


def check(target: str, info: dict, blas: list[dict]) -> None:
    """Refuse to measure when a library ignored the requested target."""
    if target != "avx2":
        return
    problems = []
    level = info.get("faiss_simd_level")
    opts = info.get("faiss_compile_options", "")
    if (level is not None and level != "AVX2") or (level is None and "AVX512" in opts):
        problems.append(f"FAISS runs {level or opts!r}, not AVX2")
    if info.get("numba_cpu") is not None and (
        info["numba_cpu"] != "haswell" or info.get("numba_cpu_features") != "the CPU's own"
    ):
        problems.append(
            f"numba compiles for {info['numba_cpu']!r} with {info.get('numba_cpu_features')!r} "
            "features, not haswell's own"
        )
    kernels = {b.get("kernel") for b in blas if b.get("api") == "openblas"}
    if kernels - {"Haswell", None}:
        problems.append(f"OpenBLAS runs {sorted(k for k in kernels if k)} kernels, not Haswell")
    if problems:
        raise SystemExit("--simd avx2 was not honoured: " + "; ".join(problems))
