#!/usr/bin/env python3
"""Reference pre-tokenizer splits from the `regex` module (which supports \\p{L}/\\p{N}) for the
regexes src/tokenizer/pretokenize.cpp implements by hand. Writes
tests/data/tokenizer/pretokenize.json: for each splitter, the pieces of ~40 strings (random
mixtures of letters, digits, spaces, newlines, apostrophes, punctuation and non-ASCII included).

Usage: python tools/golden/tokenizer_pretokenize_golden.py   (needs: pip install regex)
"""
import json
import os
import random

import regex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "pretokenize.json")

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
          r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")


def split(pattern, text):
    return [m.group(0) for m in regex.finditer(pattern, text)]


def split_smollm(text):
    # \p{N} isolated first; the rest through GPT-2.
    out, seg = [], ""
    for ch in text:
        if regex.match(r"\p{N}", ch):
            out += split(GPT2, seg) + [ch]
            seg = ""
        else:
            seg += ch
    return out + split(GPT2, seg)


FIXED = [
    "Hello world", "  two  spaces  ", "a\n\nb", " \n \n x", "tab\there", "I'm he'S WE'LL 'x",
    "x'sy", "12345 678", "3.14159", "a1b22c333d4444", "!!! ...?", " ¿Qué?", "naïve café",
    "日本語 テキスト", "😀😀 x", "\r\n\r\nline", "end   ", "   ", "\n", "", "x\u00a0y\u3000z",
    "½ ² ٣٤", "foo.bar(baz)\n\n    return", "'' 's", "A.B", "it's 1,000,000!",
]
ALPHABET = list("abcXYZ019 '\n\r\t.,!?-_") + ["é", "ß", "日", "😀", "²", "\u00a0", "Ж"]


def main():
    rng = random.Random(2026)
    texts = list(FIXED)
    for _ in range(30):
        texts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))))
    out = {"generator": "tools/golden/tokenizer_pretokenize_golden.py",
           "regex_version": regex.__version__, "cases": []}
    for t in texts:
        out["cases"].append({"text": t, "gpt2": split(GPT2, t), "smollm": split_smollm(t),
                             "llama3": split(LLAMA3, t), "qwen2": split(QWEN2, t)})
    with open(OUT, "w") as f:
        json.dump(out, f, indent=0, ensure_ascii=False)
    print("wrote", OUT, len(texts), "cases")


if __name__ == "__main__":
    main()
