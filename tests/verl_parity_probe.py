"""Run configs through VERL 0.8.0's own checks; the parity test runs this with .venv-verl/bin/python.

Reads a JSON list of cases `{"id", "cfg", "overrides"?, "gpus"?}` from the file named by argv[1],
composes each with verl_config.compose_config (Agent Lightning's config.yaml over VERL's
ppo_trainer.yaml, struct off), applies `gpus` as trainer.n_gpus_per_node, and runs
verl_config.run_verl_validate (TaskRunner add_* methods, validate_config, rollout dataclass) in this
one process, since `import verl` costs ~8 s and each extra config ~0.4 s. Writes
`[{"id", "errors": [...]}]` as JSON to argv[2].

    .venv-verl/bin/python tests/verl_parity_probe.py cases.json results.json
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from agentic_rl.edge import verl_config  # noqa: E402


def main(argv: list[str]) -> int:
    cases = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    warnings.simplefilter("ignore")
    results = []
    for case in cases:
        cfg, info = verl_config.compose_config(case["cfg"], case.get("overrides", []))
        assert info["verl_defaults_merged"], info
        if case.get("gpus") is not None:
            cfg.trainer.n_gpus_per_node = case["gpus"]
        results.append({"id": case["id"], "errors": verl_config.run_verl_validate(cfg)})
    Path(argv[2]).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
