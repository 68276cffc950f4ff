"""The variants a GDN benchmark compares, and how each one is called at kernel and layer level.

A variant is a backend plus how q/k reach it (repeated to Hv heads, as slime's layers do
today, or grouped). `bench gdn` and `bench stream` share these; layers and inputs are built
for one head configuration from one LayerSetup (workload.setup: device, dtype, sizes, seed,
layer class, slime's checkout).
The `slime-layer-*` variants run slime's own layer classes, imported from slime's source
(integrations.slime), with this package's layer's weights copied in by parameter name;
`megatron-layer` runs Megatron-core's own GatedDeltaNet (bench.megatron_layer), its weights
mapped from this package's layer by name and layout (bench.megatron_weights). Each is refused
before timing when its output disagrees with this package's layer on the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_flashqla.gdn.names import AUTO
from slime_flashqla.workload.heads import HeadConfig
from slime_flashqla.workload.setup import LayerSetup

CONV_KERNEL = 4  # Qwen3-Next's linear_conv_kernel_dim


@dataclass(frozen=True)
class Variant:
    """A backend and how q/k reach it: repeated to Hv heads, or grouped (GVA)."""

    name: str
    backend: str
    repeat: bool
    about: str
    direct: bool = False  # the library's own function, called as slime calls it, not this package's backend
    env: tuple[tuple[str, str], ...] = ()  # environment the variant is defined with (bench stream sets it)
    slime_layer: bool = False  # slime's own layer class around the kernel (layer level only)
    megatron_layer: bool = False  # Megatron-core's own GatedDeltaNet (layer level only)
    levels: tuple[str, ...] = ("kernel", "layer")


VARIANTS = {
    v.name: v
    for v in (
        Variant("fla-repeat", "fla", True, "FLA's own kernels through this package's `fla` backend, q/k repeated"),
        Variant(
            "slime-fla",
            "fla",
            True,
            "fla.ops.gated_delta_rule.chunk_gated_delta_rule itself with FLA_FLASH_QLA=0, q/k repeated to Hv heads "
            "and normalised by FLA (slime's default path)",
            direct=True,
            env=(("FLA_FLASH_QLA", "0"),),
        ),
        Variant("fla-gva", "fla", False, "FLA's kernels, q/k with their own Hk heads"),
        Variant(
            "flashqla-repeat",
            "flashqla",
            True,
            "flash_qla.chunk_gated_delta_rule itself, q/k repeated to Hv heads (slime's FlashQLA path)",
            direct=True,
        ),
        Variant(
            "flashqla-gva", "flashqla", False, "FlashQLA through this package's backend, q/k with their own Hk heads"
        ),
        Variant(
            "flashqla-direct-gva",
            "flashqla",
            False,
            "flash_qla.chunk_gated_delta_rule itself with GVA (its own torch.compile'd q/k l2norm)",
            direct=True,
        ),
        Variant("auto", "auto", False, "the `auto` backend (GVA): FlashQLA where it validates, else FLA, else torch"),
        Variant(
            "slime-layer-flashqla",
            "flashqla",
            True,
            "slime's own layer class (from --slime-source) with --qwen-gdn-backend flashqla: FLA's ShortConvolution "
            "and FusedRMSNormGated, q/k repeated, flash_qla's kernel",
            direct=True,
            slime_layer=True,
            levels=("layer",),
        ),
        Variant(
            "slime-layer-fla",
            "fla",
            True,
            "slime's own layer class with its default --qwen-gdn-backend fla (FLA's own kernels: FLA_FLASH_QLA=0)",
            direct=True,
            env=(("FLA_FLASH_QLA", "0"),),
            slime_layer=True,
            levels=("layer",),
        ),
        Variant(
            "megatron-layer",
            "fla",
            True,
            "Megatron-core's own GatedDeltaNet (megatron-core >= 0.19, Python >= 3.12) from its module spec: TE's "
            "linears where TE is installed (its in_proj then carries the decoder layer's input RMSNorm), else "
            "Megatron's own; FLA's conv, l2norm and kernel (FLA_FLASH_QLA=0), q/k repeated",
            direct=True,
            env=(("FLA_FLASH_QLA", "0"),),
            megatron_layer=True,
            levels=("layer",),
        ),
        Variant("torch", "torch", False, "the pure-PyTorch reference, GVA (slow: only when asked)"),
        Variant("torch-repeat", "torch", True, "the pure-PyTorch reference, q/k repeated (slow: only when asked)"),
    )
}
DEFAULT_VARIANTS = ("fla-repeat", "fla-gva", "flashqla-repeat", "flashqla-gva", "auto")


# bf16 weights and activations through two implementations of the same layer (FLA's conv and norm
# round once, ours where torch's reference does): about 1e-2 apart; a wrong layout errs by O(1).
SLIME_PARITY_TOLERANCE = 3e-2


def variant_problem(
    variant: Variant, mode: str, heads: HeadConfig, setup: LayerSetup, level: str | None = None
) -> str | None:
    """Why `variant` cannot run `mode` for `heads` on this machine, or None (imports the backend, launches nothing)."""
    if level is not None and level not in variant.levels:
        return f"{variant.name} runs at the {' and '.join(variant.levels)} level only"
    if variant.slime_layer:
        problem = slime_layer_problem(setup)
        if problem:
            return problem
    if variant.megatron_layer:
        from slime_flashqla.bench.megatron_layer import megatron_layer_problem

        problem = megatron_layer_problem(setup.device_type)
        if problem:
            return problem
    if variant.backend == AUTO:  # auto always has a fallback; rows record what it picked
        return None
    import torch

    from slime_flashqla.gdn import GDNShape, get_chunk_gated_delta_rule
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    try:
        get_chunk_gated_delta_rule(variant.backend)
    except (ImportError, RuntimeError) as error:  # a missing package, FlashQLAUnavailableError
        return str(error)
    shape = GDNShape(1, 64, heads.key_heads, heads.value_heads, setup.head_dim, setup.head_dim, 1, True)
    backend = KERNEL_BACKENDS[variant.backend]
    ok, why = backend.supports(shape, getattr(torch, setup.dtype), torch.device(setup.device), mode == "fwd+bwd")
    return why if not ok else backend.library_problem(variant.direct)


def slime_layer_problem(setup: LayerSetup) -> str | None:
    """Why slime's own layer cannot be built here (its source, FLA's modules it builds, a GPU), or None."""
    from slime_flashqla.host.packages import is_installed
    from slime_flashqla.integrations.slime.source import SlimeSourceError, slime_source

    try:
        if slime_source(setup.slime_source) is None:
            return "slime's source was not found: pass --slime-source DIR (a slime checkout) or set $SLIME_SOURCE"
    except SlimeSourceError as error:
        return str(error)
    if not is_installed("fla"):
        return "slime's layer builds FLA's ShortConvolution and FusedRMSNormGated: flash-linear-attention is missing"
    if setup.device_type != "cuda":
        return "slime's layer puts its gated norm on the GPU (accelerator.current_device()): needs a CUDA device"
    return None


def variant_note(variant: Variant) -> str:
    """A caveat that belongs next to the variant's numbers (empty when none)."""
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    if variant.megatron_layer:
        from slime_flashqla.bench.megatron_layer import megatron_core_problem, megatron_note

        return "" if megatron_core_problem() else megatron_note()

    backend = KERNEL_BACKENDS.get(variant.backend)
    # Asked only of a GVA variant through the backend: FLA's answer imports fla.
    if backend is not None and not (variant.repeat or variant.direct) and not backend.supports_gva:
        return f"this {backend.label} takes no GVA: the backend repeats q/k itself"
    return ""


