"""The node report behind `slime-flashqla doctor`, the `check` job, and the driver and GPU queries they share.

- `report`: versions, GPU, backends, FlashQLA, warnings and notes, as JSON-ready data;
- `check`: one GDN layer forward and backward (and kernel parity on a GPU);
- `node`: the NVIDIA driver and the visible GPUs (also read by the kernel cache archive).
"""
