"""The files commands write: checked output paths, atomic writes, locks, and SIGTERM as an exception.

Torch-free and below every other folder: the CLI, the benchmarks and the cache archive all
write their results through it, so none of them leaves a half-written file behind; the
kernel cache's warm-up and import take their locks here, never through a symbolic link.
"""
