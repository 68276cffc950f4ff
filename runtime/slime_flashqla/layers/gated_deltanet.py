"""Qwen3-Next and Qwen3.5 Gated DeltaNet layers on a selectable GDN kernel backend.

Parameter names and shapes follow the Hugging Face checkpoints, so their state dicts
load as they are.  q/k reach the kernel with their own (smaller) head count: every
backend here takes grouped value heads, which made FlashQLA's forward+backward faster than
repeating q/k first (docs/benchmarks.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.gdn.names import BACKENDS, DEFAULT_BACKEND
from slime_flashqla.kernels.preload import start_kernel_preload
from slime_flashqla.layers.config import GDNConfig
from slime_flashqla.layers.context_parallel import (
    ContextParallel,
    ContextParallelError,
    exchange_rows,
)
from slime_flashqla.layers.ops import gdn_gates, rms_norm_gated, shared_input_linears, short_conv_silu
from slime_flashqla.layers.tensor_parallel import ShardRule, TensorParallel, check_same_layer
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

    def __init__(self, dim: int, eps: float, dtype=None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
        return rms_norm_gated(x, gate, tp.replicated(self.weight), self.variance_epsilon)


class _GatedDeltaNetBase(nn.Module):
    """Everything after the input projections: conv, gates, kernel, gated norm, out_proj.

    With `tp_group`, the layer holds its rank's share of the heads (layers/tensor_parallel.py);
    with `cp_group`, its tokens are the rank's zigzag slices of the pack and its kernel runs its
    head group on whole sequences (layers/context_parallel.py). `compute_on_share` keeps the
    parameters whole and computes this rank's share from then on (slime's contract).
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
        cp_group=None,
        preload_kernels: bool = True,
    ) -> None:
        super().__init__()
        self.full_config = GDNConfig.from_hf(config)
        self.layer_idx = layer_idx
        self.backend = resolve_backend(backend, args)
        self._set_parallel(TensorParallel.of(tp_group, sequence_parallel), ContextParallel.of(cp_group))
        params = self.tp.param_config(self.full_config)
        dtype = params.dtype
        self.conv1d = nn.Conv1d(
            params.conv_dim,
            params.conv_dim,
            kernel_size=params.conv_kernel_dim,
            groups=params.conv_dim,
            padding=params.conv_kernel_dim - 1,
            bias=False,
            dtype=dtype,
        )
        self.dt_bias = nn.Parameter(torch.ones(params.num_value_heads, dtype=dtype))
        self.A_log = nn.Parameter(torch.log(torch.empty(params.num_value_heads, dtype=dtype).uniform_(0.01, 16)))
        self.norm = _GatedRMSNorm(params.value_head_dim, params.rms_norm_eps, dtype=dtype)
        self.out_proj = nn.Linear(params.value_dim, params.hidden_size, bias=False, dtype=dtype)
        self.chunk_gated_delta_rule = self._kernel_for(self.backend)
        if preload_kernels:
            self.start_kernel_preload()
        if self.tp.size > 1:
            self._register_load_state_dict_pre_hook(self._keep_own_shards)

    def _set_parallel(self, tp: TensorParallel, cp: ContextParallel) -> None:
        full = self.full_config
        facts = (
            f"{full.num_key_heads}/{full.num_value_heads} heads, K={full.key_head_dim}, V={full.value_head_dim}, "
            f"hidden {full.hidden_size}, conv {full.conv_kernel_dim}, sequence parallel {tp.sequence_parallel}, "
            f"parameters {'whole' if tp.whole_params else 'sharded'}"
        )
        for group in (g for g, size in ((tp.group, tp.size), (cp.group, cp.size)) if size > 1):
            check_same_layer(group, facts)
        self.tp, self.cp = tp, cp
        cfg = tp.local_config(self.full_config)
        self.config = cfg
        self.kernel_config = cp.local_config(cfg, tp.size)
        self.num_k_heads, self.num_v_heads = cfg.num_key_heads, cfg.num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.key_head_dim, cfg.value_head_dim
        self.key_dim, self.value_dim = cfg.key_dim, cfg.value_dim

    def compute_on_share(
        self, *, tp_group=None, cp_group=None, sequence_parallel: bool = False, grads_summed_by: str = "backward"
    ) -> None:
        """Keep the parameters whole on every rank and compute only this rank's heads and tokens from now on.

        Each rank's parameter gradients then cover its share: `grads_summed_by="backward"` sums
        them over TP in the backward, `"megatron"` marks every parameter `sequence_parallel` for
        Megatron's finalize_model_grads to sum (under sequence parallelism only). Over CP they are
        summed by whatever sums gradients over data-parallel ranks (Megatron's DP x CP reduction).
        """
        if self.tp.size > 1 and not self.tp.whole_params:
            raise ValueError("compute_on_share needs a layer built whole (without tp_group)")
        tp = TensorParallel.of(tp_group, sequence_parallel, whole_params=True, grads_summed_by=grads_summed_by)
        self._set_parallel(tp, ContextParallel.of(cp_group))
        tp.mark_megatron_reduced(self.parameters())
        self.start_kernel_preload()

    def start_kernel_preload(self) -> None:
        """Load what `warmup` recorded for this rank's kernel heads on a background thread (kernels/preload.py)."""
        start_kernel_preload(self.backend, self.kernel_config.num_key_heads, self.kernel_config.num_value_heads)

    @classmethod
    def _projection_rules(cls, cfg: GDNConfig) -> dict[str, ShardRule]:  # pragma: no cover - per subclass
        """How each input projection's unsharded weight splits over tensor-parallel ranks."""
        raise NotImplementedError

    def shard_rules(self) -> dict[str, ShardRule | None]:
        """Every parameter's shard rule under tensor parallelism (None: the same on every rank)."""
        rules = self.__dict__.get("_shard_rules")
        if rules is None:
            rules = self.__dict__["_shard_rules"] = self._rules_of(self.full_config)
        return rules

    @classmethod
    def _rules_of(cls, cfg: GDNConfig) -> dict[str, ShardRule | None]:
        rules = {
            "conv1d.weight": cls._conv_rule(cfg),
            "dt_bias": ShardRule(0, (cfg.num_value_heads,)),
            "A_log": ShardRule(0, (cfg.num_value_heads,)),
            "norm.weight": None,
            "out_proj.weight": ShardRule(1, (cfg.value_dim,)),
        }
        return {**rules, **cls._projection_rules(cfg)}

    @staticmethod
    def _conv_rule(cfg: GDNConfig) -> ShardRule:
        return ShardRule(0, (cfg.key_dim, cfg.key_dim, cfg.value_dim))

    def _keep_own_shards(self, state_dict, prefix, *args, **kwargs) -> None:
        """Slice the unsharded checkpoint's tensors to this rank's heads (tensors already local pass as they are)."""
        if self.tp.whole_params:
            return
        own = dict(self.named_parameters())
        for name, rule in self.shard_rules().items():
            key = prefix + name
            if rule is not None and key in state_dict and state_dict[key].shape != own[name].shape:
                tensor, whole = state_dict[key], list(own[name].shape)
                whole[rule.dim] = sum(rule.sections)
                if list(tensor.shape) != whole:
                    raise ValueError(
                        f"size mismatch for {key}: the checkpoint's tensor is {tuple(tensor.shape)}, "
                        f"the whole model's is {tuple(whole)}"
                    )
                state_dict[key] = self.tp.shard(tensor, rule)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The unsharded checkpoint's tensors under their names (a collective: every tensor-parallel rank calls it)."""
        if self.tp.whole_params:
            return self.state_dict()
        rules = self.shard_rules()
        return {name: self.tp.gather(tensor, rules.get(name)) for name, tensor in self.state_dict().items()}

    def _share(self, param: torch.Tensor, name: str) -> torch.Tensor:
        """The slices of a parameter this rank's projections and output use (the TP share of its heads)."""
        return self.tp.share(param, self.shard_rules()[name])

    def _kernel_share(self, param: torch.Tensor, rule: ShardRule) -> torch.Tensor:
        """The TP share's slices of a per-head parameter, narrowed to this rank's CP head group."""
        local = ShardRule(rule.dim, tuple(n // self.tp.size for n in rule.sections))
        return self.cp.share(self.tp.share(param, rule), local)

    def _kernel_for(self, backend: str):
        """The chunk_gated_delta_rule this layer runs (a subclass may look it up elsewhere, as slime's layers do)."""
        return get_chunk_gated_delta_rule(backend)

    def _mix(self, hidden_states, cu_seqlens, layout):  # pragma: no cover - defined by subclasses
        """(q, k, v, z, b, a): q/k/v after the short conv, z, and the gates' inputs b and a."""
        raise NotImplementedError

    def _exchange_columns(self, j: int, g: int) -> list[int]:  # pragma: no cover - per subclass
        """Rows of the stacked projection weights whose outputs head group j's layout group g sends."""
        raise NotImplementedError

    def _kept_rows(self) -> list[int]:  # pragma: no cover - per subclass
        """Rows of the stacked projection weights whose outputs (z) stay on this rank."""
        raise NotImplementedError

    def _projected_to_heads(self, layout, hidden_states, weights, groups: int):
        """([1, T_pack, groups * padded]: the sent columns over the whole pack for this rank's head group, z [T, K])."""
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        sizes = tuple(w.shape[0] for w in weights)
        key = (self.tp.size, self.cp.size, groups, sizes, x.device)
        plans = self.__dict__.setdefault("_exchange_rows", {})
        if key not in plans:
            plans[key] = exchange_rows(self.cp.size, groups, self._exchange_columns, self._kept_rows(), sizes, x.device)
        whole, kept = self.cp.project_to_heads(layout, x, plans[key], *weights)
        return whole.view(1, whole.shape[0], -1), kept

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """[B, T, hidden] -> [B, T, hidden]; with cu_seqlens (B == 1) no token sees another sequence.

        Under context parallelism T is this rank's tokens and cu_seqlens the whole pack's.
        """
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.config.hidden_size:
            raise ValueError(
                f"hidden_states must be [B, T, {self.config.hidden_size}], got {tuple(hidden_states.shape)}"
            )
        if cu_seqlens is not None and hidden_states.shape[0] != 1:
            raise ValueError(f"with cu_seqlens hidden_states must be packed as B == 1, got B={hidden_states.shape[0]}")
        layout = None
        if self.cp.size > 1 or cu_seqlens is not None:
            # Checked before the first collective (TP's gather, CP's all-to-all): every rank refuses
            # the same pack the same way, so none is left waiting. The conv reads cu_seqlens before
            # the kernel does, so both get the copy of the checked values (gdn/cu_seqlens.py says why).
            cu_seqlens, layout = self._checked_pack(hidden_states, cu_seqlens)
        if hidden_states.is_meta or hidden_states.numel() == 0:
            # What the kernel API gives for them: shape-only (meta) or empty outputs, the graph kept.
            return hidden_states.mul(0)
        hidden_states = self.tp.enter(hidden_states)
        batch, tokens, _ = hidden_states.shape
        query, key, value, z, b, a = self._mix(hidden_states, cu_seqlens, layout)
        kernel = self.kernel_config
        rules = self.shard_rules()
        A_log = self._kernel_share(self.A_log, rules["A_log"])
        g, beta = gdn_gates(a, b, A_log, self._kernel_share(self.dt_bias, rules["dt_bias"]))
        whole = query.shape[1]  # the pack's tokens: this rank's, or every rank's under CP
        core, _ = self.chunk_gated_delta_rule(
            query.view(batch, whole, kernel.num_key_heads, self.head_k_dim),
            key.view(batch, whole, kernel.num_key_heads, self.head_k_dim),
            value.view(batch, whole, kernel.num_value_heads, self.head_v_dim),
            g=g,
            beta=beta,
            initial_state=None,
            output_final_state=False,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu_seqlens,
        )
        if layout is not None and self.cp.size > 1:
            core = self.cp.to_tokens(layout, core)
        # Rows of (token, key head) holding `group` value heads: z's layout in both checkpoints,
        # so the norm reads Qwen3-Next's z where the fused projection wrote it.
        rows = (batch * tokens * self.num_k_heads, self.num_v_heads // self.num_k_heads, self.head_v_dim)
        core = self.norm(core.reshape(rows), z.reshape(rows), self.tp)
        out_weight = self._share(self.out_proj.weight, "out_proj.weight")
        return self.tp.leave(F.linear(core.reshape(batch, tokens, self.value_dim), out_weight))

    def _checked_pack(self, hidden_states, cu_seqlens):
        """(the kernels' cu_seqlens, the zigzag layout under CP) of this rank's input, checked before any collective."""
        tokens = hidden_states.shape[1] * (self.tp.size if self.tp.sequence_parallel else 1)
        if self.cp.size == 1:
            from slime_flashqla.gdn.inputs import checked_cu_seqlens

            return checked_cu_seqlens(cu_seqlens, tokens), None
        if cu_seqlens is None:
            raise ContextParallelError(
                f"GDN context parallelism {self.cp.size} needs the whole pack's cu_seqlens "
                "(slime's packed_seq_params.cu_seqlens_q): its zigzag layout is read from it"
            )
        from slime_flashqla.gdn.cu_seqlens import checked_cu_seqlens_offsets
        from slime_flashqla.gdn.errors import GDNInputError

        try:
            checked, offsets = checked_cu_seqlens_offsets(cu_seqlens, tokens * self.cp.size)
        except GDNInputError as error:
            raise ContextParallelError(
                f"{error} (GDN context parallelism {self.cp.size}: T is the whole pack, {tokens} tokens on each of "
                f"{self.cp.size} ranks; pass the whole pack's cu_seqlens, slime's packed_seq_params.cu_seqlens_q)"
            ) from None
        return checked, self.cp.layout(checked, offsets, tokens)


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

    def _mix(self, hidden_states, cu_seqlens, layout):
        batch, tokens, _ = hidden_states.shape
        heads, group = self.num_k_heads, self.num_v_heads // self.num_k_heads
        k_dim, v_dim = self.head_k_dim, group * self.head_v_dim
        qkvz_weight = self._share(self.in_proj_qkvz.weight, "in_proj_qkvz.weight")
        ba_weight = self._share(self.in_proj_ba.weight, "in_proj_ba.weight")
        conv_weight = self._kernel_share(self.conv1d.weight, self.shard_rules()["conv1d.weight"])
        if self.cp.size == 1:
            # The checkpoint lays q, k, v, z out per key head: [Hk, (K, K, group*V, group*V)], and
            # b, a as [Hk, (group, group)]; the conv and the gates read them there.
            # b/a's gradient rides in spare columns of the conv's gradient: one backward GEMM for both.
            qkvz, ba = shared_input_linears(hidden_states, qkvz_weight, ba_weight, folded=1)
            conv_layout = ProjectionLayout(heads, k_dim, v_dim, v_dim)
            query, key, value, z = short_conv_silu(
                qkvz, conv_weight, cu_seqlens, conv_layout, grad_spare_columns=ba.shape[-1]
            )
            ba = ba.view(batch, tokens, heads, 2 * group)
            return query, key, value, z, ba[..., :group], ba[..., group:]
        # q, k, v and b, a of this rank's head group travel together, each head's row of them padded
        # (context_parallel.GROUP_ALIGN); z is its own GEMM and stays here for the norm.
        own_heads = self.kernel_config.num_key_heads
        mixed, z = self._projected_to_heads(layout, hidden_states, (qkvz_weight, ba_weight), own_heads)
        conv_layout = ProjectionLayout(own_heads, k_dim, v_dim, mixed.shape[-1] // own_heads - 2 * k_dim - v_dim)
        query, key, value, gates = short_conv_silu(mixed, conv_weight, cu_seqlens, conv_layout)
        return query, key, value, z.view(batch, tokens, heads, v_dim), gates[..., :group], gates[..., group : 2 * group]

    def _exchange_columns(self, j: int, g: int) -> list[int]:
        # Stacked: in_proj_qkvz's rows [Hk, (K, K, group*V, group*V)], then in_proj_ba's [Hk, (group, group)].
        heads, group = self.num_k_heads, self.num_v_heads // self.num_k_heads
        k_dim, v_dim = self.head_k_dim, group * self.head_v_dim
        width = 2 * k_dim + 2 * v_dim
        head = j * self.kernel_config.num_key_heads + g
        qkv = range(head * width, head * width + 2 * k_dim + v_dim)
        ba = range(heads * width + head * 2 * group, heads * width + (head + 1) * 2 * group)
        return [*qkv, *ba]

    def _kept_rows(self) -> list[int]:
        group = self.num_v_heads // self.num_k_heads
        k_dim, v_dim = self.head_k_dim, group * self.head_v_dim
        width = 2 * k_dim + 2 * v_dim
        return [head * width + 2 * k_dim + v_dim + c for head in range(self.num_k_heads) for c in range(v_dim)]


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

    def _mix(self, hidden_states, cu_seqlens, layout):
        batch, tokens, _ = hidden_states.shape
        qkv_weight = self._share(self.in_proj_qkv.weight, "in_proj_qkv.weight")
        z_weight = self._share(self.in_proj_z.weight, "in_proj_z.weight")
        b_weight = self._share(self.in_proj_b.weight, "in_proj_b.weight")
        a_weight = self._share(self.in_proj_a.weight, "in_proj_a.weight")
        conv_weight = self._kernel_share(self.conv1d.weight, self.shard_rules()["conv1d.weight"])
        if self.cp.size == 1:
            # b and a (num_v_heads columns each) as one GEMM: two GEMMs that narrow are launch-bound;
            # in the backward their gradient rides in spare columns of the conv's, one GEMM for both.
            ba_weight = torch.cat([b_weight, a_weight])
            qkv, z, ba = shared_input_linears(hidden_states, qkv_weight, z_weight, ba_weight, folded=1)
            conv_layout = ProjectionLayout(1, self.key_dim, self.value_dim)
            query, key, value = short_conv_silu(
                qkv, conv_weight, cu_seqlens, conv_layout, grad_spare_columns=ba.shape[-1]
            )
            heads = self.num_v_heads
            return query, key, value, z, ba[..., :heads], ba[..., heads:]
        mixed, z = self._projected_to_heads(layout, hidden_states, (qkv_weight, z_weight, b_weight, a_weight), 1)
        own = self.kernel_config
        conv_layout = ProjectionLayout(1, own.key_dim, own.value_dim, mixed.shape[-1] - 2 * own.key_dim - own.value_dim)
        query, key, value, gates = short_conv_silu(mixed, conv_weight, cu_seqlens, conv_layout)
        heads = own.num_value_heads
        return query, key, value, z.view(batch, tokens, -1), gates[..., :heads], gates[..., heads : 2 * heads]

    def _exchange_columns(self, j: int, g: int) -> list[int]:
        # Stacked: in_proj_qkv's flat [q_all, k_all, v_all], in_proj_z's, in_proj_b's and in_proj_a's
        # rows; each section's head groups are contiguous, so group j takes the j-th CP-th of each.
        size, k_dim, v_dim, heads = self.cp.size, self.key_dim, self.value_dim, self.num_v_heads
        ba = 2 * k_dim + 2 * v_dim
        starts_lengths = ((0, k_dim), (k_dim, k_dim), (2 * k_dim, v_dim), (ba, heads), (ba + heads, heads))
        return [
            row
            for start, length in starts_lengths
            for row in range(start + j * length // size, start + (j + 1) * length // size)
        ]

    def _kept_rows(self) -> list[int]:
        start = 2 * self.key_dim + self.value_dim
        return list(range(start, start + self.value_dim))


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
