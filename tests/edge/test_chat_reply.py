"""edge/cpu/chat_reply.decoded: the CPU rollout server's answer text is the text vLLM returns for the same ids.

vLLM detokenizes as it generates (tokenizers' DecodeStream, primed with the prompt), so an answer cut in the
middle of a multi-byte character has no U+FFFD at its end; a plain decode has one. make vllm-parity found
the difference against the real vLLM (tools/vllm_parity.py); this holds it without vLLM.
"""

from __future__ import annotations

import pytest
from agentic_rl.edge.cpu import chat_reply

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from make_tiny_model import make_tiny_model
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny")
    make_tiny_model(folder)
    return AutoTokenizer.from_pretrained(folder)


def test_an_unfinished_character_is_not_in_the_text_as_vllm_streams_it(tokenizer):
    prompt = tokenizer.encode("Where?", add_special_tokens=False)
    ids = tokenizer.encode("Tokyo: 東京", add_special_tokens=False)
    cut = [k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd")]
    assert cut, "the tiny tokenizer splits a CJK character into byte tokens"
    for k in cut:
        text = chat_reply.decoded(tokenizer, ids[:k], "length", set(), True, prompt)
        assert not text.endswith("\ufffd") and tokenizer.decode(ids[:k]).startswith(text), (k, text)
    assert chat_reply.decoded(tokenizer, ids, "length", set(), True, prompt) == "Tokyo: 東京"
    eos = tokenizer.eos_token_id
    assert chat_reply.decoded(tokenizer, [*ids, eos], "stop", {eos}, False, prompt) == "Tokyo: 東京"
