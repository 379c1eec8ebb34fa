#!/usr/bin/env bash
# Step 7: launch the training job (scripts/agentic_rl/training_job.py) in the background (nohup + setsid), one run per output folder.
# Run `bash scripts/start_training.sh --help` for usage and exit codes.
set -euo pipefail

S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
BUNDLE="$(dirname "$S")"

usage() {
  cat <<'EOF'
usage: start_training.sh --input-dir D [--output-dir O] [--config-file F] [--gpus 0,1] [--resume]
                         [--rehearse [--model-endpoint URL] [--sample N]] [-- HYDRA.OVERRIDES ...]

Starts the training job (scripts/agentic_rl/training_job.py) in the background (nohup, own session, stdin closed), appending its output to
O/training.log, and returns within a few seconds. One run per output folder: O/training.lock is
taken with flock and held by the job for its whole life.

  --input-dir D       the task folder (default: $EVO_INPUT_DIR)
  --output-dir O      run folder (default: $EVO_OUTPUT_DIR, else D/../outputs); created with
                      checkpoints/ and logs/
  --config-file F     config JSON (default: D/config.json)
  --gpus 0,1          physical GPU indices; default: check_gpu.py --required N --json picks N free
                      ones (N = trainer.n_gpus_per_node). Exported as CUDA_VISIBLE_DEVICES.
  --resume            continue from O/checkpoints (trainer.resume_mode=auto); refused without one
  --rehearse          CPU rehearsal of the whole launch path: an oracle model, no VERL, no GPU
  --model-endpoint U  rehearse against a real OpenAI-compatible /v1 server instead of the oracle
  --sample N          rehearse N train rows too
  -- OVERRIDES        Hydra dotlist overrides for the trainer config, e.g. -- trainer.total_epochs=1

Python: $PYTHON, else <bundle>/.venv/bin/python, else python3. $ARL_START_WAIT_S (default 3) is how
long it watches the job before returning.

example:
  bash scripts/start_training.sh --input-dir assets/example --output-dir /tmp/out --rehearse
  bash scripts/start_training.sh --input-dir "$EVO_INPUT_DIR" --gpus 0,3 -- trainer.total_epochs=1

exit codes:
  0  started (running, or a rehearsal that already completed); the next commands are printed
  1  the job died within its first seconds (log tail printed), --resume without a checkpoint,
     or check_gpu found too few free GPUs
  2  usage error
  3  environment missing (python, input folder, GPU driver)
  4  conflict: a live run (or its orphaned processes) holds the output folder
EOF
}

die() {  # die CODE MESSAGE HINT
  echo "Error: $2" >&2
  [[ -n ${3:-} ]] && echo "Hint: $3" >&2
  exit "$1"
}

need_value() {
  [[ $# -ge 2 && -n $2 && $2 != --* ]] || die 2 "$1 needs a value" "run \`start_training.sh --help\` for usage"
}

INPUT="${EVO_INPUT_DIR:-}" OUTPUT="${EVO_OUTPUT_DIR:-}" CONFIG="" GPUS="" ENDPOINT="" SAMPLE=""
RESUME=0 REHEARSE=0
OVERRIDES=()
while [[ $# -gt 0 ]]; do
  arg="$1"
  if [[ $arg == --*=* ]]; then  # --flag=value
    set -- "${arg%%=*}" "${arg#*=}" "${@:2}"
    arg="$1"
  fi
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --input-dir) need_value "$@"; INPUT="$2"; shift 2 ;;
    --output-dir) need_value "$@"; OUTPUT="$2"; shift 2 ;;
    --config-file) need_value "$@"; CONFIG="$2"; shift 2 ;;
    --gpus) need_value "$@"; GPUS="$2"; shift 2 ;;
    --model-endpoint) need_value "$@"; ENDPOINT="$2"; shift 2 ;;
    --sample) need_value "$@"; SAMPLE="$2"; shift 2 ;;
    --resume) RESUME=1; shift ;;
    --rehearse) REHEARSE=1; shift ;;
    --) shift; OVERRIDES=("$@"); break ;;
    *) die 2 "unknown argument: $arg" "overrides go after --, e.g. -- trainer.total_epochs=1; see --help" ;;
  esac
done

[[ -n $INPUT ]] || die 2 "no input folder given" "pass --input-dir D (or set EVO_INPUT_DIR)"
[[ -d $INPUT ]] || die 3 "input folder $INPUT does not exist" "check the path or EVO_INPUT_DIR"
[[ -z $GPUS || $GPUS =~ ^[0-9]+(,[0-9]+)*$ ]] || die 2 "--gpus $GPUS is not a list of GPU indices" "write e.g. --gpus 0,1"
[[ -z $SAMPLE || $SAMPLE =~ ^[0-9]+$ ]] || die 2 "--sample $SAMPLE is not a number" "write e.g. --sample 16"
if [[ $REHEARSE -eq 0 && ( -n $ENDPOINT || -n $SAMPLE ) ]]; then
  die 2 "--model-endpoint and --sample work only with --rehearse" "add --rehearse"
fi
if [[ -n $CONFIG ]]; then
  [[ -f $CONFIG ]] || die 3 "config file $CONFIG does not exist" "check --config-file"
  CONFIG="$(cd "$(dirname "$CONFIG")" && pwd -P)/$(basename "$CONFIG")"
fi

