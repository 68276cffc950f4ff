"""The files commands write: checked output paths, atomic publishing, and SIGTERM as an exception.

Torch-free and below every other folder: the CLI, the benchmarks and the cache archive all
write their results through it, so none of them leaves a half-written file behind.
"""
