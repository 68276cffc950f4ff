#!/usr/bin/env bash
# shellcheck disable=SC2329 # the stage functions are called through run_stage
# Validate a GPU node end to end and collect the evidence under OUT_DIR (default: a new folder under
# $TMPDIR): doctor, a cold kernel-cache warm-up of every TP head configuration, time to the first step
# with a cold and a warm cache, the gpu test suite, and the GDN benchmark. Needs a GPU, the stack (FLA
# and flash-qla: the README's main command), pytest for the tests stage and matplotlib for the bench
# stage's plot.
#   bash tools/gpu/validate_node.sh [stage ...]     stages: doctor first-step-cold warmup first-step tests bench
#                                                   (default: all, in that order)
# Where it cannot do its job (no GPU, no torch, a missing module, an unknown stage) it says why in one
# line and exits 2 before any stage runs. Ctrl-C or SIGTERM stops the running stage and the script
# (exit 130/143).
set -uo pipefail
SCRIPT=validate_node.sh
CALLER_DIR=$PWD
. "$(dirname "$0")/node_script.sh" || exit 2
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
STAGES="doctor first-step-cold warmup first-step tests bench"
stages=("$@")
# shellcheck disable=SC2206 # the stage names are words
[ ${#stages[@]} -gt 0 ] || stages=($STAGES)

require_stages "$STAGES" "${stages[@]}"
require_gpu "this script validates a GPU node, so run it on one; a CPU machine runs the CPU suite with nox -s tests"
[[ " ${stages[*]} " != *" tests "* ]] || require_modules "the stage tests" pytest
[[ " ${stages[*]} " != *" bench "* ]] || require_modules "the stage bench (--plot)" matplotlib

make_out_dir gpu-validation
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-$OUT_DIR/tilelang-cache}
export PYTHONUNBUFFERED=1
status=0

doctor() {
  local rc=0
  $PY -m slime_flashqla doctor --json > "$OUT_DIR/doctor.json" || rc=1
  $PY -m slime_flashqla doctor --require flashqla || rc=1
  return "$rc"
}

first_step() {  # the file's name
  $PY -m slime_flashqla.bench.first_step --backend flashqla --heads 16/32 --lengths 8192+24576 | tee "$OUT_DIR/$1"
}

first_step_cold() {
  rm -rf "$TILELANG_CACHE_DIR"
  first_step first_step_cold.json
}

warmup() {
  $PY -m slime_flashqla warmup --heads 16/64,16/48,16/32,8/32,8/16,4/16,4/8,2/8,2/4 \
    --backends flashqla,fla --jobs "$JOBS" --json "$OUT_DIR/warmup.json"
}

gpu_tests() {
  local rc=0
  $PY -m pytest tests -m gpu -rs -s -q -p no:cacheprovider --junitxml="$OUT_DIR/gpu_tests.xml" \
    2>&1 | tee "$OUT_DIR/gpu_tests.log" || rc=1
  $PY -m slime_flashqla check 2>&1 | tee "$OUT_DIR/check.log" || rc=1
  return "$rc"
}

bench() {
  # BENCH_ARGS is split into words on purpose: it holds several options.
  # shellcheck disable=SC2086
  $PY -m slime_flashqla.bench.gdn --json "$OUT_DIR/bench_gdn.json" --plot "$OUT_DIR/bench_gdn.png" \
    --markdown "$OUT_DIR/bench_gdn.md" ${BENCH_ARGS:-}
}

for s in "${stages[@]}"; do
  case "$s" in
    doctor) run_stage doctor doctor ;;
    first-step-cold) run_stage "first step, cold cache" first_step_cold ;;
    warmup) run_stage "warmup, all TP head configurations, flashqla and fla" warmup ;;
    first-step) run_stage "first step, warm cache" first_step first_step_warm.json ;;
    tests) run_stage "gpu tests" gpu_tests ;;
    bench) run_stage "GDN benchmark" bench ;;
  esac || status=1
done
printf '\n==== done (status %s, %s): evidence in %s\n' "$status" "$(date -u +%H:%M:%S)" "$OUT_DIR"
exit $status
