#!/usr/bin/env bash
# Builds and runs the test suites on a fresh machine: installs dependencies, then
#   1. Release build (warnings fatal) of the CLI, the benchmarks and the model-test executables: ctest
#      label model (tests on ../shared/data, or $HILLINFER_DATA, which skip cleanly when it is absent,
#      and the runs too long for the sanitizers), with llama.cpp as the oracle (scripts/llamacpp.sh
#      fetches it from the npm registry; its tests skip, saying why, when the registry is unreachable);
#   2. ASan+UBSan build of the unit-test executables (and the CLI they run): unit tests (every parser
#      and bad-input path runs under the sanitizers; the unit tests run here, not in Release, to keep
#      the whole script within CI's 25 minutes on 2 cores);
#   3. TSan build: the threaded tests, two at a time (thread pool, trace recorder, kernels, sessions, io queue, cold
#      pool, KV cells, and logs, the scorers and the scoring copy, policies, the storage device
#      emulator, the pipeline's hints across steps, batches of sequences, KV faults);
#   4. libFuzzer: the GGUF and safetensors readers, the server's request parsing and raw HTTP requests into
#      the server, $HILL_FUZZ_SECONDS seconds each (default 10), two at a time, from their seed corpora.
# Extra arguments go to the Release ctest run (e.g. -R golden).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's start, with the seconds since the script began (CI's budget is 25 minutes).
stage() { echo "== test.sh: $1 (${SECONDS} s elapsed)"; }
stage "install"
scripts/install-deps.sh --test
jobs=$(nproc)

stage "release build + model tests"
# llama.cpp (a download from the npm registry, mostly waiting on the network) is fetched while the
# Release build compiles; its log is printed once both are done.
llamacpp_log=$(mktemp)
scripts/llamacpp.sh > "$llamacpp_log" 2>&1 &
llamacpp_pid=$!
cmake --preset release -DHILL_WERROR=ON > /dev/null
cmake --build --preset release -j "$jobs" --target hillinfer_cli hill_benches hill_model_tests
llamacpp_rc=0
wait "$llamacpp_pid" || llamacpp_rc=$?
cat "$llamacpp_log"
rm -f "$llamacpp_log"
if [[ $llamacpp_rc -ne 0 ]]; then
  echo "scripts/llamacpp.sh failed (exit $llamacpp_rc)"
  exit "$llamacpp_rc"
fi
ctest --test-dir build/release -L model --no-tests=error --output-on-failure -j "$jobs" "$@"

stage "asan build + unit tests"
cmake --preset asan -DHILL_WERROR=ON -DHILL_SANITIZER_LINES=OFF > /dev/null
cmake --build --preset asan -j "$jobs" --target hill_unit_tests
ctest --test-dir build/asan -L unit --no-tests=error --output-on-failure -j "$jobs"

stage "tsan build + threaded tests"
cmake --preset tsan -DHILL_WERROR=ON -DHILL_SANITIZER_LINES=OFF > /dev/null
tsan_tests=(test_core test_trace test_kernels test_session test_io_queue test_cold_pool test_kv_cells test_score test_quant_copy test_policy test_csd test_hint_gate test_batch test_kv_faults)
cmake --build --preset tsan -j "$jobs" --target "${tsan_tests[@]}"
# Two suites at a time (most are single-threaded for long stretches); each one's output is printed
# whole when it ends, and the first failure stops the script.
tsan_logs=$(mktemp -d)
trap 'rm -rf "$tsan_logs"' EXIT  # also when a suite fails and the script stops
printf '%s\n' "${tsan_tests[@]}" | xargs -P 2 -I{} sh -c \
  'if build/tsan/tests/{} --gtest_brief=1 > '"$tsan_logs"'/{}.log 2>&1; then cat '"$tsan_logs"'/{}.log; else cat '"$tsan_logs"'/{}.log; echo "{} FAILED under TSan"; exit 255; fi'
rm -rf "$tsan_logs"

stage "fuzz build + fuzzing"
cmake --preset fuzz > /dev/null
cmake --build --preset fuzz -j "$jobs" --target fuzz_gguf fuzz_safetensors fuzz_api_request fuzz_http
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
fuzz_seconds="${HILL_FUZZ_SECONDS:-10}"
# fuzz TARGET [ARGS...]: TARGET from a copy of its seed corpus, its stats in $corpus/TARGET.log.
fuzz() {
  local target=$1 name=${1#fuzz_}
  shift
  mkdir "$corpus/$name"
  cp tests/fuzz/corpus/"$name"/* "$corpus/$name/"
  if build/fuzz/tests/"$target" -max_total_time="$fuzz_seconds" -print_final_stats=1 "$@" "$corpus/$name" \
      > "$corpus/$target.log" 2>&1; then
    tail -n 12 "$corpus/$target.log"
    echo "$target: no crash in $fuzz_seconds s"
  else
    cat "$corpus/$target.log"
    echo "$target FAILED"
    return 1
  fi
}
# Two at a time (each fuzzer is one thread); a finding stops the script.
fuzz_pids=()
fuzz fuzz_gguf & fuzz_pids+=($!)
fuzz fuzz_safetensors -dict=tests/fuzz/safetensors.dict & fuzz_pids+=($!)
for pid in "${fuzz_pids[@]}"; do wait "$pid"; done
fuzz_pids=()
fuzz fuzz_api_request & fuzz_pids+=($!)
fuzz fuzz_http -dict=tests/fuzz/http.dict & fuzz_pids+=($!)
for pid in "${fuzz_pids[@]}"; do wait "$pid"; done
stage "done"
