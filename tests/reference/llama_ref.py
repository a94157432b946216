#!/usr/bin/python3
"""Independent float64 reference forward pass of a GGUF `llama` model, in NumPy.

Reads the GGUF file itself (its own parser, sharing nothing with the C++ reader) and prints the
logits of every position of a token sequence, one line per position, space-separated.

    llama_ref.py MODEL.gguf 1,17,42,...    > logits.txt

The model: RMSNorm; RoPE rotating adjacent pairs (2i, 2i+1) by pos*scale*base^(-2i/head_dim);
grouped-query attention with causal softmax over q.k/sqrt(head_dim); SwiGLU feed-forward;
output = output.weight (or token_embd.weight when absent) times the final RMSNorm.
"""
import struct
import sys

import numpy as np

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.d = data
        self.o = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.o:self.o + n].decode("utf-8", errors="replace")
        self.o += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("<I")
            n = self.take("<Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")


def dequant(ttype, raw, n):
    if ttype == 0:
        return np.frombuffer(raw, dtype="<f4", count=n).astype(np.float64)
    if ttype == 1:
        return np.frombuffer(raw, dtype="<f2", count=n).astype(np.float64)
    if ttype == 30:
        u = np.frombuffer(raw, dtype="<u2", count=n).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    if ttype == 8:  # Q8_0: f16 d, int8 q[32]
        b = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("q", "i1", 32)]), count=n // 32)
        return (b["d"].astype(np.float64)[:, None] * b["q"].astype(np.float64)).reshape(-1)
    if ttype == 2:  # Q4_0: f16 d, u8 qs[16]; j < 16: low nibble, j >= 16: high nibble; w = d*(nib-8)
        b = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count=n // 32)
        lo = (b["qs"] & 0x0F).astype(np.float64) - 8
        hi = (b["qs"] >> 4).astype(np.float64) - 8
        return (b["d"].astype(np.float64)[:, None] * np.concatenate([lo, hi], axis=1)).reshape(-1)
    raise ValueError(f"unsupported tensor type {ttype}")


BYTES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18)}


def load(path):
    data = open(path, "rb").read()
    r = Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.o = 4
    version = r.take("<I")
    assert version in (2, 3)
    n_tensors = r.take("<Q")
    n_kv = r.take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        ttype = r.take("<I")
        off = r.take("<Q")
        infos.append((name, ne, ttype, off))
    align = kv.get("general.alignment", 32)
    start = (r.o + align - 1) // align * align
    tensors = {}
    for name, ne, ttype, off in infos:
        n = int(np.prod(ne))
        per, nbytes = BYTES[ttype]
        raw = data[start + off:start + off + n // per * nbytes]
        tensors[name] = dequant(ttype, raw, n).reshape(list(reversed(ne)))
    return kv, tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base, scale):
    # x: [n_head, head_dim]
    hd = x.shape[-1]
    i = np.arange(hd // 2, dtype=np.float64)
    theta = pos * scale * base ** (-2.0 * i / hd)
    c, s = np.cos(theta), np.sin(theta)
    x0, x1 = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = x0 * c - x1 * s
    out[:, 1::2] = x0 * s + x1 * c
    return out


def forward(kv, t, tokens):
    n_layer = kv["llama.block_count"]
    n_head = kv["llama.attention.head_count"]
    n_head_kv = kv.get("llama.attention.head_count_kv", n_head)
    eps = kv.get("llama.attention.layer_norm_rms_epsilon", 1e-5)
    base = kv.get("llama.rope.freq_base", 10000.0)
    scale = 1.0 / kv.get("llama.rope.scaling.factor", 1.0)
    emb = t["token_embd.weight"]
    out_w = t.get("output.weight", emb)
    n_embd = emb.shape[1]
    hd = n_embd // n_head
    group = n_head // n_head_kv
    x = emb[tokens]  # [n, n_embd]
    n = len(tokens)
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], eps)
        q = h @ t[p + "attn_q.weight"].T
        k = h @ t[p + "attn_k.weight"].T
        v = h @ t[p + "attn_v.weight"].T
        q = np.stack([rope(q[i].reshape(n_head, hd), i, base, scale) for i in range(n)])       # [n, n_head, hd]
        k = np.stack([rope(k[i].reshape(n_head_kv, hd), i, base, scale) for i in range(n)])    # [n, n_head_kv, hd]
        v = v.reshape(n, n_head_kv, hd)
        att = np.zeros((n, n_head, hd))
        for hh in range(n_head):
            kh = k[:, hh // group, :]
            vh = v[:, hh // group, :]
            s = q[:, hh, :] @ kh.T / np.sqrt(hd)          # [n, n]
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            att[:, hh, :] = s @ vh
        x = x + att.reshape(n, n_embd) @ t[p + "attn_output.weight"].T
        h = rmsnorm(x, t[p + "ffn_norm.weight"], eps)
        g = h @ t[p + "ffn_gate.weight"].T
        u = h @ t[p + "ffn_up.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ t[p + "ffn_down.weight"].T
    return rmsnorm(x, t["output_norm.weight"], eps) @ out_w.T


def main():
    kv, t = load(sys.argv[1])
    tokens = [int(s) for s in sys.argv[2].split(",")]
    logits = forward(kv, t, tokens)
    for row in logits:
        print(" ".join(repr(float(v)) for v in row))


if __name__ == "__main__":
    main()
