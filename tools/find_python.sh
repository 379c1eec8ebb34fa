#!/usr/bin/env bash
# Print the path of a Python interpreter of the given minor version (default 3.12), or fail.
# Looks at $PYTHON, plain pythonX.Y on PATH (pyenv shims included, which only work when that
# version is active), pyenv's own installs, then uv's; checks the version of each candidate.
set -euo pipefail
want="${1:-3.12}"

is_wanted() {
  [ -x "$1" ] || command -v "$1" >/dev/null 2>&1 || return 1
  [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]
}

candidates=()
[ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
candidates+=("python$want")
if command -v pyenv >/dev/null 2>&1; then
  root="$(pyenv root)"
  for dir in "$root"/versions/"$want"*; do
    [ -x "$dir/bin/python$want" ] && candidates+=("$dir/bin/python$want")
  done
fi
for dir in "$HOME"/.pyenv/versions/"$want"* /usr/local/bin /usr/bin; do
  [ -x "$dir/python$want" ] && candidates+=("$dir/python$want")
  [ -x "$dir/bin/python$want" ] && candidates+=("$dir/bin/python$want")
done
if command -v uv >/dev/null 2>&1; then
  found="$(uv python find "$want" 2>/dev/null || true)"
  [ -n "$found" ] && candidates+=("$found")
fi

for c in "${candidates[@]}"; do
  if is_wanted "$c"; then
    command -v "$c"
    exit 0
  fi
done
echo "Error: no Python $want interpreter found" >&2
echo "Hint: install one (pyenv install $want, or apt-get install python$want), or set PYTHON=/path/to/python$want" >&2
exit 3
