#!/usr/bin/env bash
# Validate a GPU node end to end and collect the evidence under OUT_DIR (default ./gpu-validation):
# doctor, a cold kernel-cache warm-up of every TP head configuration, time to the first step with a
# cold and a warm cache, the gpu test suite, and the GDN benchmark. Needs a GPU, FLA and flash-qla.
#   bash tests/gpu/validate_node.sh [stage ...]     stages: doctor first-step-cold warmup first-step tests bench
#                                                   (default: all, in that order)
# Where it cannot do its job (no GPU, no torch, an unknown stage) it says why in one line and exits 2
# before any stage runs.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT_DIR=${OUT_DIR:-gpu-validation}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
STAGES=(doctor first-step-cold warmup first-step tests bench)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=("${STAGES[@]}")
status=0

refuse() { printf 'validate_node.sh: %s\n' "$*" >&2; exit 2; }

for s in "${stages[@]}"; do
  [[ " ${STAGES[*]} " == *" $s "* ]] || refuse "unknown stage '$s'; stages: ${STAGES[*]}"
done
probe='import torch, slime_flashqla; print(int(torch.cuda.is_available()))'
gpu=$("$PY" -c "$probe" 2>/dev/null) || refuse "$PY cannot import torch and slime_flashqla: run it in the environment that holds the stack (PYTHON=... picks another python)"
[ "$gpu" = 1 ] || refuse "no CUDA GPU is visible to $PY (torch.cuda.is_available() is False): this script validates a GPU node, so run it on one; a CPU machine runs the CPU suite with nox -s tests"

mkdir -p "$OUT_DIR"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-$OUT_DIR/tilelang-cache}
export PYTHONUNBUFFERED=1

stage() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

for s in "${stages[@]}"; do
  case "$s" in
    doctor)
      stage doctor
      $PY -m slime_flashqla doctor --json > "$OUT_DIR/doctor.json" || status=1
      $PY -m slime_flashqla doctor --require flashqla || status=1
      ;;
    first-step-cold)
      stage "first step, cold cache"
      rm -rf "$TILELANG_CACHE_DIR"
      $PY -m slime_flashqla.bench.first_step --backend flashqla --heads 16/32 --lengths 8192+24576 \
        | tee "$OUT_DIR/first_step_cold.json" || status=1
      ;;
    warmup)
      stage "warmup, all TP head configurations, flashqla and fla"
      $PY -m slime_flashqla warmup --heads 16/64,16/48,16/32,8/32,8/16,4/16,4/8,2/8,2/4 \
        --backends flashqla,fla --jobs "$JOBS" --json "$OUT_DIR/warmup.json" || status=1
      ;;
    first-step)
      stage "first step, warm cache"
      $PY -m slime_flashqla.bench.first_step --backend flashqla --heads 16/32 --lengths 8192+24576 \
        | tee "$OUT_DIR/first_step_warm.json" || status=1
      ;;
    tests)
      stage "gpu tests"
      $PY -m pytest tests -m gpu -rs -s -q -p no:cacheprovider --junitxml="$OUT_DIR/gpu_tests.xml" \
        2>&1 | tee "$OUT_DIR/gpu_tests.log" || status=1
      $PY -m slime_flashqla check 2>&1 | tee "$OUT_DIR/check.log" || status=1
      ;;
    bench)
      stage "GDN benchmark"
      # BENCH_ARGS is split into words on purpose: it holds several options.
      # shellcheck disable=SC2086
      $PY -m slime_flashqla.bench.gdn --json "$OUT_DIR/bench_gdn.json" --plot "$OUT_DIR/bench_gdn.png" \
        --markdown "$OUT_DIR/bench_gdn.md" ${BENCH_ARGS:-} || status=1
      ;;
  esac
done
exit $status
