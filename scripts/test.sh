#!/usr/bin/env bash
# Builds and runs the test suites on a fresh machine: installs dependencies, then
#   1. Release build (warnings fatal): ctest labels unit and model (model tests skip cleanly when
#      ../shared/data, or $HILLINFER_DATA, is absent);
#   2. ASan+UBSan build: unit tests (every parser and bad-input path runs under the sanitizers);
#   3. TSan build: the threaded tests (thread pool, kernels, sessions, io queue, cold pool, KV store);
#   4. libFuzzer: the GGUF reader for $HILL_FUZZ_SECONDS seconds (default 60) from the seed corpus.
# Extra arguments go to the Release ctest run (e.g. -R golden).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --test
jobs=$(nproc)

cmake --preset release -DHILL_WERROR=ON > /dev/null
cmake --build --preset release -j "$jobs"
ctest --test-dir build/release -L 'unit|model' --no-tests=error --output-on-failure -j "$jobs" "$@"

cmake --preset asan -DHILL_WERROR=ON > /dev/null
cmake --build --preset asan -j "$jobs"
ctest --test-dir build/asan -L unit --no-tests=error --output-on-failure -j "$jobs"

cmake --preset tsan -DHILL_WERROR=ON > /dev/null
tsan_tests=(test_core test_kernels test_session test_io_queue test_cold_pool test_kv_store test_score test_policy)
cmake --build --preset tsan -j "$jobs" --target "${tsan_tests[@]}"
for t in "${tsan_tests[@]}"; do build/tsan/tests/$t --gtest_brief=1; done

cmake --preset fuzz > /dev/null
cmake --build --preset fuzz -j "$jobs" --target fuzz_gguf
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp tests/fuzz/corpus/gguf/* "$corpus"/
build/fuzz/tests/fuzz_gguf -max_total_time="${HILL_FUZZ_SECONDS:-60}" -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
echo "fuzz_gguf: no crash in ${HILL_FUZZ_SECONDS:-60} s"
