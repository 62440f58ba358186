#!/usr/bin/env python3
"""Writes small valid seed files for the fuzz targets (pure Python, no dependencies).

usage: make_seeds.py OUT_DIR   -> OUT_DIR/{gguf,gguf_model,npy,safetensors,jsonl,tokenizer}/seed_*
"""
import json
import os
import struct
import sys


def gguf_string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def make_gguf(tensors, metadata) -> bytes:
    """GGUF v3 with the given metadata (str->(type_code, packed bytes)) and f32/f16/q8_0 tensors."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, (vtype, payload) in metadata.items():
        out += gguf_string(key.encode()) + struct.pack("<I", vtype) + payload
    offset = 0
    blobs = []
    for name, shape, ttype, blob in tensors:
        out += gguf_string(name.encode()) + struct.pack("<I", len(shape))
        for dim in reversed(shape):
            out += struct.pack("<Q", dim)
        out += struct.pack("<IQ", ttype, offset)
        blobs.append(blob)
        offset += (len(blob) + 31) // 32 * 32
    out += b"\0" * ((-len(out)) % 32)
    for blob in blobs:
        out += blob + b"\0" * ((-len(blob)) % 32)
    return out


def gguf_scalar(code, fmt, value):
    return (code, struct.pack(fmt, value))


def gguf_array(code, fmt, values):
    return (9, struct.pack("<IQ", code, len(values)) + b"".join(struct.pack(fmt, v) for v in values))


def tiny_model(arch):
    """A complete tiny model (2 layers, D 8, Hq 2, Hkv 1, d 4, F 8, V 16, f32) with a 16-token
    SentencePiece vocabulary: the seed of gguf_model_fuzzer, which mutates its typed fields."""
    D, L, Hq, Hkv, d, F, V = 8, 2, 2, 1, 4, 8, 16
    p = arch + "."
    meta = {
        "general.architecture": (8, gguf_string(arch.encode())),
        "general.name": (8, gguf_string(b"seed-" + arch.encode())),
        p + "context_length": gguf_scalar(4, "<I", 32),
        p + "embedding_length": gguf_scalar(4, "<I", D),
        p + "block_count": gguf_scalar(4, "<I", L),
        p + "feed_forward_length": gguf_scalar(4, "<I", F),
        p + "attention.head_count": gguf_scalar(4, "<I", Hq),
        p + "attention.head_count_kv": gguf_scalar(4, "<I", Hkv),
        p + "attention.key_length": gguf_scalar(4, "<I", d),
        p + "attention.value_length": gguf_scalar(4, "<I", d),
        p + "attention.layer_norm_rms_epsilon": gguf_scalar(6, "<f", 1e-5),
        p + "rope.freq_base": gguf_scalar(6, "<f", 10000.0),
    }
    if arch == "gemma3":
        meta[p + "attention.sliding_window"] = gguf_scalar(4, "<I", 4)
        meta[p + "attention.sliding_window_pattern"] = gguf_scalar(4, "<I", 2)
        meta[p + "final_logit_softcapping"] = gguf_scalar(6, "<f", 30.0)
    pieces = ["<unk>", "<s>", "</s>", "\u2581", "H", "e", "l", "o", ",", "\u2581w", "r", "d",
              "!", "1", "2", "3"]
    meta["tokenizer.ggml.model"] = (8, gguf_string(b"llama"))
    meta["tokenizer.ggml.tokens"] = (9, struct.pack("<IQ", 8, V) +
                                     b"".join(gguf_string(t.encode()) for t in pieces))
    meta["tokenizer.ggml.scores"] = gguf_array(6, "<f", [0.0] * 3 + [-float(i) for i in range(V - 3)])
    meta["tokenizer.ggml.token_type"] = gguf_array(5, "<i", [2, 3, 3] + [1] * (V - 3))
    meta["tokenizer.ggml.bos_token_id"] = gguf_scalar(4, "<I", 1)
    meta["tokenizer.ggml.eos_token_id"] = gguf_scalar(4, "<I", 2)
    state = [12345]

    def weights(n, mean=0.0):  # a fixed LCG, small values
        out = []
        for _ in range(n):
            state[0] = (state[0] * 1103515245 + 12345) % (1 << 31)
            out.append(mean + (state[0] / (1 << 31) - 0.5) * 0.6)
        return struct.pack("<%df" % n, *out)

    tensors = [("token_embd.weight", [V, D], 0, weights(V * D)),
               ("output_norm.weight", [D], 0, weights(D, 1.0))]
    for layer in range(L):
        b = "blk.%d." % layer
        tensors += [(b + "attn_norm.weight", [D], 0, weights(D, 1.0)),
                    (b + "attn_q.weight", [Hq * d, D], 0, weights(Hq * d * D)),
                    (b + "attn_k.weight", [Hkv * d, D], 0, weights(Hkv * d * D)),
                    (b + "attn_v.weight", [Hkv * d, D], 0, weights(Hkv * d * D)),
                    (b + "attn_output.weight", [D, Hq * d], 0, weights(D * Hq * d))]
        if arch == "qwen2":
            tensors += [(b + "attn_q.bias", [Hq * d], 0, weights(Hq * d)),
                        (b + "attn_k.bias", [Hkv * d], 0, weights(Hkv * d)),
                        (b + "attn_v.bias", [Hkv * d], 0, weights(Hkv * d))]
        if arch == "gemma3":
            tensors += [(b + "attn_q_norm.weight", [d], 0, weights(d, 1.0)),
                        (b + "attn_k_norm.weight", [d], 0, weights(d, 1.0)),
                        (b + "post_attention_norm.weight", [D], 0, weights(D, 1.0)),
                        (b + "post_ffw_norm.weight", [D], 0, weights(D, 1.0))]
        tensors += [(b + "ffn_norm.weight", [D], 0, weights(D, 1.0)),
                    (b + "ffn_gate.weight", [F, D], 0, weights(F * D)),
                    (b + "ffn_up.weight", [F, D], 0, weights(F * D)),
                    (b + "ffn_down.weight", [D, F], 0, weights(D * F))]
    return make_gguf(tensors, meta)


def q8_0_block(values):
    scale = max(abs(v) for v in values) / 127 or 1.0
    qs = bytes((round(v / scale) & 0xFF) for v in values)
    return struct.pack("<e", scale) + qs


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fuzz_seeds"
    for sub in ("gguf", "gguf_model", "npy", "safetensors", "jsonl", "tokenizer"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    meta = {
        "general.architecture": (8, gguf_string(b"llama")),
        "general.alignment": (4, struct.pack("<I", 32)),
        "llama.block_count": (4, struct.pack("<I", 1)),
        "tokenizer.ggml.tokens": (9, struct.pack("<IQ", 8, 2) + gguf_string(b"a") + gguf_string(b"b")),
    }
    f32 = struct.pack("<6f", *[0.5 * i for i in range(6)])
    f16 = struct.pack("<4e", 1.0, -2.0, 0.25, 3.5)
    q8 = q8_0_block([((i * 7) % 19 - 9) / 4 for i in range(32)])
    with open(os.path.join(out, "gguf", "seed_small.gguf"), "wb") as f:
        f.write(make_gguf([("w", [2, 3], 0, f32), ("h", [4], 1, f16), ("q", [32], 8, q8)], meta))
    with open(os.path.join(out, "gguf", "seed_empty.gguf"), "wb") as f:
        f.write(make_gguf([], {}))
    for arch in ("llama", "qwen2", "gemma3"):
        with open(os.path.join(out, "gguf_model", "seed_%s.gguf" % arch), "wb") as f:
            f.write(tiny_model(arch))

    def npy(descr, shape, payload, version=1):
        header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
            descr, "(" + "".join("%d, " % s for s in shape).rstrip(" ") + ")")
        pad = 64 - (10 + len(header) + 1) % 64
        header = header + " " * pad + "\n"
        return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<H", len(header)) + header.encode() + payload

    with open(os.path.join(out, "npy", "seed_f32.npy"), "wb") as f:
        f.write(npy("<f4", (2, 3), f32))
    with open(os.path.join(out, "npy", "seed_f16.npy"), "wb") as f:
        f.write(npy("<f2", (4,), f16))
    # Other dtypes, a version-2 header, a 0-d and an empty array: each a different reader branch.
    extra_npy = {
        "seed_f64.npy": npy("<f8", (3,), struct.pack("<3d", 1.0, -0.5, 2.25)),
        "seed_i32.npy": npy("<i4", (2, 2), struct.pack("<4i", 1, -2, 3, 4)),
        "seed_i64.npy": npy("<i8", (2,), struct.pack("<2q", 7, -9)),
        "seed_u8.npy": npy("|u1", (5,), bytes(range(5))),
        "seed_v2.npy": npy("<f4", (1, 3), struct.pack("<3f", 1, 2, 3), version=2),
        "seed_scalar.npy": npy("<f4", (), struct.pack("<f", 4.5)),
        "seed_empty.npy": npy("<f4", (0, 3), b""),
    }
    for name, blob in extra_npy.items():
        if name == "seed_v2.npy":  # version 2 has a 4-byte header length
            hdr_len = struct.unpack("<H", blob[8:10])[0]
            blob = blob[:8] + struct.pack("<I", hdr_len) + blob[10:]
        with open(os.path.join(out, "npy", name), "wb") as f:
            f.write(blob)

    header = json.dumps({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                         "__metadata__": {"format": "pt"}}).encode()
    with open(os.path.join(out, "safetensors", "seed.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + f32)

    # Several dtypes, an empty tensor, no metadata.
    header = json.dumps({"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]},
                         "b": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [8, 12]},
                         "c": {"dtype": "I64", "shape": [1], "data_offsets": [12, 20]},
                         "e": {"dtype": "F32", "shape": [0, 2], "data_offsets": [20, 20]}}).encode()
    data = f16 + struct.pack("<2H", 0x3F80, 0xC000) + struct.pack("<q", 5)
    with open(os.path.join(out, "safetensors", "seed_multi.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)

    row = {"context": "The magic number is 7.", "question": "What is the magic number?",
           "answer_prefix": "The magic number is", "answers": ["7"], "max_new_tokens": 8,
           "task": "custom"}
    with open(os.path.join(out, "jsonl", "seed.jsonl"), "w") as f:
        f.write(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    odd = dict(row, context="Caf\u00e9 \u2603 \ud83d\ude00 tab\there \"quoted\"", id=17,
               answers=["a", "b\\c"], length=123)
    with open(os.path.join(out, "jsonl", "seed_escapes.jsonl"), "w") as f:
        f.write("\n" + json.dumps(odd) + "\r\n\n" + json.dumps(row, ensure_ascii=False) + "\n")

    # Tokenizer inputs: scripts, emoji, whitespace runs, digits, code and special-token strings.
    texts = [
        "Hello, world! The magic number is 12345.",
        "  leading and trailing spaces   \n\n\tTabs\r\n",
        "Ünïcödé façade – naïve café; 日本語のテキスト; 中文; 한국어; Ελληνικά; русский",
        "emoji \U0001F600\U0001F468\u200d\U0001F469\u200d\U0001F467 flags \U0001F1FA\U0001F1F8",
        "def f(x):\n    return x**2  # comment\n",
        "<|im_start|>user\nhi<|im_end|>\n<start_of_turn>model\n<end_of_turn><bos>",
        "I'm you're we'll they'd DON'T 1,000,000.50 3.14e-10",
    ]
    for i, t in enumerate(texts):
        with open(os.path.join(out, "tokenizer", "seed_%d.txt" % i), "wb") as f:
            f.write(t.encode("utf-8"))


if __name__ == "__main__":
    main()
