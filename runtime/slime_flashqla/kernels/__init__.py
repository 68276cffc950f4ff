"""Kernel life cycle outside the kernels themselves: the on-disk cache, warm-up, imports, first step.

- `cache`: where TileLang and Triton keep compiled kernels.
- `archive`: move a warmed cache to another machine or image with the same GPU and software.
- `warmup`: compile every kernel a training stream launches, once per node, under a file lock.
- `imports`: import the kernel packages a layer will run, up front, timed.
- `first_step`: time from a fresh process to its first GDN layer step.
- `compile_log`: count TileLang compiles and Triton compiles/autotunes as the libraries report them.

Nothing here imports torch, fla, flash_qla, tilelang or triton at import time.
"""
