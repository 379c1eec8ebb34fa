"""The tiny models' tokenizer and chat template (tools/make_tiny_model.py): a byte-level BPE trained here.

It can spell anything: every UTF-8 string in NFC form encodes to ids that decode back to it (no unknown
token; 256 byte tokens under the merges), so a tool call, JSON, English or Cyrillic reaches a tiny model and
comes back as written. Its one normalizer is Qwen2's NFC, which transformers 5 puts on every qwen2 folder's
tokenizer whatever tokenizer.json says (so vLLM and VERL read a real Qwen2.5 the same way): a decomposed
"e\u0301" comes back as "\u00e9", as it does from Qwen2.5 itself. The merges are learned from a corpus generated here, seeded (the
same command gives the same bytes): English sentences, arithmetic, JSON, tool calls in the chat
template's format, code-ish lines and a little non-Latin text. The pre-tokenizer splits as Qwen2's does
(letters, single digits, punctuation runs, newlines), so digits are tokens of their own.

    >>> tok = train()
    >>> tok.get_vocab_size(), tok.decode(tok.encode("Привет: 347 * 24").ids) == "Привет: 347 * 24"
    (1024, True)

Special tokens as Qwen2.5's: <|endoftext|> (padding), <|im_start|>, <|im_end|> (end of a turn, the eos),
plus <tool_call>, </tool_call>, <tool_response>, </tool_response> as added tokens that are not special
(as Qwen2.5's <tool_call>: a decode that skips special tokens keeps them, so a tool parser sees them).

CHAT_TEMPLATE is Qwen2.5's shape, written for these models: system, user, assistant and tool turns; the
tools' JSON schemas in the system turn; an assistant's tool calls as `<tool_call>\\n{"name": ...,
"arguments": {...}}\\n</tool_call>` blocks (one per line), tool results in `<tool_response>` blocks of one
user turn. Every turn renders the same in every later prompt (Agent Lightning merges a rollout's calls
into one trajectory only when each prompt starts with the previous prompt and response), and what a
model writes after the generation prompt renders back as it was written once vLLM's hermes parser has
read it: the content is everything before the first <tool_call> (kept as is, no separator added), the
calls follow one per line, and the arguments render as the parser returns them (a JSON string, verbatim)
or, as vLLM hands them to a template (a dict), as `tojson` writes them: json.dumps(..., ensure_ascii=False),
the string hermes returns.
"""

from __future__ import annotations

import json
import random
from functools import cache

VOCAB_SIZE = 1024  # the merges stop here: the models stay tiny (embedding and head 1024 x hidden)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
PAD, EOS = "<|endoftext|>", "<|im_end|>"
SEED = 0
# Qwen2's pre-tokenizer split: contractions, letters with one leading non-letter, single digits,
# punctuation runs, newlines, spaces.
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")

CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nThe functions you may call, one JSON schema a line:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call one, write its name and arguments as JSON within <tool_call></tool_call>:\\n"
    "<tool_call>\\n{\"name\": <name>, \"arguments\": <arguments as a JSON object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- set content = message['content'] if message['content'] is string else '' %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for call in message['tool_calls'] or [] %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": ' }}{{- f['name'] | tojson }}{{- ', \"arguments\": ' }}"
    "{%- if f['arguments'] is string %}{{- f['arguments'] }}{%- else %}{{- f['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

WORDS = (
    "the of and to a in is it you that he was for on are with as his they be at one have this from or had by "
    "word but what some we can out other were all there when up use your how said an each she which do their "
    "time if will way about many then them write would like so these her long make thing see him two has look "
    "more day could go come did number no most people my over know water than call first who may down side "
    "been now find any new work part take get place made live where after back little only round man year came "
    "show every good me give our under name very through just form sentence great think say help low line turn "
    "cause much mean before move right boy old too same tell does set three want air well also play small end "
    "put home read hand large add even land here must big high such follow act why ask men change went light "
    "kind off need house picture try us again animal point mother world near build self earth father head stand "
    "own page should country found answer school grow study still learn plant cover food sun four between state "
    "keep eye never last let thought city tree cross farm hard start might story far sea draw left late run "
    "while press close night real life few north cake piece weight grams balance whole degrees angle price "
    "apples books students minutes hours meters total each half times minus plus equals value expression "
    "compute solve problem step final calculator tool result careful brief working question reward judge "
    "search weather query model train agent function arguments string integer object array true false").split()
NAMES = ["Wang Li", "Anna", "Tom", "Maria", "Ivan", "Sara", "Ken", "Lena"]
NON_LATIN = ["数学题：三加四等于七。", "一个蛋糕重三百六十克。", "Привет, как дела? Ответ: 7", "Сколько будет два плюс два?",
             "Γεια σου κόσμε", "Η απάντηση είναι 42.", "مرحبا بالعالم", "الجواب هو ٧", "こんにちは、世界",
             "答えは十五です。", "안녕하세요, 세계", "नमस्ते दुनिया", "שלום עולם", "Ça coûte 3 €, déjà payé.",
             "Größe: 12 m², Fußweg 75°", "emoji 🙂 ✓ → ≤ ≥ ±"]
