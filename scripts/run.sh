#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build (Release) and run `hillinfer demo`:
# passkey retrieval over a 32K-token context with at least 75% of the KV cache in the cold pool on
# SSD, under policy hillinfer. Needs no download: the passkey model is built by construction
# (docs/passkey.md) and cached under build/models. Extra arguments go to `hillinfer demo`
# (e.g. --ctx 8192 --depth 0.3 --seed 5).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release -DHILL_BUILD_TESTS=OFF > /dev/null
cmake --build --preset release --target hillinfer_cli

bin=build/release/tools/hillinfer
model=build/models/passkey.gguf
mkdir -p build/models
[[ -f "$model" ]] || "$bin" make-model passkey -o "$model"
"$bin" demo -m "$model" "$@"