if [[ -n ${PYTHON:-} ]]; then PY="$PYTHON"
elif [[ -x $BUNDLE/.venv/bin/python ]]; then PY="$BUNDLE/.venv/bin/python"
else PY="$(command -v python3 || true)"
fi
if [[ -z $PY ]] || ! command -v "$PY" >/dev/null; then
  die 3 "no Python found${PY:+ at $PY}" "set PYTHON, or run \`make install\` in $BUNDLE"
fi

INPUT="$(cd "$INPUT" && pwd -P)"
# The internals are the package scripts/agentic_rl, run as modules; PYTHONSAFEPATH keeps the cwd off sys.path.
PKG_PATH="$S${PYTHONPATH:+:$PYTHONPATH}"
run_module() { PYTHONPATH="$PKG_PATH" PYTHONSAFEPATH=1 "$PY" -m "agentic_rl.$1" "${@:2}"; }
OUTPUT="${OUTPUT:-$INPUT/../outputs}"
mkdir -p "$OUTPUT/checkpoints" "$OUTPUT/logs"
OUTPUT="$(cd "$OUTPUT" && pwd -P)"
LOG="$OUTPUT/training.log"
unset EVO_RUN_ID  # a fresh id below; an inherited one would make this shell look like part of an old run

# The lock: fd 9 stays open in the job (inherited), so the lock lives exactly as long as the job.
# Helpers run with 9>&- so none of them can keep it.
exec 9>>"$OUTPUT/training.lock"
if ! flock -n 9; then
  run_module launcher locked --output-dir "$OUTPUT" 9>&- </dev/null || exit $?
  exit 4
fi

prep=(prepare --output-dir "$OUTPUT" --input-dir "$INPUT")
[[ -n $CONFIG ]] && prep+=(--config-file "$CONFIG")
[[ $RESUME -eq 1 ]] && prep+=(--resume)
[[ $REHEARSE -eq 1 ]] && prep+=(--rehearse)
prepared="$(run_module launcher "${prep[@]}" -- "${OVERRIDES[@]}" 9>&- </dev/null)" || exit $?
read -r RUN_ID NGPUS <<<"$prepared"

if [[ $REHEARSE -eq 0 && -z $GPUS ]]; then
  gpu_args=(--required "$NGPUS" --json)
  cfg_file="${CONFIG:-$INPUT/config.json}"
  [[ -f $cfg_file ]] && gpu_args+=(--config "$cfg_file")
  gpu_json="$("$PY" "$S/check_gpu.py" "${gpu_args[@]}" 9>&- </dev/null)" || exit $?
  GPUS="$(printf '%s' "$gpu_json" | run_module launcher selected 9>&-)"
fi
if [[ -n $GPUS ]]; then
  export CUDA_VISIBLE_DEVICES="$GPUS"
fi

cmd=(env "PYTHONPATH=$PKG_PATH" PYTHONSAFEPATH=1 "$PY" -m agentic_rl.training_job --input-dir "$INPUT" --output-dir "$OUTPUT" --run-id "$RUN_ID")
[[ -n $CONFIG ]] && cmd+=(--config-file "$CONFIG")
[[ -n $GPUS ]] && cmd+=(--gpus "$GPUS")
[[ $RESUME -eq 1 ]] && cmd+=(--resume)
[[ $REHEARSE -eq 1 ]] && cmd+=(--rehearse)
[[ -n $ENDPOINT ]] && cmd+=(--model-endpoint "$ENDPOINT")
[[ -n $SAMPLE ]] && cmd+=(--sample "$SAMPLE")
[[ ${#OVERRIDES[@]} -gt 0 ]] && cmd+=(-- "${OVERRIDES[@]}")
MODE=train
[[ $REHEARSE -eq 1 ]] && MODE=rehearse

echo "=== start_training.sh $(date -Iseconds): run $RUN_ID, mode $MODE, GPUs ${GPUS:-none} ===" >>"$LOG"
# No job control in a script: setsid(1) need not fork, so $! is the job's own pid. EVO_RUN_ID goes
# to the job only: the job's final clean-up kills every process carrying it, our helpers included.
EVO_RUN_ID="$RUN_ID" nohup setsid "${cmd[@]}" >>"$LOG" 2>&1 </dev/null &
PID=$!

rec=(record --output-dir "$OUTPUT" --pid "$PID" --run-id "$RUN_ID" --input-dir "$INPUT" --mode "$MODE")
[[ -n $CONFIG ]] && rec+=(--config-file "$CONFIG")
[[ -n $GPUS ]] && rec+=(--gpus "$GPUS")
run_module launcher "${rec[@]}" 9>&- </dev/null
exec 9>&-  # the job holds the lock from here on

if ! run_module launcher wait --output-dir "$OUTPUT" --pid "$PID" --seconds "${ARL_START_WAIT_S:-3}" \
    </dev/null; then
  code=0
  wait "$PID" || code=$?
  echo "Error: the job (pid $PID) exited with code $code within its first seconds; last lines of $LOG:" >&2
  tail -n 20 "$LOG" >&2
  echo "Hint: fix what the log says and start again; details: python scripts/check_status.py --output-dir $OUTPUT" >&2
  exit 1
fi

# Print commands that work from here: relative to the bundle when we are in it.
if [[ $PWD -ef $BUNDLE ]]; then SHOWN="scripts"; else SHOWN="$S"; fi
q_out="$(printf '%q' "$OUTPUT")"
cat <<EOF
started run $RUN_ID: pid $PID, mode $MODE, GPUs ${GPUS:-none}
log:     $LOG
status:  python $SHOWN/check_status.py --output-dir $q_out
follow:  tail -f $q_out/training.log
stop:    python $SHOWN/stop_training.py --output-dir $q_out
EOF
