"""Parquet files (pyarrow, imported only here): new_task.py reads VERL's data files and exported datasets.

A row comes back as plain Python values (str, int, float, bool, None, list, dict), as
pyarrow.Table.to_pylist gives them: VERL's `prompt` (a list of chat messages) and `reward_model` (a
struct) included.
"""

from __future__ import annotations

from pathlib import Path

from agentic_rl.cli import EXIT_ENV, EXIT_FAIL, UserError

INSTALL_HINT = "`make install` puts pyarrow into the bundle's .venv (pyproject.toml); elsewhere: python -m pip install pyarrow"


def read_rows(path: Path) -> tuple[list[str], list[dict]]:
    """(the column names, every row as a dict). An unreadable file is a UserError naming it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UserError(f"reading {path.name} needs pyarrow, which cannot be imported here: {exc}", INSTALL_HINT,
                        EXIT_ENV) from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise UserError(f"{path}: not a readable parquet file: {' '.join(str(exc).split())[:300]}",
                        "give a parquet file (e.g. one VERL's examples/data_preprocess scripts wrote)", EXIT_FAIL) \
            from None
    return list(table.column_names), table.to_pylist()
