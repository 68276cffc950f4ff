"""Qwen3-Next and Qwen3.5 Gated DeltaNet layers on a selectable GDN kernel backend.

Parameter names and shapes follow the Hugging Face checkpoints, so their state dicts
load as they are.  q/k reach the kernel with their own (smaller) head count: every
backend here takes grouped value heads, which made FlashQLA's forward+backward faster than
repeating q/k first (docs/benchmarks.md).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.gdn.names import BACKENDS, DEFAULT_BACKEND
from slime_flashqla.kernels.preload import start_kernel_preload
from slime_flashqla.layers.config import GDNConfig
from slime_flashqla.layers.ops import gdn_gates, rms_norm_gated, shared_input_linears, short_conv_silu
from slime_flashqla.layers.tensor_parallel import ShardRule, TensorParallel
from slime_flashqla.triton_ops.causal_conv1d import ProjectionLayout
from slime_flashqla.workload.lengths import packed_offsets


def resolve_backend(backend: str | None, args) -> str:
    """`backend` wins, then `args.qwen_gdn_backend`, then `fla`."""
    name = backend or getattr(args, "qwen_gdn_backend", None) or DEFAULT_BACKEND
    if name not in BACKENDS:
        raise ValueError(f"unknown GDN backend {name!r}; valid names are: {', '.join(BACKENDS)}")
    return name


class _GatedRMSNorm(nn.Module):
    """Holds `norm.weight` like the checkpoints' Qwen3NextRMSNormGated."""

    def __init__(self, dim: int, eps: float, dtype=None, tp: TensorParallel | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))
        self.variance_epsilon = eps
        self.tp = tp or TensorParallel()

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return rms_norm_gated(x, gate, self.tp.replicated(self.weight), self.variance_epsilon)


