#!/usr/bin/env python3
"""Reference token ids for the tokenizer tests, from an implementation independent of kvevict:
Hugging Face `tokenizers` (Rust), set up by transformers' own GGUF tokenizer converter
(transformers.integrations.gguf.gguf_tokenizer_mapping) from the GGUF metadata.

Writes tests/data/tokenizer/<model>.json with, for ~40 varied strings, the ids without BOS, and
the chat prompts (rendered with jinja2 from the model's template) with their ids.

Deviations from the stock converter, so the reference follows llama.cpp (which kvevict follows):
  * SmolLM2 (tokenizer.ggml.pre = "smollm"): the converter has no split for "smollm" and keeps
    GPT-2's default; llama.cpp (and SmolLM2's original tokenizer.json) first isolate every \\p{N}
    character. We install Sequence[Digits(individual_digits=True), ByteLevel] like the original.
    The stock converter's ids are stored too ("ids_stock_converter") where they differ.
  * Gemma 3: the GGUF has no chat template; the prompt reference is rendered from a copy of the
    official Gemma 3 template (GEMMA3_TEMPLATE below, BOS left out: kvevict's encode adds it).

transformers' loader needs torch only to read tensors; the tokenizer metadata is read here with
gguf-py instead. Usage (needs: pip install transformers tokenizers gguf numpy jinja2):
    python tools/golden/tokenizer_golden.py [models_dir]
"""
import json
import os
import sys

import gguf
import jinja2
import tokenizers
import transformers
from tokenizers import pre_tokenizers
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "tests", "data", "tokenizer")

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

# Own text in the manner of a 19th-century novel (not a quotation), for a long mixed case.
PARAGRAPH = (
    "It was generally allowed, among the families of the neighbourhood, that Mrs. Ashcombe "
    "possessed a most remarkable talent for discovering the intentions of others before they "
    "had formed any themselves. Her daughter Eleanor, who had been obliged to hear of at least "
    "three engagements which never took place, bore these discoveries with a patience that "
    "did her credit; though she could not always forbear from observing, when the carriage had "
    "gone and the parlour was quiet again, that a gentleman who had danced twice with Miss "
    "Pelham was not, on that account alone, bound to marry her. \"My dear,\" her mother would "
    "reply, \"you know nothing of the world.\" And Eleanor, who had read a great deal of it in "
    "books and seen rather less of it in Hampshire, was content to let the matter rest until "
    "the following Tuesday, when the whole affair was certain to begin again.\n\n"
    "The letter arrived on the 14th of March, 1812, at a quarter past eleven."
)

STRINGS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "   three leading spaces",
    "multiple   spaces   between words",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four\n\n\n",
    "\r\nwindows\r\nnewlines\r\n",
    "1234567890",
    "Pi is 3.14159, e is 2.71828; 1,000,000 and the 42nd time",
    "Punctuation!!! ... ??? ;-) (parens) [brackets] {braces}",
    "I'm, you're, they've, he'll, she'd, it's, DON'T, 'quoted'",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m fa\u00e7ade",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u043a\u0430\u0438 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u6587\u672c",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "emoji \U0001F600\U0001F389\U0001F44D\U0001F3FD and a flag \U0001F1EB\U0001F1F7",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body><h1>Title</h1><p>text</p></body></html>",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "\uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28 and \u00bd \u00b2 \u00b3 \u2177 \u0663\u0664",
    "mixed123numbers456and789letters",
    "",
    " ",
    "\n",
    "a",
    "  \n  \n",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "<start_of_turn>user\nHi there<end_of_turn>\n",
    "zero\u200bwidth and\u00a0nbsp and\u3000ideographic space",
    "\u00dcn\u00efc\u00f6d\u00e9 \u00c0\u00c9\u00ce\u00d5\u00dc \u00df",
    "        indented code",
    "x" * 300,
    PARAGRAPH,
]

