#!/usr/bin/python3
"""Random tiny Hugging Face checkpoints and their float64 NumPy forward pass, for every architecture.

    arch_ref.py write DIR CONFIG_JSON DTYPE SEED [SHARDS] [GGUF_PATH]
        Writes DIR/config.json and random weights under transformers' tensor names as safetensors
        (DTYPE f32 | f16 | bf16; SHARDS > 1: model-0000i-of-0000N.safetensors + the index).
        With GGUF_PATH (all but opt), also writes the same weights as a GGUF file the way
        llama.cpp's converter lays them out (llama: q/k rows permuted to adjacent pairs; qwen:
        feed_forward_length = intermediate_size; Llama 3: rope_freqs.weight), with a placeholder
        SentencePiece vocabulary.
    arch_ref.py logits DIR 1,17,42,...
        Reads DIR (its own safetensors parser) and prints the logits of every position, one line
        per position, computed in float64 as transformers' modeling code does for model_type
        llama / mistral / qwen2 / qwen3 / qwen (Qwen-1's remote code) / gemma2 / gemma3_text / phi3 /
        opt, sliding windows included.

    arch_ref.py gguf-logits FILE.gguf 1,17,42,...
        The same for a GGUF file of any of these architectures but qwen and opt (llama_ref.py's
        parser), read back into transformers' names and config as llama.cpp reads its metadata.

Shares nothing with the C++ loaders (names, layouts and formulas are written out here again).
"""
import json
import math
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------
# bf16 / safetensors


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


ST_DTYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}


