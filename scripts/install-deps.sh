#!/usr/bin/env bash
# Installs what HillInfer needs to build, run and test, from Debian's packages. Idempotent: when
# everything is present it changes nothing and prints one line.
#   scripts/install-deps.sh          build + run dependencies
#   scripts/install-deps.sh --test   also what the tests need (GoogleTest, NumPy, clang's libFuzzer, npm
#                                    and git for llama.cpp as the oracle: scripts/llamacpp.sh)
set -euo pipefail

pkgs=(g++ cmake ninja-build pkg-config libopenblas-dev libcli11-dev nlohmann-json3-dev libfmt-dev liburing-dev
      libxxhash-dev libpcre2-dev gnuplot-nox libcpp-httplib-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(libgtest-dev python3-numpy clang libclang-rt-dev lld git)
  # npm: any install will do (Node.js from NodeSource bundles its own, which conflicts with Debian's npm
  # package); installed from Debian only when the command is missing.
  command -v npm > /dev/null 2>&1 || pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