# Seeded random strings mixing words, scripts, digits, punctuation and whitespace runs, to catch
# merge-order differences that the hand-picked strings miss.
POOL = ("the of and to in is was that with for on as by at from this have not are but his her "
        "tokenization unbelievable antidisestablishment Mississippi Zürich Ærøskøbing naïveté "
        "北京 東京都 한국 Москва Αθήνα القاهرة मुंबई ไทย 😀 🎉 ✓ → ∑ ≤ © ™ € £ ¥ "
        "0 7 42 1999 3.14 1e-9 0x1F 100% $5 #tag @user ... -- __init__ std::vector<int> "
        "x=y+z; if(a){b}else{c} <div> </div> \\n \\t 'quote' \"dq\" (paren) [br] {cb}").split(" ")
SEPARATORS = [" ", " ", " ", "  ", "\n", "\n\n", "\t", "", " \n", "   "]


def random_strings(count, seed):
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rng.choice(POOL))
            parts.append(rng.choice(SEPARATORS))
        s = "".join(parts)
        if rng.random() < 0.3:
            s = s.upper() if rng.random() < 0.5 else s.capitalize()
        out.append(s)
    return out


STRINGS += random_strings(150, 20261129)

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Name two primes."},
     {"role": "assistant", "content": "2 and 3."},
     {"role": "user", "content": " And a third? "}],
]

# The official Gemma 3 chat template (text-only parts), without the leading {{ bos_token }}.
GEMMA3_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = \"\" -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def field_value(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[-1]).decode("utf-8")
    return f.parts[-1][0].item()


KEYS = {
    "ggml.model": "tokenizer_type", "ggml.pre": "pre_tokenizer_type", "ggml.tokens": "tokens",
    "ggml.scores": "scores", "ggml.token_type": "token_type", "ggml.merges": "merges",
    "ggml.bos_token_id": "bos_token_id", "ggml.eos_token_id": "eos_token_id",
    "ggml.unknown_token_id": "unk_token_id", "ggml.padding_token_id": "pad_token_id",
    "ggml.add_space_prefix": "add_prefix_space",
}


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "KVEVICT_MODEL_DIR", os.path.join(ROOT, "models"))
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, fname in MODELS.items():
        reader = gguf.GGUFReader(os.path.join(models_dir, fname))
        td = {v: field_value(reader, "tokenizer." + k) for k, v in KEYS.items()}
        td = {k: v for k, v in td.items() if v is not None}
        arch = field_value(reader, "general.architecture")
        template = field_value(reader, "tokenizer.chat_template") or GEMMA3_TEMPLATE
        stock, _ = convert_gguf_tokenizer(arch, dict(td))
        tok = stock
        notes = []
        if td.get("pre_tokenizer_type") == "smollm":
            tok = tokenizers.Tokenizer.from_str(stock.to_str())
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
            notes.append("pre-tokenizer set to Digits(individual)+ByteLevel to match llama.cpp's "
                         "'smollm' split (the stock GGUF converter keeps plain GPT-2 ByteLevel)")
        if name == "gemma3":
            notes.append("chat prompt rendered from a copy of the official Gemma 3 template "
                         "(the GGUF has none); BOS excluded from prompts")
        cases = []
        for s in STRINGS:
            ids = tok.encode(s, add_special_tokens=False).ids
            case = {"text": s, "ids": ids}
            stock_ids = stock.encode(s, add_special_tokens=False).ids
            if stock_ids != ids:
                case["ids_stock_converter"] = stock_ids
            cases.append(case)
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        chats = []
        for msgs in CHATS:
            prompt = env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                                      bos_token="")
            chats.append({"messages": msgs, "prompt": prompt,
                          "ids": tok.encode(prompt, add_special_tokens=False).ids})
        out = {
            "generator": "tools/golden/tokenizer_golden.py",
            "model_file": fname,
            "versions": {"transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__, "jinja2": jinja2.__version__,
                         "gguf": "gguf-py (pip gguf)"},
            "bos_id": td.get("bos_token_id"),
            "notes": notes,
            "cases": cases,
            "chats": chats,
        }
        path = os.path.join(OUT_DIR, name + ".json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1, ensure_ascii=False)
        n_diff = sum("ids_stock_converter" in c for c in cases)
        print("wrote", path, len(cases), "cases;", n_diff, "differ from the stock converter")


if __name__ == "__main__":
    main()
