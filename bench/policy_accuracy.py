#!/usr/bin/env python3
"""Accuracy of the attention policies side by side (issue 4's table): perplexity, attention recall
and selection overlap of `hillinfer perplexity` for policy full, streaming, and hillinfer over
aggregate {sum, max} x select {layer, kv_head} x score precision {fp16, int8, int4}.

    bench/policy_accuracy.py --hillinfer build/release/tools/hillinfer \
        --model ../shared/data/models/gguf/stories260K.gguf \
        --text ../shared/data/text/tinystories/tinystories_validation_first1000.txt \
        [-c 512] [--chunks 40] [--alpha 0.2] [--sinks 4] [--window 16] [--json OUT]

Prints a Markdown table; --json writes the rows."""
import argparse
import json
import subprocess
import sys


def run(args, extra):
    cmd = [args.hillinfer, "perplexity", "-m", args.model, "-f", args.text, "-c", str(args.c),
           "--chunks", str(args.chunks), "--kv-host-budget", "256M", "--json", "--diag"] + extra
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
    args = ap.parse_args()

    sw = ["--sinks", str(args.sinks), "--window", str(args.window)]
    configs = [("full", ["--policy", "full"]), ("streaming", ["--policy", "streaming"] + sw)]
    for agg in ("sum", "max"):
        for sel in ("layer", "kv_head"):
            for prec in ("fp16", "int8", "int4"):
                configs.append((f"hillinfer {agg} {sel} {prec}",
                                ["--policy", "hillinfer", "--alpha", str(args.alpha), "--aggregate", agg,
                                 "--select", sel, "--score-precision", prec] + sw))
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
