import json
import os
import re

import pytest
from agentic_rl.cli import EXIT_USAGE, ArgumentParser, UserError, envelope, run_cli
from agentic_rl.files import atomic_write_json
from agentic_rl.runs.run_dir import resolve_output_dir, update_status
from agentic_rl.task import TemplateError, models_dirs, render_template, template_fields


def test_envelope_shape():
    env = envelope(False, checks=[], error=UserError("bad", "fix it"))
    assert env == {"ok": False, "schema_version": 1, "checks": [], "error": {"message": "bad", "hint": "fix it"}}


@pytest.mark.parametrize("template,fields", [
    ("Solve {question} now", ["question"]),
    ("{a}{b}{a} {{literal}}", ["a", "b"]),
    ("no fields {{x}}", []),
])
def test_template_fields(template, fields):
    assert template_fields(template) == fields


@pytest.mark.parametrize("template", ["{row.__class__}", "{row[0]}", "{x!r}", "{x:>10}", "{}", "{0}", "unclosed {x", "stray }"])
def test_template_rejects_code_paths(template):
    with pytest.raises(TemplateError):
        template_fields(template)


def test_render_template_json_encodes_non_strings():
    assert render_template("{a} {b} {{c}}", {"a": "x", "b": [1, 2]}) == 'x [1, 2] {c}'


