"""The persistent kernel cache as a whole: filling it on a node, and moving it to another one.

- `warmup`: compile every kernel a training stream launches, once per node, under a file lock
  (it runs the GDN layers, so it sits above `layers/`).
- `archive`: export a warmed cache and import it on a machine with the same GPU and software,
  using `format` (the archive's names, ArchiveError), `stack` (what a kernel was built for),
  `manifest` (reading and checking it) and `publish` (import's checks, staging and renames).

Nothing here imports torch, fla, flash_qla, tilelang or triton at import time.
"""
