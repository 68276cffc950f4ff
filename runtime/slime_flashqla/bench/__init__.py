"""Benchmarks behind `slime-flashqla bench`: `gdn` (GDN kernels and layers) and `comm` (the comm guard)."""
