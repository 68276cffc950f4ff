"""copy_words: the bytes of torch's copy_, moved as 8-byte words only where every stride allows it."""

import pytest
import torch

from slime_flashqla.triton_ops.word_copy import _as_words, contiguous_words, copy_words

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


def _projection(dtype):
    # A packed projection [T, G, 768] as Qwen3-Next's in_proj_qkvz lays it out, with NaN bit
    # patterns in bf16's payload, which a float path could canonicalise and an int64 one must not.
    x = torch.randn(37, 8, 768).to(dtype)
    x.view(-1)[::97] = float("nan")
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "select",
    [
        lambda x: x[..., 512:768],  # z of every group
        lambda x: x[..., :516].transpose(0, 1),  # q, k, v and 4 gate columns, head-major
        lambda x: x.view(37, 2, 4, 768)[..., 4:8].transpose(0, 1),  # a narrow column block
        lambda x: x[..., 1:5],  # an offset no word boundary meets
        lambda x: x[..., :6],  # a width no word holds whole
        lambda x: x[:, ::3, :8],  # a stride of whole words, a step over groups
        lambda x: x[:0, :, :512],  # no tokens (an empty rank's share)
    ],
)
def test_copy_matches_torch_bit_for_bit(dtype, select):
    src = select(_projection(dtype))
    dst = torch.full(src.shape, 7, dtype=dtype)
    assert copy_words(dst, src) is dst
    assert torch.equal(dst.view(-1).view(torch.uint8), src.contiguous().view(-1).view(torch.uint8))
    out = contiguous_words(src)
    assert out.is_contiguous()
    assert torch.equal(out.view(torch.uint8), src.contiguous().view(torch.uint8))


def test_words_taken_only_where_the_layout_allows():
    x = _projection(torch.bfloat16)
    assert _as_words(x[..., 512:768]) is not None
    assert _as_words(x[..., :516].transpose(0, 1)) is not None
    assert _as_words(x[..., 1:5]) is None  # offset 1 element
    assert _as_words(x[..., :6]) is None  # 6 elements: a word and a half
    assert _as_words(x[..., ::2]) is None  # last dim strided
    assert _as_words(_projection(torch.float64)) is None  # already 8-byte elements
    assert _as_words(torch.zeros(64, dtype=torch.bfloat16).as_strided((1, 8), (3, 1))) is None  # a size-1 dim
    odd_base = torch.empty(4 * 64 + 2, dtype=torch.uint8)[2:].view(torch.bfloat16).view(4, 32)
    assert odd_base.data_ptr() % 8 and _as_words(odd_base) is None  # a storage not 8-byte aligned


def test_mismatched_shapes_or_dtypes_fall_back_to_torch():
    src = torch.randn(4, 8)
    with pytest.raises(RuntimeError):
        copy_words(torch.empty(4, 4), src)
    dst = torch.empty(4, 8, dtype=torch.float64)
    copy_words(dst, src)  # torch's copy casts, and so does this
    assert torch.equal(dst, src.double())
