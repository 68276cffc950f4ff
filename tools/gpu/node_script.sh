# shellcheck shell=bash
# Sourced by the GPU node scripts (validate_node.sh, stream_targets.sh): what they check before their
# first stage, where their evidence goes, and how a stage runs. The script sets SCRIPT (its name) and
# PY (the python of the stack) first.

# One line on stderr, exit 2: the script cannot do its job here, and nothing has started.
refuse() {
  printf '%s: %s\n' "$SCRIPT" "$*" >&2
  exit 2
}

# require_stages "known stages" stage...: every stage asked for is one of the known ones.
require_stages() {
  local known=$1 stage
  shift
  for stage in "$@"; do
    [[ " $known " == *" $stage "* ]] || refuse "unknown stage '$stage'; stages: $known"
  done
}

# require_gpu "why": torch and slime_flashqla import, and torch sees a CUDA GPU.
require_gpu() {
  local gpu
  gpu=$("$PY" -c 'import torch, slime_flashqla; print(int(torch.cuda.is_available()))' 2>/dev/null) ||
    refuse "$PY cannot import torch and slime_flashqla: run it in the environment that holds the stack (PYTHON=... picks another python)"
  [ "$gpu" = 1 ] || refuse "no CUDA GPU is visible to $PY (torch.cuda.is_available() is False): $1"
}

# require_modules "the stages that need them" module...: each imports, else one line with the pip command that
# installs the missing ones (pytest at env/dev-tools.txt's pins; matplotlib is the runtime's `plot` extra).
require_modules() {
  local who=$1 missing specs=() module
  shift
  missing=$("$PY" - "$@" <<'PYTHON'
import importlib
import sys

missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        missing.append(name)
print(" ".join(missing))
PYTHON
  ) || refuse "$PY could not check for $*"
  [ -z "$missing" ] && return 0
  for module in $missing; do
    case $module in
      pytest) mapfile -t -O "${#specs[@]}" specs < <(grep -E '^pytest(-timeout)?==' env/dev-tools.txt) ;;
      *) specs+=("$module") ;;
    esac
  done
  refuse "$who need ${missing// /, }, which $PY cannot import; install with: $PY -m pip install ${specs[*]}"
}

# make_out_dir NAME: OUT_DIR (relative to where the script was started), else a new folder under
# $TMPDIR; never the checkout unless asked. Prints where the evidence goes.
make_out_dir() {
  if [ -n "${OUT_DIR:-}" ]; then
    [[ $OUT_DIR == /* ]] || OUT_DIR=$CALLER_DIR/$OUT_DIR
    mkdir -p "$OUT_DIR" || refuse "cannot create OUT_DIR=$OUT_DIR"
    OUT_DIR=$(cd "$OUT_DIR" && pwd)
  else
    OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || refuse "cannot create a folder under ${TMPDIR:-/tmp}: set OUT_DIR"
  fi
  printf '%s: evidence in %s (OUT_DIR picks the folder)\n' "$SCRIPT" "$OUT_DIR"
}

# Each stage runs as a job in a process group of its own (job control on), and the script waits for
# it: a signal to the script, wherever it comes from (Ctrl-C reaches the script's own group only,
# `kill` and `timeout` its PID), goes to the whole stage, and no later stage starts.
set -m
STAGE_PID=
on_signal() {
  trap '' INT TERM HUP
  if [ -n "$STAGE_PID" ]; then
    kill -s "$1" -- "-$STAGE_PID" 2>/dev/null
    wait "$STAGE_PID"
  fi
  printf '%s: stopped by SIG%s%s\n' "$SCRIPT" "$1" "${OUT_DIR:+; evidence so far in $OUT_DIR}" >&2
  exit "$2"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# run_stage "title" command...: the stage's header, then the command as a job of its own; its status.
run_stage() {
  local status
  printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"
  shift
  # In the job, a signal ends the stage once its running command has stopped, before the next one.
  (
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    "$@"
  ) &
  STAGE_PID=$!
  wait "$STAGE_PID"
  status=$?
  STAGE_PID=
  return "$status"
}