TOOLS = {"calculator": "expression", "calculate": "expression", "search": "query", "get_weather": "city",
         "lookup": "key", "read_file": "path"}


def _sentence(r: random.Random) -> str:
    s = " ".join(r.choice(WORDS) for _ in range(r.randint(4, 16)))
    return s[0].upper() + s[1:] + r.choice(".?!,;:")


def _arithmetic(r: random.Random) -> str:
    a, b, c = r.randint(0, 999), r.randint(1, 99), r.randint(1, 9)
    op, op2 = r.choice("+-*/"), r.choice("+-*")
    value = eval(f"({a} {op} {b}) {op2} {c}")  # noqa: S307 - our own digits and operators
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return r.choice([f"Compute the value of this expression: ( ( {a} {op} {b} ) {op2} {c} )\nAnswer: {shown}",
                     f"(({a} {op} {b}) {op2} {c}) = {shown}", f"{a} {op} {b} = {eval(f'{a} {op} {b}'):g}",
                     f"{r.choice(NAMES)} has {a} {r.choice(WORDS)} and {b} more. Answer: {a + b}",
                     f"{a}.{b} {r.choice(['minus', 'plus', 'times'])} {c}/{b} equals {r.randint(0, 99)}.{c}"])


def _json(r: random.Random, depth: int = 0) -> object:
    kind = r.randrange(6 if depth < 2 else 4)
    if kind == 0:
        return r.randint(-9999, 99999)
    if kind == 1:
        return r.choice([True, False, None, round(r.uniform(-100, 100), r.randint(0, 4))])
    if kind in (2, 3):
        return " ".join(r.choice(WORDS) for _ in range(r.randint(1, 3)))
    if kind == 4:
        return [_json(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {r.choice(WORDS): _json(r, depth + 1) for _ in range(r.randint(1, 4))}


def _tool_call(r: random.Random) -> str:
    name = r.choice(sorted(TOOLS))
    args = {TOOLS[name]: r.choice([f"{r.randint(1, 999)} * {r.randint(1, 99)}", _sentence(r)[:-1],
                                   r.choice(NAMES)])}
    call = "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"
    result = f"<tool_response>\n{r.randint(0, 9999)}\n</tool_response>"
    schema = {"type": "function", "function": {"name": name, "description": _sentence(r), "parameters": {
        "type": "object", "properties": {TOOLS[name]: {"type": "string", "description": _sentence(r)}},
        "required": [TOOLS[name]]}}}
    return r.choice([call, call + "\n" + result, json.dumps(schema, ensure_ascii=False)])


def _code(r: random.Random) -> str:
    a, b = r.choice(WORDS), r.choice(WORDS)
    return r.choice([f"def {a}_{b}(x: int) -> int:\n    return x {r.choice('+-*')} {r.randint(0, 9)}\n",
                     f"for {a} in range({r.randint(1, 99)}):\n    print({a}, '{b}')\n",
                     f"if {a} == {r.randint(0, 9)} and not {b}:\n    {a} += 1\n",
                     f"$ python scripts/{a}.py --{b} {r.randint(1, 9)}\n", f"{{{a}: [{b}]}} // {a}[0]->{b}"])


def corpus(n: int = 6000, seed: int = SEED) -> list[str]:
    """The training texts, the same for the same n and seed."""
    r = random.Random(seed)
    makers = [_sentence, _sentence, _arithmetic, _arithmetic, lambda r: json.dumps(_json(r), ensure_ascii=False),
              _tool_call, _code, lambda r: r.choice(NON_LATIN)]
    return [r.choice(makers)(r) for _ in range(n)]


@cache
def _trained_json(vocab_size: int) -> str:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()  # as Qwen2's, and as transformers 5 imposes on any qwen2 folder
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(SPLIT), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(TOOL_TOKENS), min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return tok.to_str()


def train(vocab_size: int = VOCAB_SIZE):
    """A fresh tokenizers.Tokenizer, the same bytes on every call (trained once per process)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(_trained_json(vocab_size))


def tokenizer_config(vocab_size: int = VOCAB_SIZE) -> dict:
    """tokenizer_config.json: transformers' fast tokenizer over tokenizer.json, Qwen2.5-Instruct's specials."""
    tok = train(vocab_size)
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": t in SPECIAL} for t in SPECIAL + TOOL_TOKENS}
    return {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "bos_token": None,
            "eos_token": EOS, "pad_token": PAD, "unk_token": None, "model_max_length": 131072,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "clean_up_tokenization_spaces": False, "split_special_tokens": False,
            "added_tokens_decoder": added, "chat_template": CHAT_TEMPLATE}


def save(dest, vocab_size: int = VOCAB_SIZE) -> int:
    """tokenizer.json and tokenizer_config.json into the folder dest; the vocabulary's size."""
    from pathlib import Path

    dest = Path(dest)
    (dest / "tokenizer.json").write_text(_pretty(_trained_json(vocab_size)), encoding="utf-8")
    (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(vocab_size), indent=2,
                                                           ensure_ascii=False), encoding="utf-8")
    return train(vocab_size).get_vocab_size()


def _pretty(text: str) -> str:
    return json.dumps(json.loads(text), indent=1, ensure_ascii=False)