def test_atomic_write_keeps_other_fields(tmp_path):
    atomic_write_json(tmp_path / "training.status", {"status": "starting", "pid": 1})
    update_status(tmp_path, status="running")
    assert json.loads((tmp_path / "training.status").read_text()) == {"status": "running", "pid": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["training.status"]


def test_output_dir_defaults_to_sibling_outputs(tmp_path, monkeypatch):
    monkeypatch.delenv("EVO_OUTPUT_DIR")
    assert resolve_output_dir(None, tmp_path / "task") == tmp_path / "outputs"


def test_models_dirs_colon_separated(monkeypatch):
    monkeypatch.setenv("EVO_MODELS_DIR", "/a:/b")
    assert [str(p) for p in models_dirs()] == ["/a", "/b"]
    assert [str(p) for p in models_dirs(["/c"])] == ["/c"]
    monkeypatch.delenv("EVO_MODELS_DIR")
    assert models_dirs() == [models_dirs(["~/models"])[0]]
    assert str(models_dirs()[0]).startswith(os.path.expanduser("~"))


def test_run_cli_usage_error_exit_2(capsys):
    parser = ArgumentParser(prog="x")
    parser.add_argument("--n", type=int)
    assert run_cli(lambda a: 0, parser, ["--n", "abc"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "Hint: " in err


def test_update_status_accepts_output_dir_field(tmp_path):
    update_status(tmp_path, output_dir="/x", status="starting")
    assert json.loads((tmp_path / "training.status").read_text())["output_dir"] == "/x"


# --------------------------------------------------------------------------- strict JSON in and out


def test_print_json_is_strict_json_whatever_a_value_holds(capsys):
    from agentic_rl import cli

    cli.print_json(cli.envelope(True, data={"mean": float("inf"), "low": float("-inf"), "nan": float("nan"),
                                                  "text": "a\ud800b", "\udc00key": 1, "obj": object,
                                                  "ok": [1.5, "é", None]}))
    out = capsys.readouterr().out  # conftest's capsys parses it strictly too
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))["data"]
    assert (data["mean"], data["low"], data["nan"]) == ("inf", "-inf", "nan")
    assert data["text"] == "a\\ud800b" and data["\\udc00key"] == 1 and data["obj"] == "<class 'object'>"
    assert data["ok"] == [1.5, "é", None]


def test_the_suite_checks_every_json_envelope_it_reads(capsys):
    print('{"ok": true, "schema_version": 1, "data": {"mean": Infinity}}')
    with pytest.raises(pytest.fail.Exception, match="Infinity is not JSON"):
        capsys.readouterr()
    print('{"ok": true}\n{"ok": false}')
    assert capsys.readouterr().out.count("ok") == 2


@pytest.mark.parametrize("text, message, line, key", [
    ('{\n  "optim": {\n    "lr": 1e309\n  }\n}', "optim.lr: 1e309 is beyond the range of a 64-bit float", 3,
     "optim.lr"),
    ('{"a": [1, -Infinity]}', "a.1: -Infinity is not valid JSON", 1, "a.1"),
    ('{"t": NaN}', "t: NaN is not valid JSON", 1, "t"),
    ('{"n": ' + "9" * 400 + "}", "n: 999999999999... (400 digits) is beyond the range", 1, "n"),
    ('{"m":\n "x\\ud800"}', "m: lone surrogate escape \\ud800", 2, "m"),
    ('{"a": 1,\n "b": {"\\udc01": 2}}', "lone surrogate escape \\udc01", 2, "b.\\udc01"),
    ('{"a":\n' * 40 + "1" + "}" * 40, "nested deeper than 32 levels", 33, "a." * 32 + "a"),
    ('[' * 100_000 + "]" * 100_000, "nested deeper than 32 levels", 1, None),
    ('{"a": 1,}', "invalid JSON: Expecting property name", 1, None),
])
def test_parse_json_strict_names_line_and_key(text, message, line, key):
    from agentic_rl.files import JSONProblem, parse_json_strict

    with pytest.raises(JSONProblem) as info:
        parse_json_strict(text)
    assert message in info.value.message and info.value.hint
    assert (info.value.line, info.value.key) == (line, key)


def test_parse_json_strict_accepts_what_json_allows():
    from agentic_rl.files import parse_json_strict

    text = '{"a": "\\ud83d\\ude00", "b": "\\\\ud800", "c": 1.7976931348623157e308, "d": ' + "[" * 31 + "]" * 31 + "}"
    assert parse_json_strict(text) == {"a": "\U0001f600", "b": "\\ud800", "c": 1.7976931348623157e308,
                                       "d": json.loads("[" * 31 + "]" * 31)}


def test_read_json_file_errors_name_file_line_and_key(tmp_path):
    from agentic_rl.files import read_json_file

    path = tmp_path / "config.json"
    path.write_text('{\n  "trainer": {"total_epochs": 2},\n  "lr": Infinity\n}\n')
    with pytest.raises(UserError) as info:
        read_json_file(path)
    assert info.value.message == f"{path}:3: lr: Infinity is not valid JSON (JSON has no NaN or Infinity)"
    path.write_text('{"a": 1,}')
    with pytest.raises(UserError, match=r"config.json:1:9: invalid JSON: Expecting property name"):
        read_json_file(path)


# --------------------------------------------------------------------------- judge rewards


def test_coerce_reward_takes_numpy_scalars_like_their_python_types():
    import numpy as np
    from agentic_rl.task import coerce_reward

    assert [coerce_reward(v) for v in (np.bool_(True), np.bool_(False), np.float32(0.5), np.int64(3),
                                       np.float16(2), np.array(0.25))] == [1.0, 0.0, 0.5, 3.0, 2.0, 0.25]
    for value, text in ((np.array([1.0, 2.0]), "returned ndarray"), (np.float64("nan"), "not a finite number"),
                        (np.str_("1"), "returned str '1'"), (10**400, "too large for a float (an integer of 1329 "
                                                                        "bits)"),
                        (10**5000, "an integer of 16610 bits"), (1e308, "beyond bfloat16's range"),
                        (-3.4e38, "beyond bfloat16's range")):
        with pytest.raises(ValueError, match=re.escape(text)):
            coerce_reward(value)
    assert coerce_reward(3.3e38) == 3.3e38


def test_task_does_not_import_numpy():
    import subprocess
    import sys

    from conftest import SCRIPTS

    code = ("import sys; from agentic_rl import task; task.coerce_reward(True); task.coerce_reward(2.0); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=SCRIPTS, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
