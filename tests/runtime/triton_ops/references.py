"""Float64 references written from the definitions, and shared tolerances and input makers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slime_flashqla.workload.lengths import packed_offsets

# max |ours - reference| / max |reference| allowed: about three unit roundoffs of the dtype
# (one rounding of the output plus the float32 sums and the inputs' own rounding).
TOLERANCE = {torch.bfloat16: 1.2e-2, torch.float16: 1.5e-3, torch.float32: 1e-5}
DTYPES = list(TOLERANCE)


def rel_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """max |ours - reference| / max |reference|, in float64."""
    reference = reference.double()
    return ((ours.double() - reference).abs().max() / reference.abs().max()).item()


def assert_parity(name: str, ours: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> float:
    """Fail unless ours is within TOLERANCE[dtype] of the float64 reference; return the error."""
    assert ours.shape == reference.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(reference.shape)}"
    assert torch.isfinite(ours).all(), f"{name}: non-finite values"
    err = rel_error(ours, reference)
    assert err <= TOLERANCE[dtype], f"{name} ({dtype}): max rel. error {err:.2e} > {TOLERANCE[dtype]:.1e}"
    return err


def generator(seed: int) -> torch.Generator:
    """A CPU generator: the same inputs on every machine, drawn fresh per test."""
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype, gen, device, scale=1.0, shift=0.0) -> torch.Tensor:
    """Normal(shift, scale) values drawn on the CPU, cast, moved; never zeros."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype).to(device)


def l2norm64(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def rms_norm_gated64(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) * gate * sigmoid(gate)."""
    return weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gate * torch.sigmoid(gate)


def causal_conv1d_silu64(x: torch.Tensor, weight: torch.Tensor, lengths) -> torch.Tensor:
    """y[t] = silu(sum_k w[k] x[t - W + 1 + k]) with x before each sequence's start taken as 0.

    x [B, T, D], weight [D, 1, W]; lengths splits T into packed sequences (None: one per row).
    """
    width = weight.shape[-1]
    w = weight.reshape(weight.shape[0], width)
    outs = []
    for seg in torch.split(x, list(lengths), dim=1) if lengths is not None else [x]:
        padded = F.pad(seg, (0, 0, width - 1, 0))  # zeros before the sequence's first token
        windows = padded.unfold(1, width, 1)  # [B, t, D, W]
        outs.append((windows * w).sum(-1))
    pre = torch.cat(outs, dim=1)
    return pre * torch.sigmoid(pre)


def packed_lengths(gen: torch.Generator, width: int, long: int) -> list[int]:
    """Sequence lengths 1, 2, width - 1, `long` and a few random ones, in a random order."""
    lengths = [1, 2, max(1, width - 1), long, *torch.randint(1, 40, (3,), generator=gen).tolist()]
    order = torch.randperm(len(lengths), generator=gen).tolist()
    return [lengths[i] for i in order]


def cu_seqlens_of(lengths, dtype=torch.int32, device="cpu") -> torch.Tensor:
    """The cu_seqlens tensor of packed `lengths`: workload.lengths.packed_offsets, on `device`."""
    return torch.tensor(packed_offsets(lengths), dtype=dtype, device=device)
