"""Kernel life cycle beside the kernels themselves: where they are cached, imported and preloaded.

- `cache`: where TileLang and Triton keep compiled kernels.
- `imports`: import the kernel packages a layer will run, up front, timed.
- `preload`: load the specialisations a warm-up recorded, on a thread, when a layer is built.
- `compile_log`: count TileLang compiles and Triton compiles/autotunes as the libraries report them.

Filling and moving the cache is `kernel_cache/`; timing a fresh process's first step is
`bench/first_step.py`. Nothing here imports torch, fla, flash_qla, tilelang or triton at import time.
"""
