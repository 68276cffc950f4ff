#!/usr/bin/env bash
# Print a short self-check of this node (driver, GPU, which GDN backend `auto` picks
# and why) on stderr, then run the given command.  SLIME_FLASHQLA_SELFCHECK=0 skips it.
set -euo pipefail
if [ "${SLIME_FLASHQLA_SELFCHECK:-1}" != 0 ]; then
  # Never block the user's command on the report: it only informs.
  python /opt/slime-flashqla/docker/selfcheck.py >&2 || true
fi
if [ "$#" -eq 0 ]; then
  set -- slime-flashqla check
fi
exec "$@"
