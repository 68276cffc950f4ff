#!/usr/bin/env bash
# Let this x86_64 machine run arm64 binaries (the GB10 stand-in base and image) through
# qemu-user-static: mount binfmt_misc if it is not, and register qemu-aarch64 with the
# kernel.  CI machines have no systemd-binfmt or binfmt-support doing this at boot.
# The registration keeps Debian's flags, F among them: the kernel opens the interpreter
# now, so it also works inside chroots and containers that have no qemu in them.
set -euo pipefail

binfmt=/proc/sys/fs/binfmt_misc
conf=/usr/lib/binfmt.d/qemu-aarch64.conf
log() { printf '== register-binfmt: %s\n' "$*"; }

if [ "$(uname -m)" = aarch64 ]; then
  log "host is aarch64: nothing to emulate"
  exit 0
fi
[ -f "$conf" ] || { echo "register-binfmt: $conf missing: install qemu-user-static" >&2; exit 1; }
if [ ! -e "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt" \
    || { echo "register-binfmt: cannot mount binfmt_misc at $binfmt (needs root)" >&2; exit 1; }
fi
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  cat "$conf" >"$binfmt/register"
fi
grep -qx enabled "$binfmt/qemu-aarch64" \
  || { echo "register-binfmt: qemu-aarch64 is registered but disabled ($binfmt/qemu-aarch64)" >&2; exit 1; }
grep -q '^flags: .*F' "$binfmt/qemu-aarch64" \
  || { echo "register-binfmt: qemu-aarch64 is registered without the F flag, so containers cannot use it;" \
    "remove it (echo -1 > $binfmt/qemu-aarch64) and run this again" >&2; exit 1; }
log "qemu-aarch64: $(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64") ($(sed -n 's/^flags: //p' "$binfmt/qemu-aarch64"))"
