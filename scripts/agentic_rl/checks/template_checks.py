"""The user's own model, chat template and tool parser, checked before launch as the run will use them.

From the model folder agent.json names (tokenizer files only, no weights; transformers' apply_chat_template,
the call vLLM and VERL make: edge/chat_template.py), validate_data renders the task as the run renders it:
the agent's messages (agent.json's system_prompt, task.goal with a row: agents/kit.build_messages) with the
tools offered (tools.py's and the MCP servers' schemas), and with --oracle every scripted row's turns. It
proves, or says why not:

- the model has a chat template (vLLM refuses chat requests without one), and it renders the tools;
- every prompt checked fits the prompt length the run cuts to (data.max_prompt_length, or a multi-call
  agent's agentlightning.trace_aggregator.trajectory_max_prompt_length: Agent Lightning cuts longer ones);
- an assistant turn ends at a token generation stops at (the tokenizer's eos or generation_config.json's);
  else the model writes past its turn and the loss mask covers the next turns' text;
- a tool call the template renders is read back, the same name and arguments (and the text before it), by
  the parser config.json names (engine_kwargs.vllm.tool_call_parser): vLLM's own where vLLM is importable,
  else the bundle's copies of vLLM's (agentic_rl/tool_calls.py), which also name the parser that would fit;
- an oracle trajectory merges as Agent Lightning merges a rollout's calls (each prompt starts with the
  previous prompt + response, token for token), fits trajectory_max_prompt_length and
  trajectory_max_response_length, and its loss mask covers exactly the assistant's tokens. Tool results are
  not run here: each counts as a one-word stand-in, so a trajectory's length is a lower bound.

    >>> probe_calls([{"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": {}}}}}])
    [{'name': 'f', 'arguments': {'x': 'check'}}]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentic_rl import oracle_turns, task, tool_calls
from agentic_rl.checks import agent_rules, config_values, model_files
from agentic_rl.cli import Check

NAME = "chat template"
PROMPT_ROWS = 32  # rows rendered: the first ones and as many of the longest (by the task.goal text)
TRAJECTORIES = 32  # oracle rows simulated
TOOL_RESULT = "result"  # the stand-in for a tool's output (tools are not run here)
CALL_ID = "call00001"  # nine letters and digits: Mistral's templates refuse any other id
PROBE_TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look a word up.", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def probe_calls(schemas: list[dict]) -> list[dict]:
    """One call of the first tool, each of its parameters "check" (or a tool of our own when there is none)."""
    fn = (schemas[0].get("function") or {}) if schemas else {}
    props = ((fn.get("parameters") or {}).get("properties") or {}) if fn else {"query": {}}
    return [{"name": fn.get("name") or "lookup", "arguments": {k: "check" for k in props}}]


def assistant(calls: list[dict], content: str | None = None) -> dict:
    """The assistant message as the agent sends it back: tool_calls of the OpenAI API (arguments a JSON string)."""
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": CALL_ID[:-1] + str(i + 1), "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}), ensure_ascii=False)}}
        for i, c in enumerate(calls)]}


class Renderer:
    """The model's tokenizer and template, rendering as vLLM does (tool_calls.template_messages first)."""

    def __init__(self, folder: Path):
        from agentic_rl.edge import chat_template

        self.ct = chat_template
        self.folder = folder
        self.tok = chat_template.load(folder)
        self.stops = chat_template.stop_ids(self.tok, folder)

    def prompt(self, messages: list, tools: list | None) -> list[int]:
        text = self.ct.render(self.tok, tool_calls.template_messages(messages), tools, generation_prompt=True)
        return self.ct.encode(self.tok, text)

    def turn(self, messages: list, tools: list | None, message: dict) -> tuple[str, list[int], bool]:
        """(the text the model writes for message after the generation prompt, its ids up to and with the first
        stop token, whether there was one). Raises TemplateProblem when the template cannot render it."""
        both = tool_calls.template_messages([*messages, message])
        before = self.ct.render(self.tok, both[:-1], tools, generation_prompt=True)
        after = self.ct.render(self.tok, both, tools)
        if not after.startswith(before):
            raise self.ct.TemplateProblem("it renders the earlier turns differently once an assistant turn follows")
        ids = self.ct.encode(self.tok, after[len(before):])
        stop = next((i for i, t in enumerate(ids) if t in self.stops), None)
        ids = ids if stop is None else ids[:stop + 1]
        written = self.ct.decode(self.tok, ids if stop is None else ids[:-1])
        return written, ids, stop is not None


