#!/usr/bin/env bash
# make demo: the whole workflow on assets/example, as far as this machine allows, then the
# tool-using agent of assets/tool_example rehearsed with its oracle file, and the same agent on the
# real MCP server of assets/mcp_example (mcp-server-calculator, as Agent Lightning's calc_x runs it),
# then the learning self-test.
# Works on a copy (build/demo/task), never on assets/example itself. Without a GPU (check_gpu
# exits 3) or without verl, step 7 is the CPU rehearsal of the launch path.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
demo="$root/build/demo"
task="$demo/task"
out="$demo/outputs"
models="$demo/models"

step() { printf '\n== %s\n' "$*"; }

rm -rf "$demo"
mkdir -p "$demo"
cp -r "$root/assets/example" "$task"
export EVO_INPUT_DIR="$task" EVO_OUTPUT_DIR="$out" EVO_MODELS_DIR="$models"

step "1-2. validate_data.py"
"$py" "$root/scripts/validate_data.py" "$task"

step "3. check_gpu.py --required 1"
mode=(--rehearse)
gpu_rc=0
"$py" "$root/scripts/check_gpu.py" --required 1 --config "$task/config.json" || gpu_rc=$?
if [ "$gpu_rc" -eq 0 ] && "$py" -c 'import verl' >/dev/null 2>&1; then
  gpus="$("$py" "$root/scripts/check_gpu.py" --required 1 --json | "$py" -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["data"]["selected"])))')"
  mode=(--gpus "$gpus")
else
  echo "(no usable GPU or no verl here: step 7 runs the CPU rehearsal)"
fi

step "4. check_model.py (a tiny local model built for the demo)"
# Its context holds the tool example's trajectories (2048 + 2048 tokens): check_model.py --config names this flag
# for a tiny model too short for a task.
"$py" "$root/tools/make_tiny_model.py" "$models/tiny-qwen2" --max-position-embeddings 4096 >/dev/null
"$py" "$root/scripts/check_model.py" --list
"$py" "$root/scripts/check_model.py" --model tiny-qwen2 --set-agent "$task"

step "5-6. key config, output folder $out"
"$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(json.dumps({k: c.get(k) for k in ("algorithm","data","trainer")}, indent=1))' "$task/config.json"

step "7. start_training.sh ${mode[*]}"
bash "$root/scripts/start_training.sh" --input-dir "$task" --output-dir "$out" "${mode[@]}"

step "8. check_status.py --watch (until the run ends)"
"$py" "$root/scripts/check_status.py" --output-dir "$out" --watch 2 || true
rc=0
"$py" "$root/scripts/check_status.py" --output-dir "$out" || rc=$?
if [ -f "$out/rehearsal.json" ]; then
  "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("rehearsal: mean reward", r.get("mean_reward"), "failed", r.get("failed"))' "$out/rehearsal.json"
fi

# A tool task copied from assets/NAME, validated and rehearsed with its oracle file, so the agent's real tool
# loop runs through the gateway: rehearse_tool_task NAME "what it is".
rehearse_tool_task() {
  local t="$demo/$1_task" o="$demo/$1_outputs"
  cp -r "$root/assets/$1" "$t"
  # the tiny model, so that validate_data renders the task with a real chat template and reads its tool calls back
  "$py" "$root/scripts/check_model.py" --model tiny-qwen2 --set-agent "$t" >/dev/null
  step "$2: validate_data.py --oracle (tool schemas, the chat template and tool parser, the oracle's answers)"
  "$py" "$root/scripts/validate_data.py" "$t" --oracle "$t/oracle.jsonl" || rc=$?
  step "$2: start_training.sh --rehearse --oracle (the oracle plays each row's calculator calls)"
  bash "$root/scripts/start_training.sh" --input-dir "$t" --output-dir "$o" --rehearse --oracle "$t/oracle.jsonl"
  "$py" "$root/scripts/check_status.py" --output-dir "$o" --watch 2 >/dev/null || true
  "$py" "$root/scripts/check_status.py" --output-dir "$o" --samples 1 || rc=$?
}

# The tool-using agent: assets/tool_example (calc_x word problems, a calculator in tools.py).
rehearse_tool_task tool_example "tool agent"
# MCP tools: assets/mcp_example declares mcp-server-calculator in agent.json's mcp_servers; the run starts
# it once, behind the hub every rollout's agent calls (edge/mcp_hub.py).
rehearse_tool_task mcp_example "MCP tools"

# Last, does training learn here? assets/selftest trained for its own N steps through the real loop
# (on CPU; on the GPUs step 3 picked where a GPU and verl are), ending with the verdict line.
step "self-test: scripts/selftest.py (the reward a random tiny model can reach must go up)"
selftest_where=()
if [ "${mode[0]}" = --gpus ]; then selftest_where=(--gpus "${mode[1]}"); fi
"$py" "$root/scripts/selftest.py" --output-dir "$demo/selftest" "${selftest_where[@]}" || rc=$?
exit "$rc"