def repeating(fn, group: int):
    """Wrap a chunk_gated_delta_rule so q/k are repeat_interleave'd to Hv heads first (slime's path today)."""

    def chunk_gated_delta_rule(q, k, v, **kwargs):
        return fn(q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2), v, **kwargs)

    return chunk_gated_delta_rule


def backend_fn(variant: Variant):
    """What the variant calls: this package's backend, or the library's own function."""
    from slime_flashqla.gdn import get_chunk_gated_delta_rule
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    fn = get_chunk_gated_delta_rule(variant.backend)
    return KERNEL_BACKENDS[variant.backend].library_fn() if variant.direct else fn


def kernel_fn(variant: Variant, heads: HeadConfig):
    fn = backend_fn(variant)
    return (repeating(fn, heads.group) if variant.repeat and heads.group > 1 else fn), fn


def backward_from(output, grad) -> None:
    """Backpropagate `grad` from `output` the way a layer inside a model receives its gradient: from the engine."""
    from torch.autograd.variable import Variable

    # Not output.backward(grad): Tensor.backward with an explicit gradient checks its shape with
    # torch's symbolic-shape helpers, whose first use imports sympy (docs/benchmarks.md: most of
    # the first training pass on an H200). Inside a model the layer's output gradient comes from
    # the autograd engine (loss.backward() on a scalar, or Megatron's pipeline stages, which call
    # the engine directly in schedules.custom_backward), which never runs that check.
    Variable._execution_engine.run_backward(
        tensors=(output,), grad_tensors=(grad,), keep_graph=False, create_graph=False, inputs=(),
        allow_unreachable=True, accumulate_grad=True,
    )  # fmt: skip