def reader(parser: str, renderer: Renderer) -> tuple[Any, str] | tuple[None, str]:
    """(text -> (called, [(name, arguments)], content), who reads): vLLM's own parser where vLLM is importable,
    else the bundle's copy; (None, why) when neither knows the name."""
    own = renderer.ct.vllm_parser(parser, renderer.tok)
    if own is not None:
        return own, "vLLM's own"
    return (bundle_reader(parser), "the bundle's copy of vLLM's") if tool_calls.known(parser) else (None, "")


def reads_back(read, written: str, calls: list[dict], content: str | None) -> str | None:
    """None when read(written) gives back the calls (and the content, where the template wrote it); else what differs."""
    try:
        called, got, said = read(written)
    except Exception as exc:  # noqa: BLE001 - vLLM's parsers raise on some texts (an HTTP 500 there)
        return f"the parser failed ({type(exc).__name__})"
    if not called:
        return "no tool call"
    try:
        got_calls = [(n, json.loads(a)) for n, a in got]
    except (TypeError, ValueError):
        return f"arguments that are not JSON: {got!r}"[:200]
    want = [(c["name"], c.get("arguments", {})) for c in calls]
    if got_calls != want:
        return f"{len(got_calls)} call(s): {got_calls!r}"[:200]
    if content and content in written and (said or "").strip() != content.strip():
        return f"the calls but not the text ({said!r})"[:200]
    return None


def round_trip(renderer: Renderer, base: list, tools: list | None, calls: list[dict], read) -> tuple[str | None, str]:
    """(what the parser got wrong or None, the turn the template writes) over three turns: the calls alone, with
    text before them, and two calls at once (a template that refuses two is not held to it)."""
    written, _, _ = renderer.turn(base, tools, assistant(calls))
    shown = written
    for probe, content, what in ((calls, None, "that call"), (calls, "Let me check.", "text and then the call"),
                                 (calls + calls, None, "two calls in one turn")):
        try:
            text, _, _ = renderer.turn(base, tools, assistant(probe, content))
        except renderer.ct.TemplateProblem:
            if len(probe) > len(calls):
                continue
            raise
        wrong = reads_back(read, text, probe, content)
        if wrong:
            return f"given {what}, reads {wrong}", shown
    return None, shown


def fitting(renderer: Renderer, base: list, tools: list | None, calls: list[dict]) -> list[str]:
    """The bundle's parsers that read this template's tool calls back."""
    out = []
    for name in ("hermes", "llama3_json", "mistral"):
        try:
            if round_trip(renderer, base, tools, calls, bundle_reader(name))[0] is None:
                out.append(name)
        except renderer.ct.TemplateProblem:
            return []
    return out


def bundle_reader(name: str):
    """The bundle's parser `name` as reader() returns one."""
    def read(text: str):
        p = tool_calls.parse(name, text)
        return p.tools_called, [(c["function"]["name"], c["function"]["arguments"]) for c in p.tool_calls], p.content
    return read


