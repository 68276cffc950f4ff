#!/usr/bin/env bash
# Issue 13's targets on one GPU, in one run, evidence under OUT_DIR (default ./stream-targets):
#   warmup        cold `slime-flashqla warmup` of the head configurations the streams run
#   stream-auto   200-step `auto` layer streams at each of AUTO_HEADS: compiles/autotunes after step 0, stalls
#   stream-kernel the three variants at kernel level on one warmed cache (auto, slime's FlashQLA path, slime's default)
#   stream-layer  the same at layer level
#   archive       cache export, every cache emptied, cache import, a fresh `auto` stream on the imported cache
#   first-step    a warm process to its first GDN layer step, three times, imports itemised by package
#   tests         the gpu tests of the kernels this run relies on, and `slime-flashqla check`
#   fla-floor     the `fla` backend's GPU parity with the lowest FLA the runtime supports, installed
#                 under FLA_FLOOR_SITE (pip install --target DIR flash-linear-attention==0.5.0 fla-core==0.5.0)
#   bash tests/gpu/stream_targets.sh [stage ...]    (default: all but fla-floor, in that order)
# DRY=1 runs the same stages on the CPU with the torch backend and tiny sizes (to test this script).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=$(mkdir -p "${OUT_DIR:-stream-targets}" && cd "${OUT_DIR:-stream-targets}" && pwd)
CACHE_ROOT=${CACHE_ROOT:-$OUT_DIR/cache}
# Every kernel cache this run fills, in one place: what `cache export` takes and the archive stage empties.
export TILELANG_CACHE_DIR=$CACHE_ROOT/tilelang TRITON_CACHE_DIR=$CACHE_ROOT/triton
export TORCHINDUCTOR_CACHE_DIR=$CACHE_ROOT/inductor PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-200}
AUTO_HEADS=${AUTO_HEADS:-16/32,2/8}
HEADS=${HEADS:-16/32}
# slime's FlashQLA path repeats q/k to Hv heads: its kernels are those of Hv/Hv, warmed beside ours.
WARM_HEADS=${WARM_HEADS:-16/32,2/8,32/32}
VARIANTS=${VARIANTS:-auto,flashqla-repeat,slime-fla}
if [ "${DRY:-0}" = 1 ]; then
  STEPS=4 WARM_HEADS=1/2 AUTO_HEADS=1/2 HEADS=1/2 VARIANTS=torch,torch-repeat
  common=(--device cpu --max-tokens 128 --median-len 48 --head-dim 16 --hidden-size 32)
  warm=(--device cpu --backends torch --max-tokens 128 --lengths 40+30)
  auto=(--backend torch)
else
  common=()
  warm=(--backends flashqla)
  auto=(--backend auto)
fi
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(warmup stream-auto stream-kernel stream-layer archive first-step tests)
status=0
stage() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
stream() { $PY -m slime_flashqla bench stream --steps "$STEPS" --plain "${common[@]}" "$@"; }

for s in "${stages[@]}"; do
  case "$s" in
    warmup)
      stage "warmup $WARM_HEADS, cold"
      $PY -m slime_flashqla warmup --heads "$WARM_HEADS" "${warm[@]}" --jobs "$JOBS" \
        --json "$OUT_DIR/warmup.json" || status=1
      ;;
    stream-auto)
      stage "stream: auto, layer, $AUTO_HEADS"
      stream "${auto[@]}" --heads "$AUTO_HEADS" --json "$OUT_DIR/stream_auto.json" \
        --plot "$OUT_DIR/stream_auto.png" || status=1
      ;;
    stream-kernel | stream-layer)
      level=${s#stream-}
      stage "stream: $VARIANTS, $level, $HEADS"
      stream --level "$level" --variants "$VARIANTS" --heads "$HEADS" --json "$OUT_DIR/stream_$level.json" \
        --plot "$OUT_DIR/stream_$level.png" || status=1
      ;;
    archive)
      stage "cache export, caches emptied, cache import, a fresh auto stream"
      $PY -m slime_flashqla cache export --force "$OUT_DIR/kernel-cache.tar" --tilelang-dir "$TILELANG_CACHE_DIR" \
        --triton-dir "$TRITON_CACHE_DIR" || status=1
      ls -l "$OUT_DIR/kernel-cache.tar"
      rm -rf "$CACHE_ROOT" && mkdir -p "$CACHE_ROOT"
      $PY -m slime_flashqla cache import "$OUT_DIR/kernel-cache.tar" --tilelang-dir "$TILELANG_CACHE_DIR" \
        --triton-dir "$TRITON_CACHE_DIR" || status=1
      stream "${auto[@]}" --heads "${AUTO_HEADS%%,*}" --json "$OUT_DIR/stream_imported.json" || status=1
      ;;
    first-step)
      stage "first step of a warm process, three times"
      for i in 1 2 3; do
        if [ "${DRY:-0}" = 1 ]; then
          echo "(first_step needs CUDA: skipped in the dry run)"
          break
        fi
        $PY -m slime_flashqla.bench.first_step --backend auto --heads "${HEADS%%,*}" --lengths 8192+24576 \
          > "$OUT_DIR/first_step_$i.json" || status=1
        tail -n 1 "$OUT_DIR/first_step_$i.json"
      done
      ;;
    tests)
      stage "gpu tests of the kernels this run relies on, and check"
      # The head configurations warmed above (16/32): the full TP sweep of test_gpu_parity.py
      # compiles every other configuration and belongs to `nox -s gpu_tests`.
      $PY -m pytest tests/runtime/triton_ops tests/runtime/kernels tests/runtime/layers/test_gpu_layers.py \
        tests/runtime/gdn/test_gpu_qk_l2norm.py tests/runtime/gdn/test_gpu_inputs.py -m gpu -rs -q \
        -p no:cacheprovider ${TESTS_ARGS:-} 2>&1 | tail -n 30 | tee "$OUT_DIR/gpu_tests.log" || status=1
      $PY -m slime_flashqla check 2>&1 | tail -n 30 | tee "$OUT_DIR/check.log" || status=1
      ;;
    fla-floor)
      stage "fla backend parity with FLA from ${FLA_FLOOR_SITE:?set FLA_FLOOR_SITE}"
      PYTHONPATH=$FLA_FLOOR_SITE:${PYTHONPATH:-} $PY -c "import fla; print('FLA', fla.__version__, fla.__file__)"
      PYTHONPATH=$FLA_FLOOR_SITE:${PYTHONPATH:-} $PY -m pytest tests/runtime/gdn/test_gpu_parity.py -m gpu -rs -q \
        -p no:cacheprovider -k "fla and not flashqla and (16-32 or states or gva or own)" 2>&1 | tail -n 20 \
        | tee "$OUT_DIR/fla_floor.log" || status=1
      ;;
    *) echo "unknown stage $s" >&2; exit 2 ;;
  esac
done
stage "done (status $status)"
exit $status
