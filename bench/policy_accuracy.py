#!/usr/bin/env python3
"""Accuracy of the attention policies side by side (issue 4's table): perplexity, attention recall
and selection overlap of `hillinfer perplexity` for policy full, streaming, and hillinfer over
aggregate x select x score precision (default: {sum, max, softmax} x {layer, kv_head} x {fp16, int8,
int4}).

    bench/policy_accuracy.py --hillinfer build/release/tools/hillinfer \
        --model ../shared/data/models/gguf/stories260K.gguf \
        --text ../shared/data/text/tinystories/tinystories_validation_first1000.txt \
        [-c 512] [--chunks 40] [--alpha 0.2] [--sinks 4] [--window 16] [--json OUT] \
        [--aggregates sum,softmax] [--selects layer] [--precisions int8] [--tokenizer FILE] \
        [--kv-host-budget B --kv-dir D] [--extra "--alpha 0.08 --select kv_head --aggregate max"]

--extra adds one hillinfer row per value (its flags after the defaults; its --alpha replaces --alpha); --kv-host-budget puts the KV
beyond B on the cold pool in --kv-dir (default: 256M, all in RAM). Prints a Markdown table; --json
writes the rows."""
import argparse
import json
import subprocess
import sys


def run(args, extra):
    cmd = [args.hillinfer, "perplexity", "-m", args.model, "-f", args.text, "-c", str(args.c),
           "--chunks", str(args.chunks), "--kv-host-budget", args.kv_host_budget, "--json", "--diag"] + extra
    if args.tokenizer:
        cmd += ["--tokenizer", args.tokenizer]
    if args.kv_dir:
        cmd += ["--kv-dir", args.kv_dir]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hillinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("-c", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--alpha", type=float, default=0.2)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--json")
    ap.add_argument("--tokenizer")
    ap.add_argument("--kv-host-budget", default="256M")
    ap.add_argument("--kv-dir")
    ap.add_argument("--aggregates", default="sum,max,softmax")
    ap.add_argument("--selects", default="layer,kv_head")
    ap.add_argument("--precisions", default="fp16,int8,int4")
    ap.add_argument("--extra", action="append", default=[])
    args = ap.parse_args()

    sw = ["--sinks", str(args.sinks), "--window", str(args.window)]
    configs = [("full", ["--policy", "full"]), ("streaming", ["--policy", "streaming"] + sw)]
    for agg in args.aggregates.split(","):
        for sel in args.selects.split(","):
            for prec in args.precisions.split(","):
                configs.append((f"hillinfer {agg} {sel} {prec}",
                                ["--policy", "hillinfer", "--alpha", str(args.alpha), "--aggregate", agg,
                                 "--select", sel, "--score-precision", prec] + sw))
    for extra in args.extra:
        alpha = [] if "--alpha" in extra.split() else ["--alpha", str(args.alpha)]
        configs.append((f"hillinfer {extra}", ["--policy", "hillinfer"] + alpha + sw + extra.split()))
    rows = []
    full_ppl = None
    print(f"| policy | perplexity | vs full | recall | overlap | attended |")
    print(f"|---|---|---|---|---|---|")
    for name, extra in configs:
        j = run(args, extra)
        ppl = j["perplexity"]
        if full_ppl is None:
            full_ppl = ppl
        p = j["policy"]
        row = {"config": name, "perplexity": ppl, "vs_full": ppl / full_ppl - 1.0, "recall": p.get("recall"),
               "overlap": p.get("overlap"), "attended_share": p["attended_share"], "tokens": j["tokens"]}
        rows.append(row)
        rec = "n/a" if name == "full" else f"{row['recall']:.4f}"
        ovl = "n/a" if name == "full" else f"{row['overlap']:.4f}"
        print(f"| {name} | {ppl:.4f} | {100 * row['vs_full']:+.2f}% | {rec} | {ovl} | {100 * row['attended_share']:.1f}% |",
              flush=True)
    print(f"\n{rows[0]['tokens']} tokens, -c {args.c}, alpha {args.alpha}, sinks {args.sinks}, window {args.window}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
