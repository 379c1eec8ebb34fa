"""Run by .venv-vllm's Python for tools/vllm_parity.py: vLLM's own tool parsers on given texts.

    .venv-vllm/bin/python tools/vllm_parser_probe.py MODEL_DIR < texts.json > parsed.json

stdin: {parser name: [model outputs]}. stdout: one JSON object, {"parsers": {name: class}, "parsed": {name:
[per text what vLLM's chat completion would answer: {"tools_called", "content", "calls": [{"name",
"arguments"}]}]}} (arguments as the JSON string vLLM puts in message.tool_calls[].function.arguments), from
the extract_tool_calls of the class `--tool-call-parser NAME` names (hermes: Hermes2ProToolParser).
"""

import json
import sys


def main() -> int:
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tokenizers import get_tokenizer
    from vllm.tool_parsers import ToolParserManager

    tokenizer = get_tokenizer(sys.argv[1])
    request = ChatCompletionRequest(model="probe", messages=[{"role": "user", "content": "x"}])
    classes, parsed = {}, {}
    for name, texts in json.load(sys.stdin).items():
        parser_cls = ToolParserManager.get_tool_parser(name)
        classes[name] = f"{parser_cls.__module__}.{parser_cls.__qualname__}"
        parsed[name] = []
        tok = tokenizer
        bot = getattr(parser_cls, "bot_token", None)  # llama3_json refuses a tokenizer without <|python_tag|>,
        if bot and bot not in tok.get_vocab():  # which its text parse never uses: a copy that has it
            tok = AutoTokenizer.from_pretrained(sys.argv[1])  # vLLM's own is cached: its vocab cannot grow
            tok.add_tokens([bot], special_tokens=True)
        for text in texts:
            got = parser_cls(tok).extract_tool_calls(text, request)
            parsed[name].append({"tools_called": got.tools_called, "content": got.content,
                                 "calls": [{"name": c.function.name, "arguments": c.function.arguments}
                                           for c in got.tool_calls]})
    print(json.dumps({"parsers": classes, "parsed": parsed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
