#!/usr/bin/env bash
# Build CI's stand-in base images (no registry is reachable, so nothing can be pulled):
#   localhost/slime-flashqla-ci/debian:<suite>         amd64 Debian minbase + python3, from debootstrap
#   localhost/slime-flashqla-ci/debian:<suite>-arm64   the same for arm64 (second stage under qemu)
#   localhost/slime-flashqla-ci/base:default           amd64 + nvcc (CUDA 12.8), standing in for nvidia/cuda:*-devel
#   localhost/slime-flashqla-ci/base:gb10              arm64 + a CPU torch and Triton, standing in for NGC PyTorch
# Pass them to the product's Dockerfiles as BASE_IMAGE (docker/images.py: SLIME_FLASHQLA_BASE_IMAGE_<PINS>).
# The arm64 ones need qemu-aarch64 registered with binfmt_misc (docker/ci/register-binfmt.sh).
# Re-running is cheap: existing images of the right architecture are kept unless FORCE=1.
set -euo pipefail
cd "$(dirname "$0")/../.."

pin() { python3 -c "import tomllib; print(tomllib.load(open('env/versions.toml','rb'))$1)"; }
suite=$(pin '["ci"]["debian_suite"]')
ca=/etc/ssl/certs/ca-certificates.crt
force=${FORCE:-0}

# An image counts as there only with the architecture asked for: an older CI run left
# an amd64 base:gb10 behind on some machines.
have() { [ "$force" != 1 ] && [ "$(podman image inspect --format '{{.Architecture}}' "$1" 2>/dev/null)" = "$2" ]; }
log() { printf '== bootstrap-bases: %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

# debian_image ARCH TAG: Debian minbase + python3 for ARCH, imported as TAG.
debian_image() {
  local arch=$1 tag=$2 mirror rootfs
  # The mirror this machine's apt uses, read at build time so no host is written into the repo.
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
  rootfs=$(mktemp -d)
  local opts=(--arch "$arch" --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates)
  if [ "$arch" = "$(dpkg --print-architecture)" ]; then
    log "debootstrap $suite/$arch from $mirror"
    debootstrap "${opts[@]}" "$suite" "$rootfs" "$mirror" >/dev/null
  else
    # Unpack on the host, then configure the packages with the target's own binaries,
    # run by qemu through binfmt_misc.
    log "debootstrap --foreign $suite/$arch from $mirror"
    debootstrap --foreign "${opts[@]}" "$suite" "$rootfs" "$mirror" >/dev/null
    log "debootstrap --second-stage $suite/$arch (emulated)"
    chroot "$rootfs" /debootstrap/debootstrap --second-stage >/dev/null \
      || { tail -20 "$rootfs/debootstrap/debootstrap.log" >&2 || true; exit 1; }
  fi
  # Keep the image lean and free of the build host's apt state.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import --arch "$arch" - "$tag" >/dev/null
  rm -rf "$rootfs"
}

debian_amd64=localhost/slime-flashqla-ci/debian:$suite
debian_arm64=localhost/slime-flashqla-ci/debian:$suite-arm64
have "$debian_amd64" amd64 || debian_image amd64 "$debian_amd64"

# The host's CA bundle: this machine's egress may re-sign TLS with its own CA.
common=(--network host)
[ -f "$ca" ] && common+=(-v "$ca:$ca:ro")

if ! have localhost/slime-flashqla-ci/base:default amd64; then
  nvcc_v=$(pin '["ci"]["cuda_nvcc"]')
  cudart_v=$(pin '["ci"]["cuda_runtime"]')
  log "base:default (nvcc $nvcc_v)"
  podman build "${common[@]}" --platform linux/amd64 --build-arg "DEBIAN_IMAGE=$debian_amd64" \
    --build-arg "CUDA_NVCC=$nvcc_v" --build-arg "CUDA_RUNTIME=$cudart_v" \
    -f docker/ci/Containerfile.base-default -t localhost/slime-flashqla-ci/base:default docker/ci
fi

if ! have localhost/slime-flashqla-ci/base:gb10 arm64; then
  have "$debian_arm64" arm64 || debian_image arm64 "$debian_arm64"
  # PyPI's aarch64 torch of the pinned release is a CPU build with no Triton requirement.
  torch="torch==$(pin '["torch"]["version"]')"
  triton=$(pin '["ci"]["gb10_standin_triton"]')
  log "base:gb10 (linux/arm64: $torch, triton $triton)"
  podman build "${common[@]}" --platform linux/arm64 --build-arg "DEBIAN_IMAGE=$debian_arm64" \
    --build-arg "TORCH=$torch" --build-arg "TRITON=$triton" \
    -f docker/ci/Containerfile.base-gb10 -t localhost/slime-flashqla-ci/base:gb10 docker/ci
fi
log "done"
