#!/usr/bin/env bash
# The official `openai` npm package as a client of `hillinfer serve` (tests/openai/openai_client.mjs):
#   scripts/openai_client.sh [HILLINFER]     (default: build/release/tools/hillinfer)
# installs openai@$HILL_OPENAI_VERSION (default 4) with npm into $HILL_OPENAI_DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/hillinfer/openai-npm, outside the checkout; once), makes a small chat model,
# starts the server on a free port, takes greedy references from `hillinfer generate`, and runs the
# client's checks. Exit 0: passed; 1: a check failed; 77: skipped (npm or node missing, registry
# unreachable: the reason is printed), as ctest's SKIP_RETURN_CODE.
set -euo pipefail
cd "$(dirname "$0")/.."
cli="$(realpath "${1:-build/release/tools/hillinfer}")"
version="${HILL_OPENAI_VERSION:-4}"
dir="${HILL_OPENAI_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hillinfer/openai-npm}"

skip() { echo "openai_client.sh: skipped: $*"; exit 77; }
for tool in node npm; do
  command -v "$tool" > /dev/null || skip "$tool is not installed (scripts/install-deps.sh --test installs npm)"
done
if [[ ! -f "$dir/node_modules/openai/package.json" || "$(cat "$dir/version" 2>/dev/null)" != "$version" ]]; then
  mkdir -p "$dir"
  rm -rf "$dir/node_modules" "$dir/version"
  if ! npm install --prefix "$dir" --loglevel=error --no-audit --no-fund --fetch-retries=1 \
         --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 --fetch-timeout=30000 \
         "openai@$version" > "$dir/npm.log" 2>&1; then
    skip "npm could not install openai@$version from $(npm config get registry)" \
         "($(grep -m 1 -i err "$dir/npm.log" || tail -n 1 "$dir/npm.log"))"
  fi
  echo "$version" > "$dir/version"
fi

work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill -TERM "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
"$cli" make-model random --chat-template chatml --n-embd 64 --n-ff 96 --n-layer 2 --n-head 4 --n-head-kv 2 \
       --n-ctx 4096 -o "$work/chat.gguf" > /dev/null 2>&1
"$cli" serve -m "$work/chat.gguf" --port 0 -c 512 -t 2 --api-key sk-test 2> "$work/serve.err" &
pid=$!
port=""
for _ in $(seq 1 500); do
  port="$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$work/serve.err" | grep -o '[0-9]*$' || true)"
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2> /dev/null || { cat "$work/serve.err"; exit 1; }
  sleep 0.02
done
[[ -n "$port" ]] || { echo "openai_client.sh: the server did not start"; cat "$work/serve.err"; exit 1; }

n=12
prompt="Once upon a time"
# The references: generate's text (a file each: the text may end with a newline).
ref() { "$cli" generate -m "$work/chat.gguf" -c 512 -t 2 --temp 0 -n "$n" --json "${@:2}" 2> /dev/null > "$work/$1.json"; }
ref completion -p "$prompt"
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$prompt" \
  > "$work/chat_prompt.txt"
ref chat --special -f "$work/chat_prompt.txt"

# The client beside its node_modules (ES modules resolve packages from the script's folder).
cp tests/openai/openai_client.mjs "$dir/"
HILL_BASE_URL="http://127.0.0.1:$port/v1" HILL_API_KEY=sk-test HILL_MODEL_ID=chat.gguf HILL_N="$n" HILL_PROMPT="$prompt" \
  HILL_COMPLETION_REF="$work/completion.json" HILL_CHAT_REF="$work/chat.json" \
  node "$dir/openai_client.mjs" || { cat "$work/serve.err"; exit 1; }
