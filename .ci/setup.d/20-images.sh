#!/usr/bin/env bash
# Container tooling for the image sessions (issue 5): CI has no Docker daemon and
# reaches no container registry, so it builds with rootful podman on runc and
# bootstraps its own stand-in base images from Debian packages.  The GB10 image is
# built for linux/arm64 (issue 15), run by qemu-user-static through binfmt_misc.
set -euo pipefail
cd "$(dirname "$0")/../.."

tools=(podman runc debootstrap qemu-aarch64-static)
for tool in "${tools[@]}"; do
  if ! command -v "$tool" >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      podman runc debootstrap qemu-user-static >/dev/null
    break
  fi
done

# crun (podman's default) cannot set rlimits or cgroups in this sandbox; runc can,
# and the default ulimits must go, or setrlimit is refused.
conf=/etc/containers/containers.conf
mkdir -p /etc/containers
if ! grep -q '^runtime = "runc"' "$conf" 2>/dev/null; then
  cat >>"$conf" <<'CONF'

# added by slime-flashqla .ci/setup.d/20-images.sh
[containers]
default_ulimits = []

[engine]
runtime = "runc"
CONF
fi

bash docker/ci/register-binfmt.sh
bash docker/ci/bootstrap-bases.sh