def kernel_call(fn, inputs: dict, backward: bool):
    """One timed call of the kernel: forward (under no_grad) or forward + backward of a fixed grad."""
    import torch

    leaves = [inputs[key].requires_grad_(backward) for key in ("q", "k", "v", "g", "beta")]
    q, k, v, g, beta = leaves

    def call():
        with torch.set_grad_enabled(backward):
            o, _ = fn(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True, cu_seqlens=inputs["cu_seqlens"])
        if backward:
            backward_from(o, inputs["grad"])
            for leaf in leaves:  # None, not zero: the next backward assigns instead of accumulating
                leaf.grad = None

    return call


def _our_layer(variant: Variant, heads: HeadConfig, setup: LayerSetup):
    import torch

    from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
    from slime_flashqla.workload.models import gdn_layer_config

    classes = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
    size = {"head_dim": setup.head_dim, "hidden_size": setup.hidden_size, "conv_kernel": CONV_KERNEL}
    config = gdn_layer_config(heads.key_heads, heads.value_heads, **size)
    # The same seed for every variant: identical weights, and the caller's RNG is left alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(setup.seed)
        # A variant that swaps in another kernel call would preload kernels it never runs.
        cls = classes[setup.layer_model]
        layer = cls(config, backend=variant.backend, preload_kernels=not (variant.direct or variant.repeat))
        init_like_checkpoint(layer)
    return layer.to(device=torch.device(setup.device), dtype=getattr(torch, setup.dtype)), config


def _slime_layer(variant: Variant, heads: HeadConfig, setup: LayerSetup):
    """slime's own layer class, built as slime builds it, cast as Megatron's Float16Module casts, our weights."""
    from types import SimpleNamespace

    import torch

    from slime_flashqla.integrations.slime.source import slime_gdn_layer_class

    ours, config = _our_layer(variant, heads, setup)
    dtype = getattr(torch, setup.dtype)
    cls = slime_gdn_layer_class(setup.layer_model, setup.slime_source)
    args = SimpleNamespace(qwen_gdn_backend=variant.backend)
    layer = cls(SimpleNamespace(**config, dtype=dtype), layer_idx=0, args=args)
    layer = layer.to(device=torch.device(setup.device), dtype=dtype)
    layer.load_state_dict(ours.state_dict(), strict=True)
    _check_parity(f"{variant.name}: slime's layer", layer, ours, setup)
    return layer


def megatron_peer(ours, setup: LayerSetup):
    """Megatron-core's GatedDeltaNet holding `ours`'s weights, refused (RuntimeError) where their outputs disagree."""
    import torch

    from slime_flashqla.bench.megatron_layer import build_megatron_gdn, parity_reference

    layer = build_megatron_gdn(ours, torch.device(setup.device))
    _check_parity("Megatron-core's GatedDeltaNet", layer, parity_reference(layer, ours), setup)
    return layer


def _check_parity(what: str, layer, reference, setup: LayerSetup) -> None:
    """Refuse (RuntimeError) a peer layer whose output differs from this package's beyond bf16 rounding."""
    error = _output_difference(layer, reference, setup)
    if not error <= SLIME_PARITY_TOLERANCE:
        raise RuntimeError(
            f"{what} and this package's disagree on the same weights (relative error "
            f"{error:.2e} > {SLIME_PARITY_TOLERANCE:.0e}); not timing it"
        )


