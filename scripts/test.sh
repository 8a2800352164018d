#!/usr/bin/env bash
# The test command: set up both environments, then run the suite (slow tests excluded;
# NORMRANK_TEST_PROFILE=full and `-m slow` run the long profiles outside CI).
# NORMRANK_SKIP_CLIP=1 leaves out the open_clip part: no .venv-clip (several GB) and its one file.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${NORMRANK_SKIP_CLIP:-0} in
  0 | "") skip_clip=0 ;;
  1) skip_clip=1 ;;
  *) echo "error: NORMRANK_SKIP_CLIP must be 1 (skip the open_clip part) or 0, not '$NORMRANK_SKIP_CLIP'" >&2; exit 2 ;;
esac
bash scripts/setup.sh
if [ "$skip_clip" = 1 ]; then
  echo "open_clip part skipped (NORMRANK_SKIP_CLIP=1): no .venv-clip, tests/models/test_clip_encoders.py not run" >&2
else
  bash scripts/setup_clip.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check normrank integrations benchmarks tests conftest.py
.venv/bin/ruff format --check normrank integrations benchmarks tests conftest.py
.venv/bin/python -m pytest -m "not slow" "$@"
# open_clip's text tower, on a tiny random model, in the environment that has torchvision.
if [ "$skip_clip" = 0 ]; then
  .venv-clip/bin/python -m pytest -p no:cacheprovider -m clip tests/models/test_clip_encoders.py "$@"
fi
# The numeric core again under other OpenBLAS kernels and thread counts (issue 29), so that an
# assertion that holds on one kernel only fails here, not on a user's machine. OPENBLAS_CORETYPE
# forces the kernel of both OpenBLAS builds in the process (numpy's, and the one faiss-cpu
# bundles, 0.3.15, which the products run on; Haswell's sums split per thread as Zen's do); a
# kernel this CPU cannot run is skipped with a line that says so, and one that did not take is an
# error. NORMRANK_KERNEL_RUNS="" skips the step.
numeric=(tests/test_kernels.py tests/test_topk.py tests/test_ann.py tests/test_quantized_scan.py
  tests/test_search_fast_path.py tests/test_sweep.py tests/test_sweep_metrics.py tests/test_sweep_null_ranks.py
  tests/test_index.py::test_search_equals_numpy_brute_force
  tests/test_index.py::test_alpha_zero_is_faiss_cosine_and_alpha_one_is_faiss_dot
  tests/test_index.py::test_per_query_alpha_equals_separate_calls)
slow_elsewhere="not planted_signal and not loads_on_its_own and not cli_help"  # end to end, import timing, CLI
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
for run in ${NORMRANK_KERNEL_RUNS-Haswell:2 Sandybridge:1}; do
  kernel=${run%:*} threads=${run#*:}
  case $kernel in Sandybridge) need=avx ;; *) need=avx2 ;; esac
  if ! grep -qw "$need" <<<"$flags"; then
    echo "kernel run $kernel skipped: no $need in /proc/cpuinfo (not an x86 Linux CPU that has it)" >&2
    continue
  fi
  got=$(OPENBLAS_CORETYPE=$kernel .venv/bin/python -c 'import faiss, numpy, threadpoolctl
libs = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
print(" ".join(sorted(("faiss" if "faiss" in i["filepath"] else "numpy") + ":" + i["architecture"] + "@" + i["version"]
                      for i in libs)))')
  if ! grep -q "faiss:$kernel@" <<<"$got"; then  # faiss-cpu's OpenBLAS: the one the products use
    echo "error: OPENBLAS_CORETYPE=$kernel did not take (OpenBLAS reports: $got)" >&2
    exit 1
  fi
  echo "kernel run: OPENBLAS_CORETYPE=$kernel, $threads thread(s); OpenBLAS kernels: $got" >&2
  # Waiting threads sleep instead of spinning (the same arithmetic): on a busy machine spinning
  # took 2x the wall time (measured 168 s against 85 s for the two-thread run, load 16 on 2 cores).
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=$kernel OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
    .venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow" -k "$slow_elsewhere" "${numeric[@]}"
done
