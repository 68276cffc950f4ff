"""The `flashqla` backend and every FlashQLA fact it stands on.

- `backend`: `FlashQLABackend`, its refusals, warm-up paths, preload declaration and doctor rows;
- `runtime`: the runtime rules (torch, CUDA build, device, capability, release), as a status;
- `releases`: what each flash-qla release runs on each GPU, read from its own dispatch code;
- `deferred_compile`: importing flash_qla with its module-level `@torch.compile` deferred.
"""

from slime_flashqla.gdn.backends.flashqla.backend import FlashQLABackend

__all__ = ["FlashQLABackend"]