def longest_rows(rows: list[dict], template: str, n: int = PROMPT_ROWS) -> list[dict]:
    """The first n//2 rows and the n//2 whose rendered task.goal is longest."""
    first = rows[:n // 2]
    rest = sorted(rows[n // 2:], key=lambda r: -len(task.render_template(template, r)))[:n - len(first)]
    return first + rest


def simulate(renderer: Renderer, base: list, tools: list | None, turns: list[dict], parser_read) -> dict:
    """An oracle row's rollout as Agent Lightning merges it (its rollout_adapter): {prompt, response: token counts,
    assistant_tokens (mask 1), merged, stopped, mask_exact, turns}. Each turn is what the model would write (the
    template's rendering of the oracle's message, to the stop token); the agent sends back what the parser read
    and a stand-in result per call. mask_exact: the masked-in tokens are the assistant's turns and nothing else
    (every turn ends at a stop token, the turns merge, an answer turn is its content)."""
    messages = list(base)
    prompt = renderer.prompt(messages, tools)
    context, response, mask, texts, merged, stopped, exact = list(prompt), [], [], [], True, True, True
    for k in range(len(turns)):
        meant = oracle_turns.message(turns, k)["message"]
        calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                 for c in meant.get("tool_calls") or []]
        written, ids, stop = renderer.turn(messages, tools, assistant(calls, meant.get("content")) if calls else meant)
        stopped &= stop
        if k:
            now = renderer.prompt(messages, tools)
            if now[:len(context)] != context:
                merged = False
                break
            response += now[len(context):]
            mask += [0] * (len(now) - len(context))
            context = list(now)
        response += ids
        mask += [1] * len(ids)
        context += ids
        texts.append(renderer.ct.decode(renderer.tok, ids))
        if not calls:
            exact &= written.strip() == (meant.get("content") or "").strip()  # the turn is the answer, no more
            break
        called, got, content = parser_read(written) if parser_read else (False, [], written)
        if not called:
            break  # the agent saw no call: the rollout ends with this turn
        messages.append({"role": "assistant", "content": content, "tool_calls": [
            {"id": f"{CALL_ID[:-1]}{i + 1}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(got)]})
        messages += [{"role": "tool", "tool_call_id": f"{CALL_ID[:-1]}{i + 1}", "content": TOOL_RESULT}
                     for i in range(len(got))]
    return {"prompt": len(prompt), "response": len(response), "assistant_tokens": sum(mask), "merged": merged,
            "stopped": stopped, "mask_exact": exact and stopped and merged, "turns": len(texts)}


def rows_of(input_dir: Path) -> list[dict]:
    """train.jsonl's rows, then test.jsonl's (the defective lines are jsonl_checks')."""
    from agentic_rl.checks import jsonl_checks

    return [row for name in ("train.jsonl", "test.jsonl") if (input_dir / name).is_file()
            for _, row, _ in jsonl_checks.iter_jsonl(input_dir / name) if isinstance(row, dict)]


def checks(input_dir: Path, cfg: dict, agent: dict, template: str | None, schemas: list[dict] | None,
           script: dict, why: str | None) -> tuple[list[Check], dict]:
    """validate_data's findings on the model's template and parser (the module docstring), and their data."""
    from agentic_rl.edge import chat_template

    folder = model_files.resolve_model(agent["model_name"])
    if folder is None or template is None:
        return [], {}  # agent_rules.model_checks says the model is not here
    where = "agent.json:model_name"
    try:
        renderer = Renderer(folder)
    except chat_template.TemplateProblem as exc:
        return [Check(NAME, "warn", f"{folder.name}: {exc}; its chat template and tool parsing are not checked",
                      "python scripts/check_model.py --model NAME says what the folder lacks", where)], {}
    if not chat_template.has_template(renderer.tok):
        return [Check(NAME, "fail", f"{folder.name} has no chat template: vLLM answers every chat request (the "
                      "agent's) with an error", "use the model's chat or instruct variant, or add chat_template to "
                      "its tokenizer_config.json", where)], {"model": str(folder)}
    get = lambda key: config_values.effective(cfg, key)  # noqa: E731
    keys, max_prompt, max_response = agent_rules.lengths(get, why is not None)
    tools = [{k: v for k, v in s.items() if k != "server"} for s in schemas or []] or None
    data: dict = {"model": str(folder)}
    rows = rows_of(input_dir)
    base = next((m for m in (_messages(r, template, agent) for r in rows[:8]) if m), None) or \
        [{"role": "user", "content": "check"}]
    try:
        out = _prompt_checks(renderer, base, agent, template, rows, tools, keys[0], max_prompt, data)
        parser = config_values.effective(cfg, agent_rules.PARSER_KEY) if why else None
        # an agent of its own may offer tools validate_data cannot see: a stand-in tool is called then
        found, read = _parser_checks(renderer, base, tools or [PROBE_TOOL], parser, script, data) if why else ([], None)
        out += found + _end_checks(renderer, base, tools)
        if script:
            out += _trajectory_checks(renderer, agent, template, rows, tools, script, read, keys, max_prompt,
                                      max_response, data)
    except chat_template.TemplateProblem as exc:
        out = [Check(NAME, "fail", f"{folder.name}: {exc}", "fix the template, or use the model's own", where)]
    return out, data


def _messages(row: dict, template: str, agent: dict) -> list | None:
    from agentic_rl.agents import kit

    try:
        return kit.build_messages(row, template, agent)
    except (KeyError, IndexError, ValueError, task.TemplateError):
        return None  # a row without the template's fields: jsonl_checks reports it


def _prompt_checks(renderer: Renderer, base: list, agent: dict, template: str, rows: list[dict], tools: list | None,
                   key: str, limit: Any, data: dict) -> list[Check]:
    out, name = [], renderer.folder.name
    if tools:
        with_tools = renderer.ct.render(renderer.tok, base, tools, True)
        missing = [t["function"]["name"] for t in tools if t["function"]["name"] not in with_tools]
        same = with_tools == renderer.ct.render(renderer.tok, base, None, True)
        if missing or same:
            out.append(Check(NAME, "fail", f"{name}'s chat template does not render the tools offered ("
                             + ("the prompt is the same with them as without" if same else ", ".join(missing))
                             + "): the model is never told they exist", "use a chat template with tool calling (the model's own, e.g. "
                             "Qwen2.5's renders them in the system turn)", "agent.json:model_name"))
    longest, at, checked = 0, None, 0
    for row in longest_rows(rows, template):
        messages = _messages(row, template, agent)
        if messages is not None:
            checked += 1
            n = len(renderer.prompt(messages, tools))
            longest, at = max((longest, at), (n, row.get("id")), key=lambda x: x[0])
    data.update(prompt_tokens_max=longest, prompt_rows_checked=checked)
    what = f"{name}'s chat template" + (", the tools included" if tools else "")
    if type(limit) is int and longest > limit:
        out.append(Check(NAME, "fail", f"the longest prompt checked (row id {at!r}) is {longest} tokens with {what}, "
                         f"above {key} {limit}: Agent Lightning cuts it to {limit} tokens",
                         f"raise {key} to at least {longest} (check_model.py --config checks the model's context), "
                         "or shorten task.goal / system_prompt", key))
    elif checked:
        out.append(Check(NAME, "ok", f"prompts fit: at most {longest} tokens of {key} {limit} on {checked} rows (the "
                         f"first and the longest), rendered with {what}", where=key))
    return out


def _parser_checks(renderer: Renderer, base: list, tools: list, parser: Any, script: dict,
                   data: dict) -> tuple[list[Check], Any]:
    if not parser:
        return [], None  # agent_rules.parser_checks: not set
    parser, name, key = str(parser), renderer.folder.name, agent_rules.PARSER_KEY
    scripted = [t["tool_calls"] for turns in script.values() for t in turns if "tool_calls" in t]
    calls = [{"name": c["name"], "arguments": c.get("arguments", {})} for c in scripted[0]] if scripted \
        else probe_calls(tools)
    read, who = reader(parser, renderer)
    data["tool_call"] = {"parser": parser, "reader": who or None}
    if read is None:
        return [Check(NAME, "warn", f"{key} {parser!r} is not one the bundle mirrors ({', '.join(sorted(tool_calls.PARSERS))}) "
                      f"and vLLM is not importable here: whether it reads {name}'s tool calls is not checked",
                      "run validate_data where vLLM is installed (a GPU node after make install-train): vLLM's own "
                      "parsers are used there", key)], None
    wrong, shown = round_trip(renderer, base, tools, calls, read)
    data["tool_call"]["written"] = shown
    if not all(c["name"] in shown for c in calls):
        return [Check(NAME, "fail", f"{name}'s chat template renders no tool call (an assistant turn with one is "
                      f"{shown!r}): the model never sees its calls in context, and the {parser} parser reads none",
                      "use a chat template with tool calling (the model's own, e.g. Qwen2.5's)", key)], read
    if wrong:
        fits = data["tool_call"]["fits"] = fitting(renderer, base, tools, calls)
        hint = (f"set {key}: {json.dumps(fits[0])} (it reads this template's calls back)" if fits else
                "no parser this bundle mirrors reads them: pick the one vLLM's tool calling docs name for this model")
        return [Check(NAME, "fail", f"{name}'s chat template and {key} {parser} do not agree: the template writes a "
                      f"call as {shown!r}, and {who} {parser} parser, {wrong}: the agent would not get the model's "
                      "tool calls as it wrote them", hint, key)], read
    return [Check(NAME, "ok", f"tool calls round-trip: {name}'s template writes {shown!r}, and {who} {parser} parser "
                  "reads back the same name and arguments", where=key)], read


def _end_checks(renderer: Renderer, base: list, tools: list | None) -> list[Check]:
    written, ids, stopped = renderer.turn(base, tools, {"role": "assistant", "content": "Answer: 1"})
    if stopped:
        return []
    stops = ", ".join(repr(renderer.tok.convert_ids_to_tokens(i)) for i in sorted(renderer.stops)) or "none"
    return [Check(NAME, "fail", f"{renderer.folder.name}'s chat template ends an assistant turn as {written!r}, without "
                  f"a token generation stops at ({stops}): the model would write past its turn, and the loss mask "
                  "would cover the next turns' text", "use the model's chat/instruct variant (its eos ends a turn), or "
                  "add the template's end-of-turn token to generation_config.json's eos_token_id",
                  "agent.json:model_name")]


def _trajectory_checks(renderer: Renderer, agent: dict, template: str, rows: list[dict], tools: list | None,
                       script: dict, read, keys: tuple, max_prompt: Any, max_response: Any, data: dict) -> list[Check]:
    results = []
    for row in rows:
        if str(row.get("id")) in script and len(results) < TRAJECTORIES:
            messages = _messages(row, template, agent)
            if messages is not None:
                results.append((row["id"], simulate(renderer, messages, tools, script[str(row["id"])], read)))
    if not results:
        return []
    prompt = max(r["prompt"] for _, r in results)
    response = max(r["response"] for _, r in results)
    data["trajectories"] = {"rows": len(results), "prompt_max": prompt, "response_max": response,
                            "merged": all(r["merged"] for _, r in results)}
    split = [rid for rid, r in results if not r["merged"]]
    if split:
        return [Check(NAME, "fail", f"oracle row {split[0]!r}: a later prompt does not start with the earlier prompt + "
                      f"response, token for token ({renderer.folder.name}'s template renders an earlier turn "
                      "differently once the conversation goes on): Agent Lightning splits such a rollout into several "
                      "training rows", "use a template that keeps every turn as it was sent, or set "
                      f"{agent_rules.LEVEL_KEY}: transition", agent_rules.LEVEL_KEY)]
    out = []
    for key, limit, n, what in ((keys[0], max_prompt, prompt, "prompt"), (keys[1], max_response, response, "response")):
        if type(limit) is int and n > limit:
            out.append(Check(NAME, "fail", f"an oracle trajectory's {what} is {n} tokens (at least: tool results "
                             f"counted as one word), above {key} {limit}: Agent Lightning cuts it",
                             f"raise {key} to at least {n}, with room for the tool results", key))
    if not all(r["mask_exact"] for _, r in results):
        out.append(Check(NAME, "warn", "an oracle answer turn renders with more than its content before the stop "
                         "token: the loss mask covers the template's own text there too", "check the template's "
                         "assistant turn", "agent.json:model_name"))
    if not out:
        out.append(Check(NAME, "ok", f"{len(results)} oracle trajectories each merge into one training row: at most "
                         f"{prompt} prompt + {response} response tokens ({keys[0]} {max_prompt}, {keys[1]} "
                         f"{max_response}; tool results counted as one word), the loss mask on the assistant's "
                         f"{max(r['assistant_tokens'] for _, r in results)} tokens at most and nothing else",
                         where=keys[1]))
    return out


def start_problem(model_name: str, parser: str) -> Check | None:
    """The start's check (start_training.sh, before any process): the fail Check when the model's template and the
    configured parser do not agree, or the model has no chat template; None when they agree or it cannot be told
    here (no folder, no tokenizer: validate_data says more). A stand-in tool is offered and called."""
    from agentic_rl.edge import chat_template

    folder = model_files.resolve_model(model_name)
    if folder is None or not any((folder / t).exists() for t in model_files.TOKENIZER_FILES):
        return None
    try:
        renderer = Renderer(folder)
        if not chat_template.has_template(renderer.tok):
            return Check(NAME, "fail", f"{folder.name} has no chat template: vLLM answers every chat request (the "
                         "agent's) with an error", "use the model's chat or instruct variant", "agent.json:model_name")
        found, _ = _parser_checks(renderer, [{"role": "user", "content": "Look up the word check."}], [PROBE_TOOL],
                                  parser, {}, {})
    except chat_template.TemplateProblem:
        return None
    return next((c for c in found if c.status == "fail"), None)
