"""check_config.py: one config.json checked alone, in-process and as a subprocess from another cwd."""

from __future__ import annotations




