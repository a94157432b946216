#!/usr/bin/env python3
"""Makes a model whose heads disagree (issue 13 item 9) from a trained llama2.c checkpoint: the query
rows of each query head are multiplied by a factor, so that head's logits q·k are multiplied by it —
a head with factor 4 attends sharply to its own few tokens and has 4x the logits of the others, a head
with factor 1/2 attends diffusely. The model stays a trained one (same keys, values, FFN); only the
temperature of each head's attention changes, per head and layer.

    bench/heads_model.py IN.bin OUT.bin --loud 4            # query head 0 of every layer x4
    bench/heads_model.py IN.bin OUT.bin --spread 3 --seed 1  # every head x 3^u, u uniform in [-1, 1]

Format (llama2.c legacy v0): 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
seq_len), then f32 token_embedding [vocab, dim], rms_att [L, dim], wq [L, n_heads * head_dim, dim], ...
Only wq changes. Use with the checkpoint's tokenizer (--tokenizer tok512.bin). Deterministic."""
import argparse
import array
import random
import struct
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--loud", type=float, help="factor of query head 0 of every layer")
    ap.add_argument("--spread", type=float, help="every query head x spread^u, u uniform in [-1, 1]")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if (args.loud is None) == (args.spread is None):
        sys.exit("heads_model.py: give one of --loud and --spread")

    with open(args.src, "rb") as f:
        head = f.read(28)
        body = array.array("f")
        body.frombytes(f.read())
    dim, hidden, n_layer, n_head, n_head_kv, vocab, seq_len = struct.unpack("<7i", head)
    head_dim = dim // n_head
    wq0 = abs(vocab) * dim + n_layer * dim  # after token_embedding and rms_att
    rng = random.Random(args.seed)
    factors = []
    for il in range(n_layer):
        fl = [args.loud if h == 0 else 1.0 for h in range(n_head)] if args.loud is not None else \
             [args.spread ** rng.uniform(-1.0, 1.0) for _ in range(n_head)]
        factors.append(fl)
        for h in range(n_head):
            r0 = wq0 + il * dim * dim + h * head_dim * dim
            for i in range(r0, r0 + head_dim * dim):
                body[i] *= fl[h]
    with open(args.dst, "wb") as f:
        f.write(head)
        body.tofile(f)
    for il, fl in enumerate(factors):
        print(f"layer {il}: " + " ".join(f"{x:.3f}" for x in fl))


if __name__ == "__main__":
    main()
