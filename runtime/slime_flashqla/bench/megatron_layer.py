"""Megatron-core's own GatedDeltaNet, built as Megatron builds it, holding this package's layer's weights.

The peer a Megatron-Bridge or NeMo user runs (megatron/core/ssm/gated_delta_net/, read at
0.19.2): FLA's causal conv, l2norm and chunk kernel, q/k repeated to the value heads, the gated
norm and the gates under torch.compile (Megatron's jit_fuser). Where Transformer Engine is
installed it is built from Megatron's module spec (get_gated_delta_net_module_spec: TE's
LayerNormLinear, which carries the decoder layer's input RMSNorm, TE's RMSNorm and row-parallel
linear, zero-centred gammas as Megatron-Bridge builds Qwen3-Next); elsewhere from Megatron's own
layers, as its LocalSpecProvider names them (ColumnParallelLinear, torch's RMSNorm,
RowParallelLinear), Megatron's spec being TE-only. One rank: TP = CP = 1.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from slime_flashqla.bench.megatron_weights import load_megatron_gdn, megatron_gdn_state

MEGATRON_CORE_READ = "0.19.2"  # the version whose layout megatron_weights reads (parity checks any other)
MIN_PYTHON = (3, 12)  # megatron-core 0.19's Requires-Python
TE_LINEARS, MEGATRON_LINEARS = "transformer_engine", "megatron"


def megatron_core_problem() -> str | None:
    """Why megatron-core's GatedDeltaNet cannot be imported here (one line), or None."""
    if sys.version_info < MIN_PYTHON:
        found = ".".join(map(str, sys.version_info[:2]))
        return f"megatron-core {MEGATRON_CORE_READ} needs Python >= 3.12; this is Python {found}"
    try:
        _import_megatron()
    except Exception as error:  # ImportError, or a dependency failing at import time
        text = str(error).strip().splitlines()
        return (
            f"megatron-core does not import here ({type(error).__name__}: {text[0] if text else ''}); "
            f"the peer is read from megatron-core {MEGATRON_CORE_READ}"
        )
    return None


def megatron_layer_problem(device_type: str) -> str | None:
    """Why Megatron-core's GatedDeltaNet cannot be built and run on `device_type` here, or None."""
    problem = megatron_core_problem()
    if problem:
        return problem
    if not _import_megatron().HAVE_FLA:
        return "Megatron-core's GatedDeltaNet runs FLA's conv, l2norm and kernel: flash-linear-attention is missing"
    if device_type != "cuda":
        return "Megatron-core's GatedDeltaNet allocates on torch.cuda.current_device(): needs a CUDA device"
    return None


@functools.cache
def _import_megatron() -> SimpleNamespace:
    """The megatron-core names the peer is built from (imported once; its warnings about absent Apex/TE muted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.extensions.transformer_engine import HAVE_TE
        from megatron.core.models.backends import LocalSpecProvider
        from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
            get_gated_delta_net_module_spec,
        )
        from megatron.core.packed_seq_params import PackedSeqParams
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.ssm.gated_delta_net import HAVE_FLA, GatedDeltaNet, GatedDeltaNetSubmodules
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.spec_utils import ModuleSpec, build_module
    return SimpleNamespace(
        HAVE_TE=HAVE_TE,
        HAVE_FLA=HAVE_FLA,
        LocalSpecProvider=LocalSpecProvider,
        get_gated_delta_net_module_spec=get_gated_delta_net_module_spec,
        PackedSeqParams=PackedSeqParams,
        ProcessGroupCollection=ProcessGroupCollection,
        GatedDeltaNet=GatedDeltaNet,
        GatedDeltaNetSubmodules=GatedDeltaNetSubmodules,
        TransformerConfig=TransformerConfig,
        ModuleSpec=ModuleSpec,
        build_module=build_module,
    )


def megatron_core_version() -> str:
    """The installed megatron-core's version ("unknown" where its metadata is absent)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def linears_in_use() -> str:
    """`transformer_engine` where TE is installed (Megatron's spec), else `megatron` (its own layers)."""
    return TE_LINEARS if _import_megatron().HAVE_TE else MEGATRON_LINEARS


def megatron_note(linears: str | None = None) -> str:
    """What the peer is built from here, for a report: megatron-core's version and whose linears."""
    linears = linears or linears_in_use()
    where = "TE's linears (Megatron's spec)" if linears == TE_LINEARS else "Megatron's own linears (no TE)"
    return f"megatron-core {megatron_core_version()}, {where}"


def _one_rank_group():
    """This process's one-rank group (a gloo group over an in-memory store where none exists): TP = CP = 1."""
    import atexit

    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        atexit.register(release_one_rank_group)
    if dist.get_world_size() != 1:
        raise RuntimeError(
            f"Megatron-core's peer layer is built on one rank (TP = CP = 1); this process's group has "
            f"{dist.get_world_size()} ranks"
        )
    return dist.group.WORLD


