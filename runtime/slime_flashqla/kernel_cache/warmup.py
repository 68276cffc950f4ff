"""Compile every kernel a training stream launches ahead of training, into a persistent cache, once per node.

TileLang compiles each FlashQLA kernel on first use of a specialisation: seconds a kernel,
minutes per layer configuration (docs/benchmarks.md), and every rank of a job would compile
the same kernels again. A specialisation is more than the head counts: FlashQLA picks per
pack between its intra-card context-parallel path and the plain one (different kernels),
sizes its forward's value block by how many sequences (times heads) a pack holds, and
compiles the initial/final-state variants apart. So a configuration is warmed in parts,
each its own process and lock: `layer` runs the layer's training step (and a forward-only
pass) on packs with 1 to 256 sequences and on a sample of the RL pack stream, and each of
the backend's kernel paths (`no-cp`, `intra-cp`; with `+states` the initial/final-state
variant that `check` runs) is forced on the same packs.

Each part is compiled under an exclusive file lock in the cache directory: the first
process compiles and stores it, every other one (rank, node sharing the directory) waits
on the lock and then loads the stored kernels. The command runs every part of every
configuration as its own process (kernel_cache/schedule.py), as many at once as the node's
CPUs and memory allow (kernel_cache/capacity.py); inside a part, a backend built from
TileLang factories first finds the kernels the part's steps call, without compiling them,
and compiles them on several threads before the steps run (kernels/tilelang_prefetch.py).
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from slime_flashqla.errors import one_line
from slime_flashqla.files.lock import LOCK_DIR
from slime_flashqla.files.lock import directory_lock as config_lock
from slime_flashqla.gdn.names import KERNEL_BACKEND_NAMES
from slime_flashqla.kernels.cache import CACHE_ENV, tilelang_cache_dir
from slime_flashqla.kernels.preload import LAYER, kernel_source, recording
from slime_flashqla.workload.heads import HeadConfig
from slime_flashqla.workload.lengths import packed_offsets

WARMUP_BACKENDS = KERNEL_BACKEND_NAMES  # every kernel backend; `auto` picks one of them
# A short and a long packed batch, run through the layer first (what warm-up always ran).
DEFAULT_LENGTHS = ((1000, 3096), (8192, 24576))
DEFAULT_MAX_TOKENS = 32768  # the pack budget of training
# The largest pack a warm-up runs (128 times training's default budget): a bound the
# coverage packs and the stream sample reach in well under a second, and far inside int32 offsets.
MAX_TOKENS = 2**22
# Sequences per pack: FlashQLA's forward picks its value block by sequences x heads against
# 70% of the GPU's SMs, so these counts reach every block size at any head count and GPU.
SEQUENCE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
COVERAGE_TOKENS = 8192  # tokens of a counted pack: enough for every count, cheap once compiled
STREAM_SAMPLE = 24  # packs of the RL-like stream (workload/packs.py) the layer part also runs
STATES = "+states"
# What each part is for: the command's help and the docs say it from here.
PART_PURPOSE = {
    LAYER: "training: the layer's training step and forward-only pass on the packs training sees",
    "paths": "training: the kernel with each of its paths forced, for packs the layer part did not send down that path",
    STATES: "only `slime-flashqla check` runs these: the initial/final-state variants (a layer passes no state)",
}


def for_check_only(part: str) -> bool:
    """Whether only `check` launches what this part compiles (the state variants)."""
    return part.endswith(STATES)


@dataclass(frozen=True)
class WarmupTask:
    """One part of one kernel configuration to compile."""

    backend: str
    heads: HeadConfig
    varlen: bool = True
    dtype: str = "bfloat16"
    part: str = LAYER  # "layer", or a backend kernel path from warmup_paths(), "+states" for the state variant
    max_tokens: int = DEFAULT_MAX_TOKENS

    @property
    def label(self) -> str:
        """`backend Hk/Hv part`, as progress lines name a part."""
        dense = "" if self.varlen else " dense"
        return f"{self.backend} {self.heads.label}{dense} {self.part}"

    @property
    def key(self) -> str:
        layout = "varlen" if self.varlen else "dense"
        heads = f"hk{self.heads.key_heads}-hv{self.heads.value_heads}"
        return f"{self.backend}-{heads}-{layout}-{self.dtype}-{self.part}-t{self.max_tokens}"


def warmup_parts(backend: str, varlen: bool = True, check: bool = True) -> list[str]:
    """The parts of a configuration of `backend`: the layer, each forced kernel path, (`check`) their states."""
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    paths = list(KERNEL_BACKENDS[backend].warmup_paths()) if varlen else []
    return [LAYER, *paths, *(path + STATES for path in paths if check)]


def in_start_order(tasks) -> list[WarmupTask]:
    """The tasks longest first (the layer parts, the kernel paths, the state variants): the last to end starts first."""

    def rank(task: WarmupTask) -> int:
        return 0 if task.part == LAYER else 2 if for_check_only(task.part) else 1

    return sorted(tasks, key=rank)  # stable: configurations keep their order within a rank


def coverage_packs(max_tokens: int) -> list[tuple[int, ...]]:
    """Packs that reach every kernel specialisation by sequence count, plus a long and a mixed pack."""
    total = min(max_tokens, COVERAGE_TOKENS)
    packs = [(total // n,) * n for n in SEQUENCE_COUNTS if total // n >= 16]
    # One sequence as long as the budget (the intra-CP path splits it), and a long-tailed mix.
    packs.append((max_tokens,))
    packs.append((max_tokens // 2, *(256,) * (max_tokens // 2 // 256)))
    return packs


def stream_sample(max_tokens: int) -> list[tuple[int, ...]]:
    """The first packs of the default RL-like stream (bench stream's, seed 0) at this budget."""
    from slime_flashqla.workload.packs import PackDistribution

    median = min(1024, max(32, max_tokens // 8))
    return PackDistribution(max_tokens=max_tokens, median_len=median, seed=0).packs(STREAM_SAMPLE)


@dataclass
class WarmupResult:
    """What warming one configuration took."""

    key: str
    seconds: float
    waited_seconds: float
    status: str  # "compiled", "cached" (already marked done), "failed: ..."
    prefetch: str = ""  # what compiling ahead on several threads did, when it ran (kernels/tilelang_prefetch.py)
    peak_rss_mib: float = 0.0  # this part's process at its largest
    compilers_peak_rss_mib: float = 0.0  # the largest of the compilers it ran (nvcc and its tools)


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


def _done_marker(cache_dir: Path, key: str) -> Path:
    return cache_dir / LOCK_DIR / f"{key}.done.json"


def run_kernels(task: WarmupTask, lengths=DEFAULT_LENGTHS, device: str = "cuda") -> None:
    """Run the part's steps on CUDA (or `device`), which makes every kernel of that part compile."""
    if task.part == LAYER:
        from slime_flashqla.gdn.backends import KERNEL_BACKENDS

        # A backend with kernel paths compiles per pack shape; the torch reference compiles nothing.
        _layer_steps(task, lengths, device, coverage=bool(KERNEL_BACKENDS[task.backend].warmup_paths()))
    else:
        _kernel_steps(task, device)


def _layer_steps(task: WarmupTask, lengths, device: str, coverage: bool) -> None:
    """A GDN layer's training step (and forward-only pass) per packed batch.

    A whole Qwen3-Next GDN layer runs, not the bare kernel, because FlashQLA specialises
    its kernels on the dtypes and flags of the call (bf16 beta from the layer's sigmoid,
    float32 g, no initial or final state): a warm-up with other dtypes compiles kernels
    that training never asks for. The layer also compiles the short-convolution and
    gated-norm kernels that a training step runs beside the GDN kernel.
    """
    import torch

    from slime_flashqla.layers import Qwen3NextGatedDeltaNet, init_like_checkpoint, packed_batch
    from slime_flashqla.workload.models import gdn_layer_config

    dtype = getattr(torch, task.dtype)
    config = gdn_layer_config(task.heads.key_heads, task.heads.value_heads)
    layer = Qwen3NextGatedDeltaNet(config, backend=task.backend, preload_kernels=False).to(device, dtype)
    init_like_checkpoint(layer)
    if not task.varlen:
        x = torch.randn(2, 128, config["hidden_size"], device=device, dtype=dtype, requires_grad=True)
        layer(x).float().square().mean().backward()
        return
    batches = [*lengths, *(coverage_packs(task.max_tokens) + stream_sample(task.max_tokens) if coverage else [])]
    for batch in dict.fromkeys(batches):
        x, cu_seqlens = packed_batch(batch, config["hidden_size"], device=device, dtype=dtype)
        layer(x, cu_seqlens=cu_seqlens).float().square().mean().backward()
        with torch.no_grad():  # log-prob and rollout passes: FlashQLA decides CP apart for inference
            layer(x.detach(), cu_seqlens=cu_seqlens)
        if device == "cuda":
            torch.cuda.synchronize()


def _kernel_steps(task: WarmupTask, device: str) -> None:
    """The backend's kernel, one forced path, forward+backward on every coverage pack, as the layer calls it."""
    import inspect

    import torch
    import torch.nn.functional as F

    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    backend = KERNEL_BACKENDS[task.backend]
    path, states = task.part.removesuffix(STATES), task.part.endswith(STATES)
    forced = backend.warmup_paths()[path]
    kernel = backend.kernel()
    unknown = set(forced) - set(inspect.signature(kernel).parameters)
    if unknown:  # another FlashQLA: the path cannot be forced here, and the layer part covers what runs
        raise RuntimeError(f"this {backend.name} kernel takes no {', '.join(sorted(unknown))}")
    dtype = getattr(torch, task.dtype)
    hk, hv, dim = task.heads.key_heads, task.heads.value_heads, 128
    for batch in coverage_packs(task.max_tokens):
        tokens, count = sum(batch), len(batch)
        offsets = torch.tensor(packed_offsets(batch), dtype=torch.int32, device=device)

        def leaf(*size, kind=dtype):
            return torch.randn(*size, device=device, dtype=kind).requires_grad_()

        q, k, v = leaf(1, tokens, hk, dim), leaf(1, tokens, hk, dim), leaf(1, tokens, hv, dim)
        # The layer's dtypes: beta from a sigmoid in the layer's dtype, g in float32.
        g = F.logsigmoid(torch.randn(1, tokens, hv, device=device)).div(16).requires_grad_()
        beta = torch.rand(1, tokens, hv, device=device, dtype=dtype).requires_grad_()
        h0 = leaf(count, hv, dim, dim, kind=torch.float32) if states else None
        kwargs = {"scale": None, "initial_state": h0, "output_final_state": states, "cu_seqlens": offsets}
        kwargs["use_qk_l2norm_in_kernel"] = True
        q_in, k_in, v_in, g_in, beta_in, kwargs = backend.prepare(q, k, v, g, beta, kwargs)
        o, ht = kernel(q_in, k_in, v_in, g=g_in, beta=beta_in, **kwargs, **forced)
        loss = o.float().square().mean() + (ht.float().square().mean() if states else 0)
        loss.backward()
        with torch.no_grad():
            kernel(q_in.detach(), k_in.detach(), v_in.detach(), g=g_in.detach(), beta=beta_in.detach(),
                   **{**kwargs, "initial_state": None if h0 is None else h0.detach()}, **forced)  # fmt: skip
        if device == "cuda":
            torch.cuda.synchronize()


def warm_up(
    task: WarmupTask, cache_dir: Path, *, force: bool = False, lengths=DEFAULT_LENGTHS, device="cuda", compile_threads=1
):
    """Compile one configuration under its lock unless another process already did."""
    start = time.perf_counter()
    with config_lock(cache_dir, task.key) as waited:
        marker = _done_marker(cache_dir, task.key)
        if marker.exists() and not force:
            # Compiled by an earlier run or by the rank that held the lock before us: loading is
            # cheap, and this process may be a rank that needs the kernels loaded anyway.
            with recording(task, cache_dir):
                run_kernels(task, lengths, device)
            return WarmupResult(task.key, time.perf_counter() - start, waited, "cached")
        prefetch = compile_ahead(task, cache_dir, compile_threads, lambda: run_kernels(task, lengths, device))
        with recording(task, cache_dir):  # what a training process may preload (kernels/preload.py)
            run_kernels(task, lengths, device)
        seconds = time.perf_counter() - start
        # Temp file and rename: a concurrent `cache export` or reader never sees half a marker.
        partial = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps({"task": task.key, "seconds": seconds, "pid": os.getpid()}))
        os.replace(partial, marker)
        return WarmupResult(task.key, seconds, waited, "compiled", prefetch=prefetch)


def compile_ahead(task: WarmupTask, cache_dir: Path, threads: int, steps) -> str:
    """Compile the TileLang kernels `steps` will call on `threads` threads first; what it did, "" where it cannot.

    Never raises: what it did not compile, the steps compile themselves, one after another, as
    without it.
    """
    source = kernel_source(task.backend)
    if threads < 2 or source is None:
        return ""
    # A lock per kernel in the cache's lock folder: parts and ranks that need the same kernel at
    # once compile it once; the others load it from the cache after the lock.
    lock = functools.partial(config_lock, Path(cache_dir))
    try:
        return source.compile_ahead(steps, threads, lock).describe()
    except Exception as error:  # the steps still compile everything they need
        return f"not compiled ahead: {one_line(error)}"
