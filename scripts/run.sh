#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build (Release), make the demo model,
# and generate text from it. Needs no download.
#   The demo model is a word-bigram language model that HillInfer builds by construction from a
#   short built-in story (`hillinfer make-model bigram`, see docs/models.md): a real llama GGUF
#   whose next-word logits are the story's bigram log-probabilities.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release -DHILL_BUILD_TESTS=OFF > /dev/null
cmake --build --preset release --target hillinfer_cli

bin=build/release/tools/hillinfer
model=build/models/bigram.gguf
mkdir -p build/models
[[ -f "$model" ]] || "$bin" make-model bigram -o "$model"
"$bin" info -m "$model"
echo
"$bin" generate -m "$model" -p "Once upon a time" -n 80 --temp 0.7 --seed 7 "$@"
