#!/usr/bin/env bash
# Step 7: launch the training job in the background, one run per output folder.
# A thin shell over the launcher (scripts/agentic_rl/launch/launcher.py): it finds the bundle's Python and
# hands every argument on. Run `bash scripts/start_training.sh --help` for usage and exit codes.
set -euo pipefail

S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
BUNDLE="$(dirname "$S")"

if [[ -n ${PYTHON:-} ]]; then PY="$PYTHON"
elif [[ -x $BUNDLE/.venv/bin/python ]]; then PY="$BUNDLE/.venv/bin/python"
else PY="$(command -v python3 || true)"
fi
if [[ -z $PY ]] || ! command -v "$PY" >/dev/null; then
  echo "Error: no Python found${PY:+ at $PY}" >&2
  echo "Hint: set PYTHON, or run \`make install\` in $BUNDLE" >&2
  exit 3
fi

# The internals are the package scripts/agentic_rl, run as a module; PYTHONSAFEPATH keeps the cwd off sys.path.
# The bootstrap goes first: an old or bare python3 gets exit 3 (or a rerun under .venv) before the
# launcher's modern syntax is read.
PYTHONPATH="$S${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 exec "$PY" -m agentic_rl.bootstrap agentic_rl.launch.launcher "$@" </dev/null
