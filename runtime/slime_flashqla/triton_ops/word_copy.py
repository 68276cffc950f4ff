"""Strided copies moved as 8-byte words.

torch copies a strided (non-contiguous) tensor one element per thread step with an index
computation for each, so a 2-byte strided copy runs far below the memory's bandwidth. Where
both sides' last dim is contiguous and every stride and offset is a whole number of 8-byte
words, the same bytes move as int64 words: a quarter of the elements for bf16.
"""

from __future__ import annotations

import torch

_WORD = torch.int64


def _as_words(t: torch.Tensor) -> torch.Tensor | None:
    """`t` viewed as 8-byte words along its last dim, or None where its layout does not allow it."""
    ratio = _WORD.itemsize // t.element_size()
    if ratio <= 1:
        return None
    if t.stride(-1) != 1 or t.shape[-1] % ratio or t.storage_offset() % ratio or t.data_ptr() % _WORD.itemsize:
        return None
    if any(stride % ratio for stride in t.stride()[:-1]):  # torch's view(dtype) asks it of size-1 dims too
        return None
    return t.view(_WORD)


def copy_words(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """dst.copy_(src) for tensors of one dtype and shape, as 8-byte words where both layouts allow it."""
    if dst.dtype == src.dtype and dst.shape == src.shape:
        words_dst, words_src = _as_words(dst), _as_words(src)
        if words_dst is not None and words_src is not None:
            words_dst.copy_(words_src)
            return dst
    return dst.copy_(src)


def contiguous_words(t: torch.Tensor) -> torch.Tensor:
    """t.contiguous(), copied as 8-byte words where t's layout allows it."""
    if t.is_contiguous():
        return t
    return copy_words(torch.empty(t.shape, dtype=t.dtype, device=t.device), t)