def release_one_rank_group() -> None:
    """Destroy the process group _one_rank_group made (a no-op where there is none)."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() == 1:
        dist.destroy_process_group()


def _config(m: SimpleNamespace, cfg, dtype: torch.dtype, linears: str, on_cpu: bool):
    """The TransformerConfig Megatron-Bridge gives a Qwen GDN layer, sized as `cfg` (a GDNConfig)."""
    return m.TransformerConfig(
        num_layers=1,
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_value_heads,
        experimental_attention_variant="gated_delta_net",
        linear_attention_freq=4,
        linear_conv_kernel_dim=cfg.conv_kernel_dim,
        linear_key_head_dim=cfg.key_head_dim,
        linear_value_head_dim=cfg.value_head_dim,
        linear_num_key_heads=cfg.num_key_heads,
        linear_num_value_heads=cfg.num_value_heads,
        normalization="RMSNorm",
        layernorm_epsilon=cfg.rms_norm_eps,
        # torch's RMSNorm (Megatron's own layers) refuses zero-centred gammas.
        layernorm_zero_centered_gamma=linears == TE_LINEARS,
        activation_func=F.silu,
        add_bias_linear=False,
        params_dtype=dtype,
        use_cpu_initialization=on_cpu,
        perform_initialization=False,  # the weights are loaded
        transformer_impl="transformer_engine" if linears == TE_LINEARS else "local",
    )


def _spec(m: SimpleNamespace, config, linears: str):
    if linears == TE_LINEARS:
        return m.get_gated_delta_net_module_spec(config)
    local = m.LocalSpecProvider()
    submodules = m.GatedDeltaNetSubmodules(
        in_proj=local.column_parallel_linear(),
        out_norm=local.layer_norm(rms_norm=True),
        out_proj=local.row_parallel_linear(),
    )
    return m.ModuleSpec(module=m.GatedDeltaNet, submodules=submodules)


class MegatronGDN(nn.Module):
    """Megatron-core's GatedDeltaNet behind this package's layer call: [B, T, hidden] (+ cu_seqlens) in and out."""

    def __init__(self, layer: nn.Module, linears: str, input_norm_eps: float | None, packed_seq_params) -> None:
        super().__init__()
        self.layer = layer
        self.linears = linears
        self.input_norm_eps = input_norm_eps  # set where the in_proj carries the decoder layer's input RMSNorm
        self._packed_seq_params = packed_seq_params
        self.chunk_gated_delta_rule = layer.gated_delta_rule

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """Megatron's layout is [T, B, hidden]; packed sequences travel as THD PackedSeqParams."""
        packed = None
        if cu_seqlens is not None:
            packed = self._packed_seq_params(qkv_format="thd", cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens)
        out, _bias = self.layer(hidden_states.transpose(0, 1), attention_mask=None, packed_seq_params=packed)
        return out.transpose(0, 1)


def build_megatron_gdn(ours: nn.Module, device: torch.device, *, linears: str | None = None) -> MegatronGDN:
    """Megatron-core's GatedDeltaNet sized as `ours` (a whole, unsharded layer of this package), its weights loaded."""
    m = _import_megatron()
    linears = linears or linears_in_use()
    cfg = ours.full_config
    dtype = next(ours.parameters()).dtype
    group = _one_rank_group()
    groups = m.ProcessGroupCollection(tp=group, cp=group)
    # Megatron allocates its conv and gates on torch.cuda.current_device(): make it `device`.
    with (
        torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext(),
        warnings.catch_warnings(),  # TransformerConfig's notes on features this layer does not use
    ):
        warnings.simplefilter("ignore", UserWarning)
        config = _config(m, cfg, dtype, linears, on_cpu=device.type == "cpu")
        layer = m.build_module(_spec(m, config, linears), config=config, layer_number=1, pg_collection=groups)
    layer = layer.to(device)
    input_norm = linears == TE_LINEARS
    mapped = megatron_gdn_state(
        ours.state_dict(), cfg, zero_centered_gamma=config.layernorm_zero_centered_gamma, input_norm=input_norm
    )
    load_megatron_gdn(layer, mapped)
    eps = cfg.rms_norm_eps if input_norm else None
    return MegatronGDN(layer, linears, eps, m.PackedSeqParams)


class _InputNormed(nn.Module):
    """`layer` after an RMSNorm of unit gamma: what Megatron's in_proj with the fused input norm computes."""

    def __init__(self, layer: nn.Module, eps: float) -> None:
        super().__init__()
        self.layer, self.eps = layer, eps

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        normed = F.rms_norm(hidden_states.float(), hidden_states.shape[-1:], eps=self.eps).to(hidden_states.dtype)
        return self.layer(normed, cu_seqlens=cu_seqlens)


def parity_reference(peer: MegatronGDN, ours: nn.Module) -> nn.Module:
    """The layer whose output `peer`'s must match: `ours`, behind a unit-gamma RMSNorm where the peer has one."""
    return ours if peer.input_norm_eps is None else _InputNormed(ours, peer.input_norm_eps)
