#!/usr/bin/env bash
# shellcheck disable=SC2329 # the stage functions are called through run_stage
# RL-like pack streams on one GPU: the cold warm-up, compiles, autotunes and stalls after step 0 of
# `auto` and slime's two paths, the kernel-cache archive round trip, and a warm process's first step
# (the targets of issue 13). In one run, evidence under OUT_DIR (default: a new folder under $TMPDIR):
#   warmup        cold `slime-flashqla warmup` of the head configurations the streams run
#   stream-auto   200-step `auto` layer streams at each of AUTO_HEADS: compiles/autotunes after step 0, stalls
#   stream-kernel the three variants at kernel level on one warmed cache (auto, slime's FlashQLA path, slime's default)
#   stream-layer  the same at layer level
#   archive       cache export, every cache emptied, cache import, a fresh `auto` stream on the imported cache
#   first-step    a warm process to its first GDN layer step, three times, imports itemised by package
#   tests         the gpu tests of the kernels this run relies on, and `slime-flashqla check`
#   fla-floor     the `fla` backend's GPU parity with the lowest FLA the runtime supports, installed
#                 under FLA_FLOOR_SITE (pip install --target DIR flash-linear-attention==0.5.0 fla-core==0.5.0)
#   bash tools/gpu/stream_targets.sh [stage ...]    (default: all but fla-floor, in that order)
# Needs a GPU, the stack (README's main command), matplotlib for the stream stages' plots and pytest
# for the test stages; where one is missing, or a stage is unknown, it says so in one line and exits 2
# before any stage runs. Ctrl-C or SIGTERM stops the running stage and the script (exit 130/143).
# DRY=1 runs the same stages on the CPU with the torch backend and tiny sizes (to test this script).
set -uo pipefail
SCRIPT=stream_targets.sh
CALLER_DIR=$PWD
. "$(dirname "$0")/node_script.sh" || exit 2
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
AUTO_HEADS=${AUTO_HEADS:-16/32,2/8}
HEADS=${HEADS:-16/32}
# slime's FlashQLA path repeats q/k to Hv heads: its kernels are those of Hv/Hv, warmed beside ours.
WARM_HEADS=${WARM_HEADS:-16/32,2/8,32/32}
VARIANTS=${VARIANTS:-auto,flashqla-repeat,slime-fla}
if [ "${DRY:-0}" = 1 ]; then
  STEPS=${STEPS:-4} WARM_HEADS=1/2 AUTO_HEADS=1/2 HEADS=1/2 VARIANTS=torch,torch-repeat
  common=(--device cpu --max-tokens 128 --median-len 48 --head-dim 16 --hidden-size 32)
  warm=(--device cpu --backends torch --max-tokens 128 --lengths 40+30)
  auto=(--backend torch)
else
  STEPS=${STEPS:-200}
  common=()
  warm=(--backends flashqla)
  auto=(--backend auto)
fi
STAGES="warmup stream-auto stream-kernel stream-layer archive first-step tests fla-floor"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(warmup stream-auto stream-kernel stream-layer archive first-step tests)

# Everything this run needs, checked before its first stage.
require_stages "$STAGES" "${stages[@]}"
[ "${DRY:-0}" = 1 ] || require_gpu "this script measures a GPU node, so run it on one (DRY=1 runs its stages on the CPU with tiny sizes)"
plots=() tests=()
for s in "${stages[@]}"; do
  case $s in
    stream-auto | stream-kernel | stream-layer) plots+=("$s") ;;
    tests | fla-floor) tests+=("$s") ;;
  esac
