"""The node report behind `slime-flashqla doctor` and the `check` job.

- `report`: versions, GPU, backends, FlashQLA, warnings and notes, as JSON-ready data;
- `check`: one GDN layer forward and backward (and kernel parity on a GPU).

The node's own facts (GPUs, driver, installed versions) are `host/`'s, on the ground floor.
"""
