#!/usr/bin/env bash
# Build CI's stand-in base images (no registry is reachable, so nothing can be pulled):
#   localhost/slime-flashqla-ci/debian:<suite>   Debian minbase + python3, from debootstrap
#   localhost/slime-flashqla-ci/base:default     + nvcc (CUDA 12.8), standing in for nvidia/cuda:*-devel
#   localhost/slime-flashqla-ci/base:gb10        + a preinstalled torch, standing in for NGC PyTorch
# Pass them to the product's Dockerfiles as BASE_IMAGE (noxfile: SLIME_FLASHQLA_BASE_IMAGE_<VARIANT>).
# Re-running is cheap: existing images are kept unless FORCE=1.
set -euo pipefail
cd "$(dirname "$0")/../.."

suite=$(python3 -c 'import tomllib; print(tomllib.load(open("env/versions.toml","rb"))["ci"]["debian_suite"])')
debian=localhost/slime-flashqla-ci/debian:$suite
ca=/etc/ssl/certs/ca-certificates.crt
force=${FORCE:-0}

have() { [ "$force" != 1 ] && podman image exists "$1"; }
log() { printf '== bootstrap-bases: %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

if ! have "$debian"; then
  # The mirror this machine's apt uses, read at build time so no host is written into the repo.
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
  rootfs=$(mktemp -d)
  log "debootstrap $suite from $mirror"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    "$suite" "$rootfs" "$mirror" >/dev/null
  tar -C "$rootfs" -c . | podman import - "$debian" >/dev/null
  rm -rf "$rootfs"
fi

# The host's CA bundle: this machine's egress may re-sign TLS with its own CA.
common=(--network host --build-arg "DEBIAN_IMAGE=$debian")
[ -f "$ca" ] && common+=(-v "$ca:$ca:ro")

if ! have localhost/slime-flashqla-ci/base:default; then
  nvcc=$(python3 -c 'import tomllib; c=tomllib.load(open("env/versions.toml","rb"))["ci"]; print(c["cuda_nvcc"], c["cuda_runtime"])')
  read -r nvcc_v cudart_v <<<"$nvcc"
  log "base:default (nvcc $nvcc_v)"
  podman build "${common[@]}" --build-arg "CUDA_NVCC=$nvcc_v" --build-arg "CUDA_RUNTIME=$cudart_v" \
    -f docker/ci/Containerfile.base-default -t localhost/slime-flashqla-ci/base:default docker/ci
fi

if ! have localhost/slime-flashqla-ci/base:gb10; then
  # The torch CI already uses for its CPU tests (SLIME_FLASHQLA_TORCH); pip's own
  # find-links folder travels into the build, so a wheel on this machine's disk is used.
  torch=${SLIME_FLASHQLA_TORCH:-torch}
  links=$(python3 -m pip config get global.find-links 2>/dev/null || true)
  extra=()
  if [ -n "$links" ] && [ -d "$links" ]; then
    extra=(-v "$links:/wheels:ro" --build-arg PIP_FIND_LINKS=/wheels)
  fi
  triton=$(python3 -c 'import tomllib; print(tomllib.load(open("env/versions.toml","rb"))["ci"]["standin_triton"])')
  log "base:gb10 ($torch, triton $triton)"
  podman build "${common[@]}" "${extra[@]}" --build-arg "TORCH=$torch" --build-arg "TRITON=$triton" \
    -f docker/ci/Containerfile.base-gb10 -t localhost/slime-flashqla-ci/base:gb10 docker/ci
fi
log "done"