done
[ ${#plots[@]} -eq 0 ] || require_modules "the stages ${plots[*]} (--plot)" matplotlib
[ ${#tests[@]} -eq 0 ] || require_modules "the stages ${tests[*]}" pytest
[[ " ${stages[*]} " != *" fla-floor "* || -n "${FLA_FLOOR_SITE:-}" ]] ||
  refuse "the stage fla-floor needs FLA_FLOOR_SITE, the folder FLA's floor is installed in (pip install --target DIR flash-linear-attention==0.5.0 fla-core==0.5.0)"

make_out_dir stream-targets
CACHE_ROOT=${CACHE_ROOT:-$OUT_DIR/cache}
# Every kernel cache this run fills, in one place: what `cache export` takes and the archive stage empties.
export TILELANG_CACHE_DIR=$CACHE_ROOT/tilelang TRITON_CACHE_DIR=$CACHE_ROOT/triton
export TORCHINDUCTOR_CACHE_DIR=$CACHE_ROOT/inductor PYTHONUNBUFFERED=1
status=0
stream() { $PY -m slime_flashqla bench stream --steps "$STEPS" --plain "${common[@]}" "$@"; }

warmup() {
  $PY -m slime_flashqla warmup --heads "$WARM_HEADS" "${warm[@]}" --jobs "$JOBS" --json "$OUT_DIR/warmup.json"
}

stream_auto() {
  stream "${auto[@]}" --heads "$AUTO_HEADS" --json "$OUT_DIR/stream_auto.json" --plot "$OUT_DIR/stream_auto.png"
}

stream_level() {
  stream --level "$1" --variants "$VARIANTS" --heads "$HEADS" --json "$OUT_DIR/stream_$1.json" \
    --plot "$OUT_DIR/stream_$1.png"
}

archive() {
  local rc=0
  $PY -m slime_flashqla cache export --force "$OUT_DIR/kernel-cache.tar" --tilelang-dir "$TILELANG_CACHE_DIR" \
    --triton-dir "$TRITON_CACHE_DIR" || return 1
  ls -l "$OUT_DIR/kernel-cache.tar"
  rm -rf "$CACHE_ROOT" && mkdir -p "$CACHE_ROOT"
  $PY -m slime_flashqla cache import "$OUT_DIR/kernel-cache.tar" --tilelang-dir "$TILELANG_CACHE_DIR" \
    --triton-dir "$TRITON_CACHE_DIR" || rc=1
  stream "${auto[@]}" --heads "${AUTO_HEADS%%,*}" --json "$OUT_DIR/stream_imported.json" || rc=1
  return "$rc"
}

first_step() {
  local i rc=0
  if [ "${DRY:-0}" = 1 ]; then
    echo "(first_step needs CUDA: skipped in the dry run)"
    return 0
  fi
  for i in 1 2 3; do
    $PY -m slime_flashqla.bench.first_step --backend auto --heads "${HEADS%%,*}" --lengths 8192+24576 \
      > "$OUT_DIR/first_step_$i.json" || rc=1
    tail -n 1 "$OUT_DIR/first_step_$i.json"
  done
  return "$rc"
}

gpu_tests() {
  local rc=0
  # The head configurations warmed above (16/32): the full TP sweep of test_gpu_parity.py
  # compiles every other configuration and belongs to `nox -s gpu_tests`.
  # TESTS_ARGS is split into words on purpose: it holds several options.
  # shellcheck disable=SC2086
  $PY -m pytest tests/runtime/triton_ops tests/runtime/kernels tests/runtime/layers/test_gpu_layers.py \
    tests/runtime/gdn/test_gpu_qk_l2norm.py tests/runtime/gdn/test_gpu_inputs.py -m gpu -rs -q \
    -p no:cacheprovider ${TESTS_ARGS:-} 2>&1 | tail -n 30 | tee "$OUT_DIR/gpu_tests.log" || rc=1
  $PY -m slime_flashqla check 2>&1 | tail -n 30 | tee "$OUT_DIR/check.log" || rc=1
  return "$rc"
}

fla_floor() {
  PYTHONPATH=$FLA_FLOOR_SITE:${PYTHONPATH:-} $PY -c "import fla; print('FLA', fla.__version__, fla.__file__)"
  PYTHONPATH=$FLA_FLOOR_SITE:${PYTHONPATH:-} $PY -m pytest tests/runtime/gdn/test_gpu_parity.py -m gpu -rs -q \
    -p no:cacheprovider -k "fla and not flashqla and (16-32 or states or gva or own)" 2>&1 | tail -n 20 \
    | tee "$OUT_DIR/fla_floor.log"
}

for s in "${stages[@]}"; do
  case "$s" in
    warmup) run_stage "warmup $WARM_HEADS, cold" warmup ;;
    stream-auto) run_stage "stream: auto, layer, $AUTO_HEADS" stream_auto ;;
    stream-kernel | stream-layer) run_stage "stream: $VARIANTS, ${s#stream-}, $HEADS" stream_level "${s#stream-}" ;;
    archive) run_stage "cache export, caches emptied, cache import, a fresh auto stream" archive ;;
    first-step) run_stage "first step of a warm process, three times" first_step ;;
    tests) run_stage "gpu tests of the kernels this run relies on, and check" gpu_tests ;;
    fla-floor) run_stage "fla backend parity with FLA from $FLA_FLOOR_SITE" fla_floor ;;
  esac || status=1
done
printf '\n==== done (status %s, %s): evidence in %s\n' "$status" "$(date -u +%H:%M:%S)" "$OUT_DIR"
exit $status