def _output_difference(layer, reference, setup: LayerSetup) -> float:
    """Relative L2 difference of two layers' outputs on one fixed packed batch (a sequence shorter than the conv)."""
    import torch

    lengths = [3, 200, 61]
    device = torch.device(setup.device)
    gen = torch.Generator(device=device).manual_seed(setup.seed + 1)
    x = torch.randn(1, sum(lengths), setup.hidden_size, generator=gen, device=device, dtype=getattr(torch, setup.dtype))
    cu = torch.tensor([0, 3, 203, 264], dtype=torch.int32, device=device)
    with torch.no_grad():
        a, b = layer(x, cu_seqlens=cu).double(), reference(x, cu_seqlens=cu).double()
    return ((a - b).norm() / b.norm()).item()


def build_layer(variant: Variant, heads: HeadConfig, setup: LayerSetup):
    """The layer a variant times: this package's (around its backend) or slime's own class, same weights."""
    if variant.slime_layer:
        return _slime_layer(variant, heads, setup)
    layer, _ = _our_layer(variant, heads, setup)
    if variant.megatron_layer:
        return megatron_peer(layer, setup)
    if variant.direct:
        layer.chunk_gated_delta_rule = backend_fn(variant)
    if variant.repeat and heads.group > 1:
        layer.chunk_gated_delta_rule = repeating(layer.chunk_gated_delta_rule, heads.group)
    return layer


def layer_call(layer, inputs: dict, backward: bool):
    """One timed call of the layer: forward (under no_grad) or forward + backward of a fixed grad."""
    import torch

    x = inputs["x"].requires_grad_(backward)
    params = list(layer.parameters())

    def call():
        with torch.set_grad_enabled(backward):
            out = layer(x, cu_seqlens=inputs["cu_seqlens"])
        if backward:
            backward_from(out, inputs["grad"])
            x.grad = None
            for param in params:
                param.grad = None

    return call


def input_bytes(tokens: int, heads: HeadConfig, setup: LayerSetup, level: str) -> int:
    """Bytes random_inputs allocates for a pack of `tokens` (what a group needs before any variant runs)."""
    size = {"bfloat16": 2, "float16": 2, "float32": 4}[setup.dtype]
    if level == "layer":
        return 2 * tokens * setup.hidden_size * size  # x and its gradient
    dim = setup.head_dim
    # q, k; v and its gradient; beta in the q/k/v dtype, g in float32
    per_token = (2 * heads.key_heads * dim + 2 * heads.value_heads * dim + heads.value_heads) * size
    return tokens * (per_token + 4 * heads.value_heads)


def random_inputs(lengths, heads: HeadConfig, setup: LayerSetup, level: str, generator=None) -> dict:
    """Fresh random inputs for one packed batch of `lengths` (seeded by `setup.seed` unless given a generator)."""
    import torch
    import torch.nn.functional as F

    from slime_flashqla.workload.lengths import packed_offsets

    device, dim = torch.device(setup.device), setup.head_dim
    offsets = packed_offsets(lengths)
    tokens = offsets[-1]
    if generator is None:
        generator = torch.Generator(device=device).manual_seed(setup.seed)

    def randn(*size, dtype=None):
        dtype = dtype or getattr(torch, setup.dtype)
        return torch.randn(*size, generator=generator, device=device, dtype=dtype)

    cu_seqlens = torch.tensor(offsets, dtype=torch.int32, device=device)
    if level == "layer":
        return {
            "x": randn(1, tokens, setup.hidden_size),
            "grad": randn(1, tokens, setup.hidden_size),
            "cu_seqlens": cu_seqlens,
        }
    hk, hv = heads.key_heads, heads.value_heads
    return {
        "q": randn(1, tokens, hk, dim),
        "k": randn(1, tokens, hk, dim),
        "v": randn(1, tokens, hv, dim),
        # FlashQLA's benchmark decay: logsigmoid(N(0,1)) / 16, i.e. gates close to 1.
        "g": F.logsigmoid(randn(1, tokens, hv, dtype=torch.float32)) / 16,
        # beta in the q/k/v dtype and g in float32, as the layers pass them: FlashQLA compiles
        # per dtype, so this is the kernel a training step (and `warmup`) runs.
        "beta": randn(1, tokens, hv).sigmoid(),
        "grad": randn(1, tokens, hv, dim),
        "cu_seqlens": cu_seqlens,
    }
