"""The shapes and head configurations `bench gdn` runs by default (their grammar: workload/lengths.py, heads.py)."""

from __future__ import annotations

# FlashQLA's own H200 benchmark set, plus an uneven short pack and a 32k two-sequence pack.
ALL_SHAPES = (
    "1x32768",
    "1x8192",
    "28672+4096",
    "16384+16384",
    "8192x4",
    "4096x8",
    "1024x8",
    "1000+3096",
    "8192+24576",
)
DEFAULT_SHAPES = ("1000+3096", "8192+24576", "1x32768", "8192x4", "1024x8")
# Qwen3-Next's GDN heads (16 key / 32 value heads) at TP 1, 2, 4, 8.
DEFAULT_HEADS = ("16/32", "8/16", "4/8", "2/4")
# Qwen3.5 / Qwen3-Next family GDN heads at every tensor-parallel size FlashQLA benchmarks.
TP_HEADS = ("16/64", "16/48", "16/32", "8/32", "8/16", "4/16", "4/8", "2/8", "2/4")
