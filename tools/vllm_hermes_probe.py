"""Run by .venv-vllm's Python for tools/vllm_parity.py: vLLM's own hermes tool parser on given texts.

    .venv-vllm/bin/python tools/vllm_hermes_probe.py MODEL_DIR < texts.json > parsed.json

stdin: a JSON list of model outputs. stdout: one JSON list, per text what vLLM's chat completion
would answer: {"tools_called", "content", "calls": [{"name", "arguments"}]} (arguments as the JSON
string vLLM puts in message.tool_calls[].function.arguments), from Hermes2ProToolParser.extract_tool_calls,
the class `--tool-call-parser hermes` names.
"""

import json
import sys


def main() -> int:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tokenizers import get_tokenizer
    from vllm.tool_parsers import ToolParserManager

    parser_cls = ToolParserManager.get_tool_parser("hermes")
    tokenizer = get_tokenizer(sys.argv[1])
    request = ChatCompletionRequest(model="probe", messages=[{"role": "user", "content": "x"}])
    out = []
    for text in json.load(sys.stdin):
        got = parser_cls(tokenizer).extract_tool_calls(text, request)
        out.append({"tools_called": got.tools_called, "content": got.content,
                    "calls": [{"name": c.function.name, "arguments": c.function.arguments} for c in got.tool_calls]})
    print(json.dumps({"parser": f"{parser_cls.__module__}.{parser_cls.__qualname__}", "parsed": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
