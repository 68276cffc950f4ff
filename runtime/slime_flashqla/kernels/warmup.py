"""Compile FlashQLA's (and FLA's) kernels ahead of training into a persistent cache, one compile per node.

TileLang compiles each FlashQLA kernel on first use of a configuration (head counts,
varlen or not; not each sequence length): about 20 s a kernel on an H200, minutes per
layer configuration, and every rank of a job would compile the same kernels again.
Here each configuration is compiled under an exclusive file lock in the cache
directory: the first process compiles and stores it, every other one (rank, node
sharing the directory) waits on the lock and then loads the stored kernels.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from slime_flashqla.kernels.cache import CACHE_ENV, tilelang_cache_dir
from slime_flashqla.models import HeadConfig

WARMUP_BACKENDS = ("flashqla", "fla", "torch")
# A short and a long packed batch: FlashQLA switches to its intra-card context-parallel
# kernels for long sequences, which are separate kernels to compile.
DEFAULT_LENGTHS = ((1000, 3096), (8192, 24576))
LOCK_DIR = "slime-flashqla-locks"


@dataclass(frozen=True)
class WarmupTask:
    """One kernel configuration to compile."""

    backend: str
    heads: HeadConfig
    varlen: bool = True
    dtype: str = "bfloat16"

    @property
    def key(self) -> str:
        layout = "varlen" if self.varlen else "dense"
        return f"{self.backend}-hk{self.heads.key_heads}-hv{self.heads.value_heads}-{layout}-{self.dtype}"


@dataclass
class WarmupResult:
    """What warming one configuration took."""

    key: str
    seconds: float
    waited_seconds: float
    status: str  # "compiled", "cached" (already marked done), "failed: ..."


def set_cache_dir(path: str | os.PathLike | None) -> Path:
    """Point TileLang at `path` (before tilelang is imported) and return the directory in effect."""
    import sys

    if path is not None:
        wanted = Path(path).expanduser().resolve()
        if "tilelang" in sys.modules and tilelang_cache_dir().resolve() != wanted:
            raise RuntimeError(
                f"tilelang is already imported with cache {tilelang_cache_dir()}; set {CACHE_ENV}={wanted} "
                "before anything imports tilelang or flash_qla"
            )
        os.environ[CACHE_ENV] = str(wanted)
    directory = tilelang_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextmanager
def config_lock(cache_dir: Path, key: str):
    """Hold an exclusive lock for one configuration; yields the seconds spent waiting for it."""
    lock_dir = cache_dir / LOCK_DIR
    lock_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(lock_dir / f"{key}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, also if we crash
        try:
            yield time.perf_counter() - start
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _done_marker(cache_dir: Path, key: str) -> Path:
    return cache_dir / LOCK_DIR / f"{key}.done.json"


def run_kernels(task: WarmupTask, lengths=DEFAULT_LENGTHS, device: str = "cuda") -> None:
    """One training step of a GDN layer per packed batch in `lengths`, which makes every kernel compile.

    A whole Qwen3-Next GDN layer runs, not the bare kernel, because FlashQLA specialises
    its kernels on the dtypes and flags of the call (bf16 beta from the layer's sigmoid,
    float32 g, no initial or final state): a warm-up with other dtypes compiles kernels
    that training never asks for.  The layer also compiles the short-convolution and
    gated-norm kernels that a training step runs beside the GDN kernel.
    """
    import torch

    from slime_flashqla.layers import Qwen3NextGatedDeltaNet, init_like_checkpoint, packed_batch
    from slime_flashqla.models import gdn_layer_config

    dtype = getattr(torch, task.dtype)
    config = gdn_layer_config(task.heads.key_heads, task.heads.value_heads)
    layer = Qwen3NextGatedDeltaNet(config, backend=task.backend).to(device, dtype)
    init_like_checkpoint(layer)
    for batch in lengths if task.varlen else ((128, 128),):
        if task.varlen:
            x, cu_seqlens = packed_batch(batch, config["hidden_size"], device=device, dtype=dtype)
            y = layer(x, cu_seqlens=cu_seqlens)
        else:
            x = torch.randn(len(batch), batch[0], config["hidden_size"], device=device, dtype=dtype, requires_grad=True)
            y = layer(x)
        y.float().square().mean().backward()
        if device == "cuda":
            torch.cuda.synchronize()


def warm_up(task: WarmupTask, cache_dir: Path, *, force: bool = False, lengths=DEFAULT_LENGTHS, device="cuda"):
    """Compile one configuration under its lock unless another process already did."""
    start = time.perf_counter()
    with config_lock(cache_dir, task.key) as waited:
        marker = _done_marker(cache_dir, task.key)
        if marker.exists() and not force:
            # Compiled by an earlier run or by the rank that held the lock before us: loading is
            # cheap, and this process may be a rank that needs the kernels loaded anyway.
            run_kernels(task, lengths, device)
            return WarmupResult(task.key, time.perf_counter() - start, waited, "cached")
        run_kernels(task, lengths, device)
        seconds = time.perf_counter() - start
        marker.write_text(json.dumps({"task": task.key, "seconds": seconds, "pid": os.getpid()}))
        return WarmupResult(task.key, seconds, waited, "compiled")


def _worker(args):
    task, cache_dir, force, lengths, device = args
    set_cache_dir(cache_dir)
    try:
        return asdict(warm_up(task, Path(cache_dir), force=force, lengths=lengths, device=device))
    except Exception as error:  # reported per configuration; the command exits non-zero
        return asdict(WarmupResult(task.key, 0.0, 0.0, f"failed: {type(error).__name__}: {error}"))


def warm_up_all(
    tasks, cache_dir: Path, *, jobs: int = 1, force=False, lengths=DEFAULT_LENGTHS, device="cuda", progress=None
):
    """Warm every task, `jobs` configurations at a time in separate processes; returns result dicts."""
    work = [(task, str(cache_dir), force, lengths, device) for task in tasks]
    results = []
    if jobs <= 1:
        for item in work:
            results.append(_worker(item))
            if progress:
                progress(results[-1])
        return results
    import multiprocessing

    # spawn: CUDA cannot be initialised in a forked child of a process that already used it.
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for result in pool.imap_unordered(_worker, work):
            results.append(result)
            if progress:
                progress(result)
    return results
