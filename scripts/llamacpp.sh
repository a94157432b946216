#!/usr/bin/env bash
# llama.cpp as the oracle of the tests (tests/test_llama_oracle.cpp), from the npm registry only:
#   scripts/llamacpp.sh
# fetches, with npm, the packages node-llama-cpp (llama.cpp's source as a git bundle: the headers and
# the vocabulary fixtures models/ggml-vocab-*) and @node-llama-cpp/linux-x64 (a prebuilt libllama and
# ggml CPU backends for x86-64), version $HILL_LLAMACPP_VERSION (default 3.22.1), into
# $HILL_LLAMACPP_DIR (default ${XDG_CACHE_HOME:-~/.cache}/hillinfer/llamacpp: outside the checkout,
# shared by its builds; about 100 MB, 46 MB downloaded), then compiles tests/oracle/llama_oracle.cpp
# against them (seconds) and prints the oracle's path on its last line. Fetched once; rebuilt when
# the source is newer.
# When the registry cannot be reached (or npm or git is missing, or the machine is not x86-64
# Linux), it says so, writes the reason to $HILL_LLAMACPP_DIR/unavailable.txt — the oracle tests
# then skip with that message — and exits 0. A failed compilation is an error (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."

version="${HILL_LLAMACPP_VERSION:-3.22.1}"
dir="${HILL_LLAMACPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hillinfer/llamacpp}"
mkdir -p "$dir"
rm -f "$dir/unavailable.txt"

unavailable() {
  echo "llamacpp.sh: llama.cpp oracle unavailable: $*" >&2
  echo "$*" > "$dir/unavailable.txt"
  exit 0
}

if [[ "$(uname -sm)" != "Linux x86_64" ]]; then
  unavailable "the prebuilt libllama of @node-llama-cpp/linux-x64 needs x86-64 Linux, this is $(uname -sm)"
fi

# 1. The two package tarballs (npm pack: no dependencies, no install scripts), unpacked.
if [[ "$(cat "$dir/version" 2>/dev/null)" != "$version" ]]; then
  for tool in npm git; do
    command -v "$tool" > /dev/null || unavailable "$tool is not installed (scripts/install-deps.sh --test installs it)"
  done
  rm -rf "$dir/pack" "$dir/lib" "$dir/src" "$dir/version" "$dir/llama_oracle"
  mkdir -p "$dir/pack"
  # One retry with short waits: an unreachable registry is reported in seconds, not minutes.
  npm_flags=(--loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000
             --fetch-timeout=30000)
  if ! (cd "$dir/pack" && npm pack "${npm_flags[@]}" "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version") \
      > "$dir/pack/npm.log" 2>&1; then
    unavailable "npm could not fetch node-llama-cpp@$version from $(npm config get registry)" \
                "($(grep -m 1 -i err "$dir/pack/npm.log" || tail -n 1 "$dir/pack/npm.log"))"
  fi
  tar -xzf "$dir/pack/node-llama-cpp-$version.tgz" -C "$dir/pack" package/llama/gitRelease.bundle
  mkdir -p "$dir/lib"
  tar -xzf "$dir/pack/node-llama-cpp-linux-x64-$version.tgz" -C "$dir/lib" --strip-components=3 \
      --wildcards 'package/bins/linux-x64/*.so'
  # Headers and vocabulary fixtures from the source bundle (a shallow git history).
  git clone -q --no-checkout "$dir/pack/package/llama/gitRelease.bundle" "$dir/pack/git"
  mkdir -p "$dir/src"
  git -C "$dir/pack/git" archive HEAD include ggml/include ':(glob)models/ggml-vocab-*' | tar -x -C "$dir/src"
  rm -rf "$dir/pack"
  echo "$version" > "$dir/version"
fi

# 2. The oracle, linked to the prebuilt libraries by their full names (their sonames carry the
# release, libllama.v0.5.0.so) with an rpath to them; the CPU backend variants are loaded at run time.
src=tests/oracle/llama_oracle.cpp
if [[ ! -x "$dir/llama_oracle" || "$src" -nt "$dir/llama_oracle" ]]; then
  g++ -O2 -std=c++17 -Wall -Wextra -Werror -I "$dir/src/include" -I "$dir/src/ggml/include" \
      -DORACLE_BACKEND_DIR="\"$dir/lib\"" "$src" -o "$dir/llama_oracle.tmp" \
      "$dir"/lib/libllama.v*.so "$dir"/lib/libggml.v*.so "$dir/lib/libggml-base.so" -Wl,-rpath,"$dir/lib"
  mv "$dir/llama_oracle.tmp" "$dir/llama_oracle"
fi
echo "$dir/llama_oracle"
