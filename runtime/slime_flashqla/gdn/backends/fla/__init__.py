"""The `fla` backend and the FLA facts it stands on.

- `backend`: `FLABackend`, its refusals, warm-up path, doctor rows and FLA's public function;
- `library`: FLA's own function past its dispatch, its GVA and FlashQLA forwarding, FLA #640's versions.
"""

from slime_flashqla.gdn.backends.fla.backend import FLABackend

__all__ = ["FLABackend"]
