#!/usr/bin/env bash
# Our GDN layer (`auto`) against slime's own layer classes on one GPU: time per step and peak memory
# at four packs, the short conv's launch configurations, GPU parity, the stall table of a warmed
# stream, and the first step with the kernel preload off and on (the targets of issue 19). In
# stages, evidence under OUT_DIR (default ./layer-targets):
#   tune     conv_tune: sweep the short conv's launch configurations, write the best into this
#            copy's source (and OUT_DIR/conv_tune.json), ours against FLA's conv at 4k/32k/64k tokens
#   apply    write OUT_DIR/conv_tune.json's configurations into this copy's source (a later call
#            on a fresh copy of the tree)
#   warmup   cold `slime-flashqla warmup` of ours (16/32, 2/8) and slime's repeated-q/k path (32/32)
#   compare  layer_compare: ours (auto) against slime's own layer classes, both models, four packs,
#            peak memory, and a kernel profile of each at 8192+24576
#   parity   the GPU tests of both layers against the float32 layer, and of the Triton ops
#   stream   `bench stream` of the auto layer after the warm-up, 16/32 and 2/8, with its stall table
#   firststep  the first step with the kernel preload off and on, alternating on one machine (ROUNDS
#            of each, 16/32 and 2/8): whether the preload's thread slows the step it runs beside
#   bash tools/gpu/layer_targets.sh stage ...      (SLIME_SOURCE names slime's checkout)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT_DIR=$(mkdir -p "${OUT_DIR:-layer-targets}" && cd "${OUT_DIR:-layer-targets}" && pwd)
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
STEPS=${STEPS:-60}
status=0
stage() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

for s in "$@"; do
  case "$s" in
    tune)
      stage "conv_tune sweep, applied"
      $PY tools/gpu/conv_tune.py --apply --json "$OUT_DIR/conv_tune.json" || status=1
      ;;
    apply)
      stage "conv configurations from $OUT_DIR/conv_tune.json"
      $PY tools/gpu/conv_tune.py --apply-from "$OUT_DIR/conv_tune.json" || status=1
      ;;
    warmup)
      stage "warmup 16/32,2/8,32/32, cold"
      $PY -m slime_flashqla warmup --heads 16/32,2/8,32/32 --backends flashqla --jobs 3 \
        --json "$OUT_DIR/warmup.json" || status=1
      ;;
    compare)
      stage "layers: ours against slime's own"
      $PY tools/gpu/layer_compare.py --slime-source "${SLIME_SOURCE:?SLIME_SOURCE names slime}" \
        --profile 8192+24576 --json "$OUT_DIR/layer_compare.json" || status=1
      ;;
    parity)
      stage "gpu tests: layers and Triton ops"
      $PY -m pytest -q -rs -m gpu tests/runtime/layers tests/runtime/triton_ops -p no:cacheprovider || status=1
      ;;
    stream)
      stage "bench stream, auto, 16/32 and 2/8, after the warm-up"
      $PY -m slime_flashqla bench stream --backend auto --heads 16/32,2/8 --steps "$STEPS" --plain \
        --json "$OUT_DIR/stream_auto.json" || status=1
      $PY tools/gpu/preload_stream.py report "$OUT_DIR/stream_auto.json" || status=1
      ;;
    firststep)
      modes=$(for _ in $(seq "${ROUNDS:-2}"); do printf 'off,on,'; done)
      stage "first step, preload ${modes%,}"
      $PY tools/gpu/preload_stream.py timeline --heads 16/32,2/8 --modes "${modes%,}" --steps 3 \
        --json "$OUT_DIR/first_step.json" || status=1
      ;;
    *)
      echo "unknown stage $s" >&2
      exit 2
      ;;
  esac
done
exit $status
