#!/usr/bin/env bash
# `pip install` from published wheels only (--only-binary :all:): on aarch64 a missing wheel
# must stop the build and be named, not turn into a source build of a CUDA/C++ package.
# Usage: install-wheels.sh PIP_INSTALL_ARGUMENTS...   (the image's `python` runs pip)
set -euo pipefail

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if python -m pip install --only-binary :all: "$@" 2>&1 | tee "$log"; then
  exit 0
fi
missing=$(sed -n 's/^ERROR: No matching distribution found for //p' "$log" | paste -sd ' ' -)
if [ -n "$missing" ]; then
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || echo "glibc unknown")
  python=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  echo "install-wheels: no wheel of ${missing} for $(uname -m), ${glibc}, python ${python}" \
    "(a manylinux_X_Y wheel needs glibc >= X.Y); this image installs published wheels only," \
    "it does not build them from source" >&2
fi
exit 1
