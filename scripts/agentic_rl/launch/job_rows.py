"""The task's rows as the trainer gets them: each row travels as ONE JSON string (input.arl_row), so rows of any
shape make one Arrow schema in datasets; its extra_info.index is its line position (LoadedDataset's rollout
index). agentlightning.local.env_map's {"NAME": "input.<field>"} entries are read from the row here and carried
as input.arl_env.NAME, a string each wrapped row holds; {"NAME": "input"} is the row's JSON (job_config.py sets
the env_map Agent Lightning gets).

    >>> wrap_row({"question": "1+2", "ground_truth": 3}, 7)
    {'arl_row': '{"question": "1+2", "ground_truth": 3}', 'extra_info': {'index': 7}}
    >>> wrap_row({"question": "1+2", "meta": {"level": 2}}, 0, {"Q": ["question"], "LEVEL": ["meta", "level"]})["arl_env"]
    {'Q': '1+2', 'LEVEL': '2'}
"""

from __future__ import annotations

import json
from typing import Any

ROW_ENV = "ARL_ROW"
ROW_FIELD = "arl_row"
ENV_FIELD = "arl_env"  # env_map's row fields, resolved per row: {NAME: text}


class MissingField(ValueError):
    """A row lacks a field env_map names: one sentence naming the row and the fix."""


def wrap_row(row: dict, index: int, env_paths: dict[str, list[str]] | None = None) -> dict:
    """A row as the trainer gets it: one JSON string, and its position where LoadedDataset reads the index;
    with env_paths (row_env_paths), the text of each env_map field, as Agent Lightning would set it."""
    out: dict = {ROW_FIELD: json.dumps(row, ensure_ascii=False), "extra_info": {"index": index}}
    if env_paths:
        out[ENV_FIELD] = {name: _field_text(row, index, name, path) for name, path in env_paths.items()}
    return out


def _field_text(row: dict, index: int, name: str, path: list[str]) -> str:
    value: Any = row
    for part in path:
        if not isinstance(value, dict) or part not in value:
            shown = f"row {index + 1}" + (f" (id {row['id']})" if isinstance(row.get("id"), (str, int)) else "")
            raise MissingField(f"agentlightning.local.env_map.{name}: input.{'.'.join(path)}: {shown} has no field "
                               f"{'.'.join(path)}; give every row that field, or drop {name} from env_map")
        value = value[part]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)  # as Agent Lightning does


def wrap_rows(rows: list[dict], env_paths: dict[str, list[str]] | None = None) -> list[dict]:
    return [wrap_row(row, i, env_paths) for i, row in enumerate(rows)]


def row_env_paths(env_map: dict) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The user's env_map (checked by config_checks.env_map_checks) as ({NAME: field path} each wrapped row
    resolves, the env_map Agent Lightning gets). Rows travel as one JSON string (input.arl_row), so
    "input.question" would find nothing there: it is read from the row here and handed on as
    input.arl_env.NAME; "input" (the whole input) is the row's JSON."""
    paths, translated = {}, {}
    for name, value in env_map.items():
        if value == "input":
            translated[name] = f"input.{ROW_FIELD}"
        else:
            paths[name] = value.split(".")[1:]
            translated[name] = f"input.{ENV_FIELD}.{name}"
    return paths, translated