def encode(a, dtype):
    """float64 array -> (raw bytes, the exact values those bytes hold as float64)."""
    if dtype == "f32":
        e = a.astype("<f4")
        return e.tobytes(), e.astype(np.float64)
    if dtype == "f16":
        e = a.astype("<f2")
        return e.tobytes(), e.astype(np.float64)
    bits = to_bf16_bits(a)
    return bits.astype("<u2").tobytes(), from_bf16_bits(bits).astype(np.float64)


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        raw, _ = encode(a, dtype)
        header[name] = {"dtype": ST_DTYPE[dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            a = from_bf16_bits(np.frombuffer(raw, dtype="<u2")).astype(np.float64)
        else:
            raise ValueError(f"{path}: {name}: dtype {dt}")
        out[name] = a.reshape(info["shape"])
    return out


def read_checkpoint(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    t = {}
    for f in files:
        t.update(read_safetensors(os.path.join(d, f)))
    return t


# ---------------------------------------------------------------------------------------------
# Random weights under transformers' names


def tensor_shapes(cfg):
    mt = cfg["model_type"]
    V, E, L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    s = []  # (name, shape, kind) kind: mat | norm | bias | embd
    if mt in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text"):
        KV = cfg.get("num_key_value_heads", H)
        D = cfg.get("head_dim", E // H)
        F = cfg["intermediate_size"]
        gemma = mt.startswith("gemma")
        norm = "gnorm" if gemma else "norm"   # Gemma's norms scale by (1 + w): w near 0
        s.append(("model.embed_tokens.weight", (V, E), "embd"))
        for i in range(L):
            p = f"model.layers.{i}."
            s += [(p + "input_layernorm.weight", (E,), norm),
                  (p + "self_attn.q_proj.weight", (H * D, E), "mat"),
                  (p + "self_attn.k_proj.weight", (KV * D, E), "mat"),
                  (p + "self_attn.v_proj.weight", (KV * D, E), "mat"),
                  (p + "self_attn.o_proj.weight", (E, H * D), "mat"),
                  (p + "post_attention_layernorm.weight", (E,), norm),
                  (p + "mlp.gate_proj.weight", (F, E), "mat"),
                  (p + "mlp.up_proj.weight", (F, E), "mat"),
                  (p + "mlp.down_proj.weight", (E, F), "mat")]
            if mt in ("qwen3", "gemma3_text"):
                s += [(p + "self_attn.q_norm.weight", (D,), norm), (p + "self_attn.k_norm.weight", (D,), norm)]
            if gemma:
                s += [(p + "pre_feedforward_layernorm.weight", (E,), norm),
                      (p + "post_feedforward_layernorm.weight", (E,), norm)]
            if mt == "qwen2":
                s += [(p + "self_attn.q_proj.bias", (H * D,), "bias"),
                      (p + "self_attn.k_proj.bias", (KV * D,), "bias"),
                      (p + "self_attn.v_proj.bias", (KV * D,), "bias")]
        s.append(("model.norm.weight", (E,), norm))
        if not cfg.get("tie_word_embeddings", gemma):
            s.append(("lm_head.weight", (V, E), "mat"))
    elif mt == "phi3":
        KV = cfg.get("num_key_value_heads", H)
        D = E // H
        F = cfg["intermediate_size"]
        s.append(("model.embed_tokens.weight", (V, E), "embd"))
        for i in range(L):
            p = f"model.layers.{i}."
            s += [(p + "input_layernorm.weight", (E,), "norm"),
                  (p + "self_attn.qkv_proj.weight", ((H + 2 * KV) * D, E), "mat"),
                  (p + "self_attn.o_proj.weight", (E, H * D), "mat"),
                  (p + "post_attention_layernorm.weight", (E,), "norm"),
                  (p + "mlp.gate_up_proj.weight", (2 * F, E), "mat"),
                  (p + "mlp.down_proj.weight", (E, F), "mat")]
        s.append(("model.norm.weight", (E,), "norm"))
        if not cfg.get("tie_word_embeddings", False):
            s.append(("lm_head.weight", (V, E), "mat"))
    elif mt == "qwen":
        F = cfg["intermediate_size"] // 2
        s.append(("transformer.wte.weight", (V, E), "embd"))
        for i in range(L):
            p = f"transformer.h.{i}."
            s += [(p + "ln_1.weight", (E,), "norm"),
                  (p + "attn.c_attn.weight", (3 * E, E), "mat"),
                  (p + "attn.c_attn.bias", (3 * E,), "bias"),
                  (p + "attn.c_proj.weight", (E, E), "mat"),
                  (p + "ln_2.weight", (E,), "norm"),
                  (p + "mlp.w1.weight", (F, E), "mat"),
                  (p + "mlp.w2.weight", (F, E), "mat"),
                  (p + "mlp.c_proj.weight", (E, F), "mat")]
        s += [("transformer.ln_f.weight", (E,), "norm"), ("lm_head.weight", (V, E), "mat")]
    elif mt == "opt":
        F, P = cfg["ffn_dim"], cfg["max_position_embeddings"]
        W = cfg.get("word_embed_proj_dim", E)
        d = "model.decoder."
        s += [(d + "embed_tokens.weight", (V, W), "embd"), (d + "embed_positions.weight", (P + 2, E), "embd")]
        if W != E:
            s += [(d + "project_in.weight", (E, W), "mat"), (d + "project_out.weight", (W, E), "mat")]
        for i in range(L):
            p = f"{d}layers.{i}."
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                s += [(p + f"self_attn.{proj}.weight", (E, E), "mat"), (p + f"self_attn.{proj}.bias", (E,), "bias")]
            for ln in ("self_attn_layer_norm", "final_layer_norm"):
                s += [(p + ln + ".weight", (E,), "norm"), (p + ln + ".bias", (E,), "bias")]
            s += [(p + "fc1.weight", (F, E), "mat"), (p + "fc1.bias", (F,), "bias"),
                  (p + "fc2.weight", (E, F), "mat"), (p + "fc2.bias", (E,), "bias")]
        if cfg.get("do_layer_norm_before", True):
            s += [(d + "final_layer_norm.weight", (E,), "norm"), (d + "final_layer_norm.bias", (E,), "bias")]
    else:
        raise ValueError(f"model_type {mt}")
    return s


def random_tensors(cfg, seed):
    rng = np.random.default_rng(seed)
    out = []
    for name, shape, kind in tensor_shapes(cfg):
        if kind == "mat":
            a = rng.uniform(-1, 1, shape) / math.sqrt(shape[1])
        elif kind == "norm":
            a = 1.0 + rng.uniform(-0.1, 0.1, shape)
        elif kind == "gnorm":
            a = rng.uniform(-0.1, 0.1, shape)
        elif kind == "bias":
            a = rng.uniform(-0.2, 0.2, shape)
        else:
            a = rng.uniform(-1, 1, shape)
        out.append((name, a))
    return out


def write_checkpoint(d, cfg, dtype, seed, shards):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors = random_tensors(cfg, seed)
    if shards <= 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
        return tensors
    per = (len(tensors) + shards - 1) // shards
    weight_map = {}
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[k * per:(k + 1) * per]
        write_safetensors(os.path.join(d, name), part, dtype)
        weight_map.update({n: name for n, _ in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
    return tensors


# ---------------------------------------------------------------------------------------------
# GGUF as llama.cpp's converter writes these architectures


def llama3_factors(cfg, hd):
    rs = cfg["rope_scaling"]
    base = cfg.get("rope_theta", 10000.0)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for i in range(hd // 2):
        freq = base ** (-2.0 * i / hd)
        wavelen = 2 * math.pi / freq
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out)


def permute_pairs(w, n_head):
    """HF rotate-half rows -> GGUF adjacent pairs: GGUF row 2j + r of a head = HF row r*hd/2 + j."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(cfg, tensors):
    mt = cfg["model_type"]
    t = dict(tensors)
    H = cfg["num_attention_heads"]
    out = []
    if mt in ("gemma2", "gemma3_text"):
        # llama.cpp's converter adds 1 to every Gemma norm (it scales by 1 + w).
        g = {k: (v + 1.0 if k.endswith("norm.weight") else v) for k, v in t.items()}
        out.append(("token_embd.weight", g["model.embed_tokens.weight"]))
        for i in range(cfg["num_hidden_layers"]):
            p, b = f"model.layers.{i}.", f"blk.{i}."
            out += [(b + "attn_norm.weight", g[p + "input_layernorm.weight"]),
                    (b + "attn_q.weight", g[p + "self_attn.q_proj.weight"]),
                    (b + "attn_k.weight", g[p + "self_attn.k_proj.weight"]),
                    (b + "attn_v.weight", g[p + "self_attn.v_proj.weight"]),
                    (b + "attn_output.weight", g[p + "self_attn.o_proj.weight"]),
                    (b + "post_attention_norm.weight", g[p + "post_attention_layernorm.weight"]),
                    (b + "ffn_norm.weight", g[p + "pre_feedforward_layernorm.weight"]),
                    (b + "ffn_gate.weight", g[p + "mlp.gate_proj.weight"]),
                    (b + "ffn_up.weight", g[p + "mlp.up_proj.weight"]),
                    (b + "ffn_down.weight", g[p + "mlp.down_proj.weight"]),
                    (b + "post_ffw_norm.weight", g[p + "post_feedforward_layernorm.weight"])]
            if mt == "gemma3_text":
                out += [(b + "attn_q_norm.weight", g[p + "self_attn.q_norm.weight"]),
                        (b + "attn_k_norm.weight", g[p + "self_attn.k_norm.weight"])]
        out.append(("output_norm.weight", g["model.norm.weight"]))
    elif mt == "phi3":
        out.append(("token_embd.weight", t["model.embed_tokens.weight"]))
        for i in range(cfg["num_hidden_layers"]):
            p, b = f"model.layers.{i}.", f"blk.{i}."
            out += [(b + "attn_norm.weight", t[p + "input_layernorm.weight"]),
                    (b + "attn_qkv.weight", t[p + "self_attn.qkv_proj.weight"]),
                    (b + "attn_output.weight", t[p + "self_attn.o_proj.weight"]),
                    (b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"]),
                    (b + "ffn_up.weight", t[p + "mlp.gate_up_proj.weight"]),
                    (b + "ffn_down.weight", t[p + "mlp.down_proj.weight"])]
        out.append(("output_norm.weight", t["model.norm.weight"]))
        if "lm_head.weight" in t:
            out.append(("output.weight", t["lm_head.weight"]))
    elif mt in ("llama", "mistral", "qwen2", "qwen3"):
        KV = cfg.get("num_key_value_heads", H)
        out.append(("token_embd.weight", t["model.embed_tokens.weight"]))
        for i in range(cfg["num_hidden_layers"]):
            p, b = f"model.layers.{i}.", f"blk.{i}."
            q, k = t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"]
            if mt in ("llama", "mistral"):
                q, k = permute_pairs(q, H), permute_pairs(k, KV)
            out += [(b + "attn_norm.weight", t[p + "input_layernorm.weight"]), (b + "attn_q.weight", q),
                    (b + "attn_k.weight", k), (b + "attn_v.weight", t[p + "self_attn.v_proj.weight"]),
                    (b + "attn_output.weight", t[p + "self_attn.o_proj.weight"]),
                    (b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"]),
                    (b + "ffn_gate.weight", t[p + "mlp.gate_proj.weight"]),
                    (b + "ffn_up.weight", t[p + "mlp.up_proj.weight"]),
                    (b + "ffn_down.weight", t[p + "mlp.down_proj.weight"])]
            if mt == "qwen2":
                out += [(b + f"attn_{x}.bias", t[p + f"self_attn.{x}_proj.bias"]) for x in "qkv"]
            if mt == "qwen3":
                out += [(b + "attn_q_norm.weight", t[p + "self_attn.q_norm.weight"]),
                        (b + "attn_k_norm.weight", t[p + "self_attn.k_norm.weight"])]
        out.append(("output_norm.weight", t["model.norm.weight"]))
        if "lm_head.weight" in t:
            out.append(("output.weight", t["lm_head.weight"]))
    elif mt == "qwen":
        out.append(("token_embd.weight", t["transformer.wte.weight"]))
        for i in range(cfg["num_hidden_layers"]):
            p, b = f"transformer.h.{i}.", f"blk.{i}."
            out += [(b + "attn_norm.weight", t[p + "ln_1.weight"]), (b + "attn_qkv.weight", t[p + "attn.c_attn.weight"]),
                    (b + "attn_qkv.bias", t[p + "attn.c_attn.bias"]), (b + "attn_output.weight", t[p + "attn.c_proj.weight"]),
                    (b + "ffn_norm.weight", t[p + "ln_2.weight"]), (b + "ffn_up.weight", t[p + "mlp.w1.weight"]),
                    (b + "ffn_gate.weight", t[p + "mlp.w2.weight"]), (b + "ffn_down.weight", t[p + "mlp.c_proj.weight"])]
        out += [("output_norm.weight", t["transformer.ln_f.weight"]), ("output.weight", t["lm_head.weight"])]
    else:
        raise ValueError(f"GGUF does not define model_type {mt}")
    return out


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, v):
    out = gguf_string(key)
    if isinstance(v, str):
        return out + struct.pack("<I", 8) + gguf_string(v)
    if isinstance(v, float):
        return out + struct.pack("<If", 6, v)
    if isinstance(v, int):
        return out + struct.pack("<II", 4, v)
    if isinstance(v, list) and isinstance(v[0], str):
        return out + struct.pack("<IIQ", 9, 8, len(v)) + b"".join(gguf_string(x) for x in v)
    if isinstance(v, list) and isinstance(v[0], float):
        return out + struct.pack("<IIQ", 9, 6, len(v)) + struct.pack(f"<{len(v)}f", *v)
    return out + struct.pack("<IIQ", 9, 5, len(v)) + struct.pack(f"<{len(v)}i", *v)


GGUF_TYPE = {"f32": 0, "f16": 1, "bf16": 30}


def write_gguf(path, cfg, tensors, dtype):
    mt = cfg["model_type"]
    arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen": "qwen", "qwen3": "qwen3",
            "gemma2": "gemma2", "gemma3_text": "gemma3", "phi3": "phi3"}[mt]
    # The values the checkpoint holds (rounded to its dtype), so that the GGUF file holds the same.
    tensors = [(n, encode(a, dtype)[1]) for n, a in tensors]
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim", E // H)
    kv = {"general.architecture": arch, "general.alignment": 32}
    a = arch + "."
    if mt == "qwen":
        kv.update({a + "context_length": cfg["seq_length"], a + "feed_forward_length": cfg["intermediate_size"],
                   a + "attention.layer_norm_rms_epsilon": float(cfg["layer_norm_epsilon"]),
                   a + "rope.freq_base": float(cfg["rotary_emb_base"])})
    else:
        kv.update({a + "context_length": cfg["max_position_embeddings"], a + "feed_forward_length": cfg["intermediate_size"],
                   a + "attention.head_count_kv": cfg.get("num_key_value_heads", H),
                   a + "attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
                   a + "rope.freq_base": float(cfg.get("rope_theta", 10000.0))})
        if hd != E // H:
            kv[a + "attention.key_length"] = hd
            kv[a + "attention.value_length"] = hd
    kv.update({a + "embedding_length": E, a + "block_count": cfg["num_hidden_layers"], a + "attention.head_count": H,
               a + "rope.dimension_count": hd})
    # Sliding windows as llama.cpp's converter writes them (gemma: the pattern is the architecture's;
    # mistral: every layer).
    if cfg.get("sliding_window") and (mt not in ("qwen2", "qwen3") or cfg.get("use_sliding_window")):
        kv[a + "attention.sliding_window"] = cfg["sliding_window"]
    if mt == "gemma2":
        kv[a + "attn_logit_softcapping"] = float(cfg["attn_logit_softcapping"])
        kv[a + "final_logit_softcapping"] = float(cfg["final_logit_softcapping"])
    if mt == "gemma3_text" and cfg.get("final_logit_softcapping"):
        kv[a + "final_logit_softcapping"] = float(cfg["final_logit_softcapping"])
    tensors = gguf_tensors(cfg, tensors)
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type"))
    if mt == "phi3" and rtype in ("longrope", "su"):
        orig = cfg["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / orig
        kv[a + "rope.scaling.attn_factor"] = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
        kv[a + "rope.scaling.original_context_length"] = orig
        tensors += [("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float64)),
                    ("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float64))]
    elif rtype == "linear":
        kv[a + "rope.scaling.type"] = "linear"
        kv[a + "rope.scaling.factor"] = float(rs["factor"])
    elif rtype == "llama3":
        tensors.append(("rope_freqs.weight", llama3_factors(cfg, hd)))
    V = cfg["vocab_size"]
    kv["tokenizer.ggml.model"] = "llama"
    kv["tokenizer.ggml.tokens"] = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)]
    kv["tokenizer.ggml.scores"] = [0.0] * V
    kv["tokenizer.ggml.token_type"] = [2, 3, 3] + [1] * (V - 3)
    infos, blobs, off = b"", [], 0
    for name, arr in tensors:
        # rope_freqs and the LongRoPE factors are f32, as llama.cpp writes them; so are Gemma's norms
        # here (1 + w of the checkpoint's w, exact in f32).
        dt = "f32" if name.startswith("rope_") or (mt.startswith("gemma") and name.endswith("norm.weight")) else dtype
        raw, _ = encode(arr, dt)
        pad = (32 - off % 32) % 32
        blobs.append(b"\0" * pad + raw)
        off += pad
        ne = list(reversed(arr.shape))
        infos += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", GGUF_TYPE[dt], off)
        off += len(raw)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(gguf_kv(k, v) for k, v in kv.items())
    head += infos
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------------------------
# float64 forward passes


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layernorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rotate_half_rope(x, inv_freq, positions):
    """x: [n, heads, hd]; transformers' apply_rotary_pos_emb: x*cos + rotate_half(x)*sin."""
    ang = np.outer(positions, inv_freq)                   # [n, hd/2]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rot * sin


def attention(q, k, v, scale, window=None, softcap=None):
    """q: [n, H, hd], k/v: [n, KV, hd]; causal softmax attention, GQA. window: query i sees only keys
    j with i - j < window (transformers' sliding-window mask); softcap: scores c*tanh(s/c)."""
    n, H, hd = q.shape
    group = H // k.shape[1]
    out = np.zeros((n, H, hd))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    mask = (j <= i) & ((i - j < window) if window else True)
    for h in range(H):
        s = q[:, h, :] @ k[:, h // group, :].T * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        s = np.where(mask, s, -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        out[:, h, :] = s @ v[:, h // group, :]
    return out.reshape(n, H * hd)


def llama_inv_freq(cfg, hd):
    base = cfg.get("rope_theta", 10000.0)
    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type"))
    if rtype == "linear":
        inv = inv / rs["factor"]            # transformers divides the positions by the factor
    elif rtype == "llama3":                 # transformers' _compute_llama3_parameters
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv


def layer_window(cfg, i):
    """The sliding window of layer i, or None, as transformers decides it per model_type."""
    mt, w = cfg["model_type"], cfg.get("sliding_window")
    if not w:
        return None
    if mt in ("qwen2", "qwen3") and not cfg.get("use_sliding_window", False):
        return None
    if "layer_types" in cfg:
        return w if cfg["layer_types"][i] == "sliding_attention" else None
    if mt == "gemma2":
        return w if i % 2 == 0 else None
    if mt == "gemma3_text":
        return w if (i + 1) % cfg.get("sliding_window_pattern", 6) != 0 else None
    if mt in ("qwen2", "qwen3"):
        return w if i >= cfg.get("max_window_layers", 0) else None
    return w if mt in ("mistral", "phi3") else None


def head_rmsnorm(x, w, eps):
    """x: [n, heads, hd]; RMSNorm over each head's hd values."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward_llama(cfg, t, tokens):
    mt = cfg["model_type"]
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", E // H)
    eps = cfg.get("rms_norm_eps", 1e-6)
    inv = llama_inv_freq(cfg, hd)
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    x = t["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, t[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ t[p + f"self_attn.{c}_proj.weight"].T for c in "qkv")
        if mt == "qwen2":
            q, k, v = (y + t[p + f"self_attn.{c}_proj.bias"] for y, c in zip((q, k, v), "qkv"))
        q, k = q.reshape(n, H, hd), k.reshape(n, KV, hd)
        if mt == "qwen3":
            q = head_rmsnorm(q, t[p + "self_attn.q_norm.weight"], eps)
            k = head_rmsnorm(k, t[p + "self_attn.k_norm.weight"], eps)
        q = rotate_half_rope(q, inv, pos)
        k = rotate_half_rope(k, inv, pos)
        a = attention(q, k, v.reshape(n, KV, hd), 1 / math.sqrt(hd), layer_window(cfg, i))
        x = x + a @ t[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, t[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ t[p + "mlp.gate_proj.weight"].T, h @ t[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "mlp.down_proj.weight"].T
    out = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return rmsnorm(x, t["model.norm.weight"], eps) @ out.T


def forward_gemma(cfg, t, tokens):
    """Gemma 2 / Gemma 3 text (transformers' modeling_gemma2 / modeling_gemma3)."""
    mt = cfg["model_type"]
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", E // H)
    eps = cfg.get("rms_norm_eps", 1e-6)
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    inv_global = llama_inv_freq(cfg, hd)
    base_local = cfg.get("rope_local_base_freq", 10000.0)
    inv_local = base_local ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)

    def norm(y, name):  # GemmaRMSNorm: x / rms * (1 + w)
        return rmsnorm(y, 1.0 + t[name], eps)

    x = t["model.embed_tokens.weight"][tokens] * math.sqrt(E)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        window = layer_window(cfg, i)
        h = norm(x, p + "input_layernorm.weight")
        q, k, v = (h @ t[p + f"self_attn.{c}_proj.weight"].T for c in "qkv")
        q, k = q.reshape(n, H, hd), k.reshape(n, KV, hd)
        if mt == "gemma3_text":
            q = head_rmsnorm(q, 1.0 + t[p + "self_attn.q_norm.weight"], eps)
            k = head_rmsnorm(k, 1.0 + t[p + "self_attn.k_norm.weight"], eps)
        inv = inv_local if (mt == "gemma3_text" and window) else inv_global
        q, k = rotate_half_rope(q, inv, pos), rotate_half_rope(k, inv, pos)
        a = attention(q, k, v.reshape(n, KV, hd), cfg["query_pre_attn_scalar"] ** -0.5, window,
                      cfg.get("attn_logit_softcapping"))
        x = x + norm(a @ t[p + "self_attn.o_proj.weight"].T, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        f = (gelu_tanh(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T))
        x = x + norm(f @ t[p + "mlp.down_proj.weight"].T, p + "post_feedforward_layernorm.weight")
    logits = norm(x, "model.norm.weight") @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T
    cap = cfg.get("final_logit_softcapping")
    return cap * np.tanh(logits / cap) if cap else logits


def forward_phi3(cfg, t, tokens):
    """Phi-3 (transformers' modeling_phi3) with LongRoPE as _compute_longrope_parameters: long
    factors when the sequence is longer than original_max_position_embeddings."""
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = E // H
    F = cfg["intermediate_size"]
    eps = cfg.get("rms_norm_eps", 1e-5)
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    inv = cfg.get("rope_theta", 10000.0) ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    mscale = 1.0
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
        orig = cfg["original_max_position_embeddings"]
        inv = inv / np.array(rs["long_factor"] if n > orig else rs["short_factor"])
        factor = cfg["max_position_embeddings"] / orig
        mscale = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
    x = t["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, t[p + "input_layernorm.weight"], eps)
        qkv = h @ t[p + "self_attn.qkv_proj.weight"].T
        q, k, v = qkv[:, :H * hd], qkv[:, H * hd:(H + KV) * hd], qkv[:, (H + KV) * hd:]
        # cos and sin times mscale: q and k each scaled by it after the rotation.
        q = rotate_half_rope(q.reshape(n, H, hd), inv, pos) * mscale
        k = rotate_half_rope(k.reshape(n, KV, hd), inv, pos) * mscale
        a = attention(q, k, v.reshape(n, KV, hd), 1 / math.sqrt(hd), layer_window(cfg, i))
        x = x + a @ t[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, t[p + "post_attention_layernorm.weight"], eps)
        gu = h @ t[p + "mlp.gate_up_proj.weight"].T
        g, u = gu[:, :F], gu[:, F:]
        x = x + (u * (g / (1 + np.exp(-g)))) @ t[p + "mlp.down_proj.weight"].T
    out = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return rmsnorm(x, t["model.norm.weight"], eps) @ out.T


def forward_qwen(cfg, t, tokens):
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = E // H
    eps = cfg["layer_norm_epsilon"]
    inv = 1.0 / cfg["rotary_emb_base"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    x = t["transformer.wte.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"transformer.h.{i}."
        h = rmsnorm(x, t[p + "ln_1.weight"], eps)
        qkv = h @ t[p + "attn.c_attn.weight"].T + t[p + "attn.c_attn.bias"]
        q, k, v = qkv[:, :E], qkv[:, E:2 * E], qkv[:, 2 * E:]
        q = rotate_half_rope(q.reshape(n, H, hd), inv, pos)
        k = rotate_half_rope(k.reshape(n, H, hd), inv, pos)
        x = x + attention(q, k, v.reshape(n, H, hd), 1 / math.sqrt(hd)) @ t[p + "attn.c_proj.weight"].T
        h = rmsnorm(x, t[p + "ln_2.weight"], eps)
        a1, a2 = h @ t[p + "mlp.w1.weight"].T, h @ t[p + "mlp.w2.weight"].T
        x = x + (a1 * (a2 / (1 + np.exp(-a2)))) @ t[p + "mlp.c_proj.weight"].T
    return rmsnorm(x, t["transformer.ln_f.weight"], eps) @ t["lm_head.weight"].T


def forward_opt(cfg, t, tokens):
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = E // H
    before = cfg.get("do_layer_norm_before", True)
    d = "model.decoder."
    n = len(tokens)
    x = t[d + "embed_tokens.weight"][tokens]
    if d + "project_in.weight" in t:
        x = x @ t[d + "project_in.weight"].T
    x = x + t[d + "embed_positions.weight"][np.arange(n) + 2]

    def ln(y, name):
        return layernorm(y, t[name + ".weight"], t[name + ".bias"], 1e-5)

    def lin(y, name):
        return y @ t[name + ".weight"].T + t[name + ".bias"]

    for i in range(cfg["num_hidden_layers"]):
        p = f"{d}layers.{i}."
        h = ln(x, p + "self_attn_layer_norm") if before else x
        q = lin(h, p + "self_attn.q_proj") * hd ** -0.5   # OPT scales q (bias included)
        k, v = lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
        a = attention(q.reshape(n, H, hd), k.reshape(n, H, hd), v.reshape(n, H, hd), 1.0)
        x = x + lin(a, p + "self_attn.out_proj")
        if not before:
            x = ln(x, p + "self_attn_layer_norm")
        h = ln(x, p + "final_layer_norm") if before else x
        x = x + lin(np.maximum(lin(h, p + "fc1"), 0.0), p + "fc2")
        if not before:
            x = ln(x, p + "final_layer_norm")
    if before and d + "final_layer_norm.weight" in t:
        x = ln(x, d + "final_layer_norm")
    if d + "project_out.weight" in t:
        x = x @ t[d + "project_out.weight"].T
    return x @ t.get("lm_head.weight", t[d + "embed_tokens.weight"]).T


# ---------------------------------------------------------------------------------------------
# A GGUF file read back as a checkpoint (the models `hillinfer make-model random --arch` writes)


def checkpoint_of_gguf(path):
    """(config, tensors under transformers' names) of a GGUF file of a llama-family architecture, as
    llama.cpp reads its metadata: the sliding window and the layers it applies to by architecture,
    Gemma 2's soft-caps (defaults 50, 30), Gemma's 1 + w norms, llama's adjacent-pair Q/K rows."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_ref
    kv, g = llama_ref.load(path)
    arch = kv["general.architecture"]
    a = arch + "."
    E, H = kv[a + "embedding_length"], kv[a + "attention.head_count"]
    KV = kv.get(a + "attention.head_count_kv", H)
    hd = kv.get(a + "attention.key_length", E // H)
    L = kv[a + "block_count"]
    w = kv.get(a + "attention.sliding_window", 0)
    mt = {"llama": "mistral" if w else "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
          "gemma3": "gemma3_text", "phi3": "phi3"}[arch]
    cfg = {"model_type": mt, "vocab_size": g["token_embd.weight"].shape[0], "hidden_size": E, "head_dim": hd,
           "num_attention_heads": H, "num_key_value_heads": KV, "num_hidden_layers": L,
           "intermediate_size": kv[a + "feed_forward_length"], "max_position_embeddings": kv[a + "context_length"],
           "rms_norm_eps": kv.get(a + "attention.layer_norm_rms_epsilon", 1e-5),
           "rope_theta": kv.get(a + "rope.freq_base", 10000.0)}
    if kv.get(a + "rope.scaling.type") == "linear":
        cfg["rope_scaling"] = {"type": "linear", "factor": kv[a + "rope.scaling.factor"]}
    if w:
        cfg["sliding_window"] = w
        cfg["use_sliding_window"] = True     # qwen2/qwen3 in GGUF: every layer
        cfg["max_window_layers"] = 0
    if mt.startswith("gemma"):
        cfg["query_pre_attn_scalar"] = hd
        if mt == "gemma2":
            cfg["attn_logit_softcapping"] = kv.get(a + "attn_logit_softcapping", 50.0)
            cfg["final_logit_softcapping"] = kv.get(a + "final_logit_softcapping", 30.0)
        else:
            cfg["final_logit_softcapping"] = kv.get(a + "final_logit_softcapping")
            cfg["rope_local_base_freq"] = kv.get(a + "rope.freq_base_swa", 10000.0)
    names = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
             "ffn_norm": "pre_feedforward_layernorm" if mt.startswith("gemma") else "post_attention_layernorm",
             "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.gate_up_proj" if mt == "phi3" else "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    t = {}
    for name, arr in g.items():
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            _, il, base, suffix = name.split(".")
            hf = f"model.layers.{il}.{names[base]}.{suffix}"
            if base in ("attn_q", "attn_k") and arch == "llama":   # adjacent pairs -> rotate-half rows
                n = H if base == "attn_q" else KV
                arr = arr.reshape(n, hd // 2, 2, *arr.shape[1:]).swapaxes(1, 2).reshape(arr.shape)
        if mt.startswith("gemma") and name.endswith("norm.weight"):
            arr = arr - 1.0                                        # transformers stores w of (1 + w)
        t[hf] = arr
    return cfg, t


def main():
    if sys.argv[1] == "write":
        d, cfg, dtype, seed = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5])
        shards = int(sys.argv[6]) if len(sys.argv) > 6 else 1
        tensors = write_checkpoint(d, cfg, dtype, seed, shards)
        if len(sys.argv) > 7:
            write_gguf(sys.argv[7], cfg, tensors, dtype)
        return
    d = sys.argv[2]
    if sys.argv[1] == "gguf-logits":
        cfg, t = checkpoint_of_gguf(d)
    else:
        cfg = json.load(open(os.path.join(d, "config.json")))
        t = read_checkpoint(d)
    tokens = [int(s) for s in sys.argv[3].split(",")]
    fwd = {"llama": forward_llama, "mistral": forward_llama, "qwen2": forward_llama, "qwen3": forward_llama,
           "qwen": forward_qwen, "gemma2": forward_gemma, "gemma3_text": forward_gemma, "phi3": forward_phi3,
           "opt": forward_opt}[cfg["model_type"]]
    for row in fwd(cfg, t, tokens):
        print(" ".join(repr(float(v)) for v in row))


if __name__ == "__main__":
    main()
