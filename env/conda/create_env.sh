#!/usr/bin/env bash
# Create, or bring up to date, a conda environment for slime-flashqla training:
# Python, PyTorch with CUDA, FLA, FlashQLA (unless --no-flashqla) and the runtime from
# this checkout; then check it with `slime-flashqla doctor`.
#
# It installs nothing that is not listed in the files beside it (environment.yml,
# flashqla.yml), which tests/conda checks against env/versions.toml.  Running it again
# is safe: an existing prefix is updated in place (--recreate starts from scratch).
# It needs conda, mamba or micromamba already installed: it downloads no installer.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BASE_FILE="$HERE/environment.yml"
FLASHQLA_FILE="$HERE/flashqla.yml"

usage() {
  cat <<'EOF'
Usage: env/conda/create_env.sh --prefix DIR [options]

Create (or update) the slime-flashqla training environment at DIR.

  -p, --prefix DIR   where the environment lives (e.g. on shared storage); required
      --no-flashqla  leave out FlashQLA (flash-qla); the fla and torch backends
                     still work, and TileLang stays (FLA needs it on Hopper)
      --recreate     remove an existing environment at DIR first
      --tool TOOL    conda, mamba or micromamba (default: first found of
                     mamba, micromamba, conda)
      --dry-run      print the commands instead of running them (needs no conda:
                     without one on PATH the plan uses conda)
  -h, --help         show this help

Without a visible GPU (no working nvidia-smi) it sets CONDA_OVERRIDE_CUDA to the
CUDA version of environment.yml, so a login node can solve the CUDA packages, and
runs `slime-flashqla doctor` without --require (kernels need a GPU to check).
EOF
}

die() {
  printf 'create_env.sh: error: %s\n' "$*" >&2
  exit 2
}

log() { printf '\n== create_env.sh: %s\n' "$*"; }

prefix=""
with_flashqla=1
recreate=0
tool=""
dry_run=0

while (($#)); do
  case "$1" in
    -p | --prefix)
      (($# >= 2)) || die "$1 needs a directory"
      prefix=$2
      shift 2
      ;;
    --prefix=*)
      prefix=${1#*=}
      shift
      ;;
    --no-flashqla)
      with_flashqla=0
      shift
      ;;
    --recreate)
      recreate=1
      shift
      ;;
    --tool)
      (($# >= 2)) || die "--tool needs one of conda, mamba, micromamba"
      tool=$2
      shift 2
      ;;
    --tool=*)
      tool=${1#*=}
      shift
      ;;
    --dry-run)
      dry_run=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

[[ -n "$prefix" ]] || die "--prefix DIR is required (for example --prefix /shared/envs/slime-flashqla)"
case "$prefix" in
  /*) ;;
  *) prefix="$PWD/$prefix" ;;
esac

if [[ -z "$tool" ]]; then
  for candidate in mamba micromamba conda; do
    if command -v "$candidate" >/dev/null 2>&1; then
      tool=$candidate
      break
    fi
  done
  if [[ -z "$tool" ]]; then
    ((dry_run)) || die "none of mamba, micromamba, conda is on PATH: install Miniforge first (see docs/en/conda.md)"
    # The plan can be reviewed before any conda is installed: show it as conda would run it.
    tool=conda
    printf 'create_env.sh: note: none of mamba, micromamba, conda is on PATH; the plan below uses conda (install Miniforge to run it)\n' >&2
  fi
fi
case "$tool" in
  conda | mamba | micromamba) ;;
  *) die "--tool must be conda, mamba or micromamba, not '$tool'" ;;
esac
if ((!dry_run)) && ! command -v "$tool" >/dev/null 2>&1; then
  die "'$tool' is not on PATH"
fi

# Print each command; run it unless --dry-run.
run() {
  printf '+'
  printf ' %q' "$@"
  printf '\n'
  ((dry_run)) || "$@"
}

# Apply an environment file: create the prefix the first time, update it after that.
apply_env_file() {
  local file=$1
  if ((exists)); then
    if [[ "$tool" == micromamba ]]; then
      run micromamba install --yes --prefix "$prefix" --file "$file"
    else
      run "$tool" env update --prefix "$prefix" --file "$file"
    fi
  else
    if [[ "$tool" == micromamba ]]; then
      run micromamba create --yes --prefix "$prefix" --file "$file"
    else
      run "$tool" env create --prefix "$prefix" --file "$file"
    fi
    exists=1
  fi
}

cuda_version=$(sed -n 's/^[[:space:]]*-[[:space:]]*cuda-version=\([0-9.]*\)[[:space:]]*$/\1/p' "$BASE_FILE")
[[ -n "$cuda_version" ]] || die "no 'cuda-version=X.Y' line in $BASE_FILE"

gpu_visible=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu_visible=1
fi
if ((!gpu_visible)) && [[ -z "${CONDA_OVERRIDE_CUDA:-}" ]]; then
  # The CUDA builds of pytorch depend on the __cuda virtual package, which only
  # exists where a driver is loaded; the override lets a login node solve them.
  log "no GPU visible: setting CONDA_OVERRIDE_CUDA=$cuda_version for the solver"
  export CONDA_OVERRIDE_CUDA=$cuda_version
fi

log "environment at $prefix with $tool (FlashQLA: $([[ $with_flashqla == 1 ]] && echo yes || echo no))"
exists=0
if [[ -d "$prefix/conda-meta" ]]; then
  exists=1
elif [[ -e "$prefix" ]] && [[ -n "$(ls -A -- "$prefix")" ]]; then
  # Never install into, or delete, a directory that holds something else.
  die "$prefix exists, is not empty and is not a conda environment: pick another --prefix"
fi
if ((recreate && exists)); then
  run rm -rf -- "$prefix"
  exists=0
fi
existed=$exists

log "base layer: Python, PyTorch (CUDA $cuda_version), FLA, TileLang"
apply_env_file "$BASE_FILE"
py="$prefix/bin/python"
if ((with_flashqla)); then
  log "FlashQLA layer: flash-qla"
  apply_env_file "$FLASHQLA_FILE"
elif ((existed)); then
  # Updating never removes packages: an environment that had the FlashQLA layer must
  # lose it for --no-flashqla to mean the same on a re-run as on a first run.
  log "removing the FlashQLA layer, if present"
  run "$py" -m pip uninstall --yes flash-qla
fi

log "runtime from $ROOT/runtime"
# --no-deps: torch must stay conda's CUDA build, never a wheel pip picks.
run "$py" -m pip install --no-deps "$ROOT/runtime"
run "$py" -m pip check

log "checking the environment"
doctor=("$prefix/bin/slime-flashqla" doctor)
requires=(--require fla)
if ((with_flashqla)); then
  requires+=(--require flashqla)
fi
if ((gpu_visible)); then
  doctor+=("${requires[@]}")
else
  log "no GPU here: the kernels can only be confirmed on a GPU node, with
    $prefix/bin/slime-flashqla doctor ${requires[*]}"
fi
run "${doctor[@]}"
train_with=fla
((with_flashqla)) && train_with=flashqla
log "done: activate with '$tool activate $prefix'; train with --qwen-gdn-backend $train_with"