class _GatedDeltaNetBase(nn.Module):
    """Everything after the input projections: conv, gates, kernel, gated norm, out_proj.

    With `tp_group`, the layer holds its rank's share of the heads (layers/tensor_parallel.py);
    `config` is always the whole model's, and so are the tensors `load_state_dict` takes.
    """

    def __init__(
        self,
        config,
        layer_idx: int = 0,
        args=None,
        backend: str | None = None,
        *,
        tp_group=None,
        sequence_parallel: bool = False,
        preload_kernels: bool = True,
    ) -> None:
        super().__init__()
        self.full_config = GDNConfig.from_hf(config)
        self.tp = TensorParallel.of(tp_group, sequence_parallel)
        cfg = self.tp.local_config(self.full_config)
        self.config = cfg
        self.layer_idx = layer_idx
        self.backend = resolve_backend(backend, args)
        self.num_k_heads, self.num_v_heads = cfg.num_key_heads, cfg.num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.key_head_dim, cfg.value_head_dim
        self.key_dim, self.value_dim = cfg.key_dim, cfg.value_dim
        dtype = cfg.dtype
        self.conv1d = nn.Conv1d(
            cfg.conv_dim,
            cfg.conv_dim,
            kernel_size=cfg.conv_kernel_dim,
            groups=cfg.conv_dim,
            padding=cfg.conv_kernel_dim - 1,
            bias=False,
            dtype=dtype,
        )
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads, dtype=dtype))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.num_v_heads, dtype=dtype).uniform_(0.01, 16)))
        self.norm = _GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps, dtype=dtype, tp=self.tp)
        self.out_proj = nn.Linear(self.value_dim, cfg.hidden_size, bias=False, dtype=dtype)
        self.chunk_gated_delta_rule = self._kernel_for(self.backend)
        if preload_kernels:
            # Loads what `warmup` recorded for these heads on a background thread (kernels/preload.py).
            start_kernel_preload(self.backend, self.num_k_heads, self.num_v_heads)
        if self.tp.size > 1:
            self._register_load_state_dict_pre_hook(self._keep_own_shards)

    @classmethod
    def _projection_rules(cls, cfg: GDNConfig) -> dict[str, ShardRule]:  # pragma: no cover - per subclass
        """How each input projection's unsharded weight splits over tensor-parallel ranks."""
        raise NotImplementedError

    def shard_rules(self) -> dict[str, ShardRule | None]:
        """Every parameter's shard rule under tensor parallelism (None: the same on every rank)."""
        cfg = self.full_config
        rules = {
            "conv1d.weight": ShardRule(0, (cfg.key_dim, cfg.key_dim, cfg.value_dim)),
            "dt_bias": ShardRule(0, (cfg.num_value_heads,)),
            "A_log": ShardRule(0, (cfg.num_value_heads,)),
            "norm.weight": None,
            "out_proj.weight": ShardRule(1, (cfg.value_dim,)),
        }
        return {**rules, **self._projection_rules(cfg)}

    def _keep_own_shards(self, state_dict, prefix, *args, **kwargs) -> None:
        """Slice the unsharded checkpoint's tensors to this rank's heads (tensors already local pass as they are)."""
        own = dict(self.named_parameters())
        for name, rule in self.shard_rules().items():
            key = prefix + name
            if rule is not None and key in state_dict and state_dict[key].shape != own[name].shape:
                state_dict[key] = self.tp.shard(state_dict[key], rule)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The unsharded checkpoint's tensors under their names (a collective: every tensor-parallel rank calls it)."""
        rules = self.shard_rules()
        return {name: self.tp.gather(tensor, rules.get(name)) for name, tensor in self.state_dict().items()}

    def _kernel_for(self, backend: str):
        """The chunk_gated_delta_rule this layer runs (a subclass may look it up elsewhere, as slime's layers do)."""
        return get_chunk_gated_delta_rule(backend)

    def _mix(self, hidden_states, cu_seqlens):  # pragma: no cover - defined by subclasses
        """(q, k, v, z, b, a): q/k/v after the short conv, z, and the gates' inputs b and a."""
        raise NotImplementedError

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """[B, T, hidden] -> [B, T, hidden]; with cu_seqlens (B == 1) no token sees another sequence."""
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.config.hidden_size:
            raise ValueError(
                f"hidden_states must be [B, T, {self.config.hidden_size}], got {tuple(hidden_states.shape)}"
            )
        if cu_seqlens is not None and hidden_states.shape[0] != 1:
            raise ValueError(f"with cu_seqlens hidden_states must be packed as B == 1, got B={hidden_states.shape[0]}")
        hidden_states = self.tp.enter(hidden_states)
        batch, tokens, _ = hidden_states.shape
        if cu_seqlens is not None:
            # The conv reads cu_seqlens before the kernel does: check it here first, and hand
            # both the copy of the checked values (gdn/cu_seqlens.py says why).
            from slime_flashqla.gdn.inputs import checked_cu_seqlens

            cu_seqlens = checked_cu_seqlens(cu_seqlens, tokens)
        query, key, value, z, b, a = self._mix(hidden_states, cu_seqlens)
        g, beta = gdn_gates(a, b, self.A_log, self.dt_bias)
        core, _ = self.chunk_gated_delta_rule(
            query.view(batch, tokens, self.num_k_heads, self.head_k_dim),
            key.view(batch, tokens, self.num_k_heads, self.head_k_dim),
            value.view(batch, tokens, self.num_v_heads, self.head_v_dim),
            g=g,
            beta=beta,
            initial_state=None,
            output_final_state=False,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu_seqlens,
        )
        # Rows of (token, key head) holding `group` value heads: z's layout in both checkpoints,
        # so the norm reads Qwen3-Next's z where the fused projection wrote it.
        rows = (batch * tokens * self.num_k_heads, self.num_v_heads // self.num_k_heads, self.head_v_dim)
        core = self.norm(core.reshape(rows), z.view(rows))
        return self.tp.leave(self.out_proj(core.reshape(batch, tokens, self.value_dim)))


class Qwen3NextGatedDeltaNet(_GatedDeltaNetBase):
    """Qwen3-Next GDN: fused `in_proj_qkvz` and `in_proj_ba`, grouped per key head."""

    def __init__(self, config, layer_idx: int = 0, args=None, backend: str | None = None, **parallel) -> None:
        super().__init__(config, layer_idx, args, backend, **parallel)
        hidden, dtype = self.config.hidden_size, self.config.dtype
        self.in_proj_qkvz = nn.Linear(hidden, 2 * self.key_dim + 2 * self.value_dim, bias=False, dtype=dtype)
        self.in_proj_ba = nn.Linear(hidden, 2 * self.num_v_heads, bias=False, dtype=dtype)

    @classmethod
    def _projection_rules(cls, cfg: GDNConfig) -> dict[str, ShardRule]:
        # Rows grouped per key head in both fused projections: whole key heads per rank.
        group = cfg.num_value_heads // cfg.num_key_heads
        qkvz = cfg.num_key_heads * (2 * cfg.key_head_dim + 2 * group * cfg.value_head_dim)
        return {
            "in_proj_qkvz.weight": ShardRule(0, (qkvz,)),
            "in_proj_ba.weight": ShardRule(0, (2 * cfg.num_value_heads,)),
        }

    def _mix(self, hidden_states, cu_seqlens):
        batch, tokens, _ = hidden_states.shape
        group = self.num_v_heads // self.num_k_heads
        # The checkpoint lays q, k, v, z out per key head: [Hk, (K, K, group*V, group*V)], and
        # b, a as [Hk, (group, group)]; the conv and the gates read them there.
        layout = ProjectionLayout(self.num_k_heads, self.head_k_dim, group * self.head_v_dim, group * self.head_v_dim)
        qkvz, ba = shared_input_linears(hidden_states, self.in_proj_qkvz.weight, self.in_proj_ba.weight)
        query, key, value, z = short_conv_silu(qkvz, self.conv1d.weight, cu_seqlens, layout)
        ba = ba.view(batch, tokens, self.num_k_heads, 2 * group)
        return query, key, value, z, ba[..., :group], ba[..., group:]


class Qwen3_5GatedDeltaNet(_GatedDeltaNetBase):
    """Qwen3.5 GDN: separate `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`."""

    def __init__(self, config, layer_idx: int = 0, args=None, backend: str | None = None, **parallel) -> None:
        super().__init__(config, layer_idx, args, backend, **parallel)
        hidden, dtype = self.config.hidden_size, self.config.dtype
        self.in_proj_qkv = nn.Linear(hidden, 2 * self.key_dim + self.value_dim, bias=False, dtype=dtype)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False, dtype=dtype)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False, dtype=dtype)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False, dtype=dtype)

    @classmethod
    def _projection_rules(cls, cfg: GDNConfig) -> dict[str, ShardRule]:
        return {
            "in_proj_qkv.weight": ShardRule(0, (cfg.key_dim, cfg.key_dim, cfg.value_dim)),
            "in_proj_z.weight": ShardRule(0, (cfg.value_dim,)),
            "in_proj_b.weight": ShardRule(0, (cfg.num_value_heads,)),
            "in_proj_a.weight": ShardRule(0, (cfg.num_value_heads,)),
        }

    def _mix(self, hidden_states, cu_seqlens):
        layout = ProjectionLayout(1, self.key_dim, self.value_dim)
        # b and a (num_v_heads columns each) as one GEMM: two GEMMs that narrow are launch-bound.
        ba_weight = torch.cat([self.in_proj_b.weight, self.in_proj_a.weight])
        qkv, z, ba = shared_input_linears(hidden_states, self.in_proj_qkv.weight, self.in_proj_z.weight, ba_weight)
        query, key, value = short_conv_silu(qkv, self.conv1d.weight, cu_seqlens, layout)
        heads = self.in_proj_b.weight.shape[0]
        return query, key, value, z, ba[..., :heads], ba[..., heads:]


def init_like_checkpoint(layer: _GatedDeltaNetBase, std: float = 0.02) -> None:
    """Random weights of checkpoint-like scale (for tests and benchmarks without a checkpoint)."""
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name.endswith("A_log"):
                param.copy_(torch.log(torch.empty_like(param, dtype=torch.float32).uniform_(0.01, 16)))
            elif name.endswith("dt_bias") or name.startswith("norm."):
                param.fill_(1.0)
            elif name.startswith("conv1d"):
                param.normal_(0.0, 1.0 / math.sqrt(param.shape[-1]))
            else:
                param.normal_(0.0, std)


def packed_batch(lengths, hidden_size: int, *, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Random hidden states [1, T, hidden_size] (requiring grad) and int32 cu_seqlens for packed `lengths`."""
    offsets = packed_offsets(lengths)
    x = torch.randn(1, offsets[-1], hidden_size, device=device, dtype=dtype, requires_grad=True)
    return x, torch.tensor(offsets, dtype=torch.int32, device=device)
