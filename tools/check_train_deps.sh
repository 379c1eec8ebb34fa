#!/usr/bin/env bash
# Prove the GPU training stack installs, from registry metadata only (no torch/vLLM wheel is
# fetched: uv reads PEP 658 .metadata files). Usage: tools/check_train_deps.sh UV PYTHON
#   1. the registry is probed; only a connection-level failure (DNS, refused, timeout, no route)
#      counts as unreachable, which prints "skipped: registry unreachable" and exits 0;
#   2. pyproject.toml + tools/train-stack.in + tools/train-overrides.txt must resolve for
#      Python 3.12 on x86_64-manylinux_2_28 (what `make lock-train` writes);
#   3. tools/train-stack.lock.txt, what `make install-train` installs, must resolve as it is
#      (against the index pages step 2 just fetched);
#   4. a lock that differs from today's fresh resolve is reported, not failed.
# The index is uv's (PyPI unless UV_DEFAULT_INDEX / UV_INDEX_URL say otherwise). This machine's
# pip.conf also names /opt/wheels and file:///opt/pypi/simple; they are deliberately not used:
# a fresh GPU machine has only the registry.
set -euo pipefail
uv="${1:?usage: check_train_deps.sh UV PYTHON}"
py="${2:?usage: check_train_deps.sh UV PYTHON}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
index="${UV_DEFAULT_INDEX:-${UV_INDEX_URL:-https://pypi.org/simple}}"
limit="${CHECK_TRAIN_DEPS_TIMEOUT:-180}"

# Exit 0: reachable; 3: unreachable (connection-level); 1: reachable but failing (TLS, HTTP status).
probe_rc=0
reason="$("$py" - "${index%/}/verl/" <<'EOF'
import socket, ssl, sys, urllib.error, urllib.request
url = sys.argv[1]
req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
try:
    urllib.request.urlopen(req, timeout=10).close()
except urllib.error.HTTPError as e:
    print(f"HTTP {e.code} from {url}"); sys.exit(1)
except (urllib.error.URLError, OSError) as e:
    r = getattr(e, "reason", e)
    if isinstance(r, ssl.SSLError):
        print(f"TLS error from {url}: {r}"); sys.exit(1)
    if isinstance(r, (socket.gaierror, socket.timeout, TimeoutError, ConnectionError, OSError)):
        print(f"{url}: {r}"); sys.exit(3)
    print(f"{url}: {r}"); sys.exit(1)
EOF
)" || probe_rc=$?
if [ "$probe_rc" = 3 ]; then
  echo "check-train-deps: skipped: registry unreachable ($reason)"
  exit 0
elif [ "$probe_rc" != 0 ]; then
  echo "check-train-deps: FAILED: the registry answered but not usably: $reason" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(--override "$here/train-overrides.txt" --python "$py" --python-version 3.12
        --python-platform x86_64-manylinux_2_28 --no-python-downloads --quiet)

resolve() {  # resolve OUT INPUT... [--offline]: a resolve that fails or hangs fails the check
  local out="$1" rc=0
  shift
  if [ "${*: -1}" = --offline ]; then  # offline first; online where the cache lacks something
    timeout "$limit" "$uv" pip compile "$@" "${common[@]}" --no-header --no-annotate -o "$out" 2>/dev/null && return 0
    set -- "${@:1:$#-1}"
  fi
  timeout "$limit" "$uv" pip compile "$@" "${common[@]}" --no-header --no-annotate -o "$out" || rc=$?
  if [ "$rc" = 124 ]; then
    echo "check-train-deps: FAILED: resolving $* took longer than ${limit}s" >&2
    exit 1
  elif [ "$rc" != 0 ]; then
    echo "check-train-deps: FAILED: $* does not resolve for Python 3.12 / x86_64-manylinux_2_28 (uv's reason above)" >&2
    exit 1
  fi
}

cd "$root"
resolve "$tmp/fresh.txt" pyproject.toml tools/train-stack.in
# --offline: the index pages the first resolve fetched seconds ago are reused, not fetched again
# (some registry proxies strip the cache headers, so every revalidation is a full page: ~95 MB).
resolve "$tmp/locked.txt" tools/train-stack.lock.txt --offline
grep -v '^ *#' tools/train-stack.lock.txt | grep -v '^ ' > "$tmp/lock-pins.txt"
if ! cmp -s "$tmp/lock-pins.txt" "$tmp/locked.txt"; then
  echo "check-train-deps: FAILED: tools/train-stack.lock.txt is not a complete, consistent set (uv would add or change:)" >&2
  diff "$tmp/lock-pins.txt" "$tmp/locked.txt" >&2 || true
  exit 1
fi
pins="$(wc -l < "$tmp/locked.txt")"
pick() { grep -E "^$1==" "$tmp/locked.txt" | tr '\n' ' '; }
echo "check-train-deps: ok: $pins packages resolve for Python 3.12 / x86_64-manylinux_2_28: $(pick verl)$(pick vllm)$(pick torch)$(pick numpy)$(pick agentlightning)"
if ! cmp -s "$tmp/fresh.txt" "$tmp/locked.txt"; then
  changed="$(diff "$tmp/locked.txt" "$tmp/fresh.txt" | grep -c '^>' || true)"
  echo "check-train-deps: note: a fresh resolve today differs from the lock in $changed package(s); \`make lock-train\` refreshes it"
fi
