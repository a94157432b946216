#!/usr/bin/env python3
# Multi-turn chat against `hillinfer serve` (docs/serve.md "KV reuse"): a system message holding a long
# document, then 10 questions, each turn streamed; prints each turn's time to first token, prompt tokens and
# the prompt tokens whose KV was reused. Usage: bench/serve_turns.py PORT
import json, time, urllib.request, sys
port = int(sys.argv[1])
doc = " ".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog near the river bank." for i in range(40))
msgs = [{"role": "system", "content": "Answer questions about this document.\n" + doc}]
def ask(q):
    msgs.append({"role": "user", "content": q})
    body = json.dumps({"messages": msgs, "max_tokens": 8, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.time(); ttft = None; text = ""; usage = None
    with urllib.request.urlopen(req) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]": continue
            e = json.loads(line[6:])
            if e["choices"]:
                c = e["choices"][0]["delta"].get("content")
                if c and ttft is None: ttft = time.time() - t0
                text += c or ""
            else: usage = e["usage"]
    if ttft is None: ttft = time.time() - t0
    msgs.append({"role": "assistant", "content": text})
    return ttft, usage
for t in range(10):
    ttft, u = ask(f"Question {t}: what does paragraph {t*3} say?")
    print(f"turn {t+1}: TTFT {ttft*1000:.1f} ms, prompt {u['prompt_tokens']} tokens, cached {u['prompt_tokens_details']['cached_tokens']}")
