"""workload.lengths: the one grammar of packed sequence lengths, and their offsets."""

from __future__ import annotations

import pytest

from slime_flashqla.workload.lengths import MAX_TOKENS, ShapeError, packed_offsets, parse_shape, parse_shapes


@pytest.mark.parametrize(
    ("text", "lengths"),
    [
        ("1x32768", (32768,)),  # FlashQLA's label for one sequence
        ("1x8192", (8192,)),
        ("8192x4", (8192,) * 4),
        ("1024x8", (1024,) * 8),
        ("28672+4096", (28672, 4096)),
        ("1000+3096", (1000, 3096)),
        ("64+64", (64, 64)),
        ("300", (300,)),
        ("1024x2+4096", (1024, 1024, 4096)),
        (" 8192 + 24576 ", (8192, 24576)),
    ],
)
def test_shape_notation(text, lengths):
    shape = parse_shape(text)
    assert shape.lengths == lengths
    assert shape.tokens == sum(lengths)
    assert shape.cu_seqlens()[-1] == sum(lengths) and shape.cu_seqlens()[0] == 0
    assert len(shape.cu_seqlens()) == len(lengths) + 1


@pytest.mark.parametrize("text", ["", "abc", "8192x0", "0", "1024x", "+", "12-3", "4096+", "x8", "1.5k", "16/32"])
def test_bad_shapes_say_what_is_wrong(text):
    with pytest.raises(ShapeError, match="shape"):
        parse_shape(text)


def test_shape_list_keeps_order_and_drops_duplicates():
    shapes = parse_shapes("1x32768, 8192x4,1x32768,1000+3096")
    assert [s.label for s in shapes] == ["1x32768", "8192x4", "1000+3096"]
    with pytest.raises(ShapeError, match="no shapes"):
        parse_shapes(" , ")


def test_packed_offsets_are_cu_seqlens_values():
    assert packed_offsets([3, 1, 4]) == [0, 3, 4, 8]
    assert packed_offsets(()) == [0]
    assert parse_shape("8192x2+1").cu_seqlens() == packed_offsets([8192, 8192, 1])


def test_int32_bounds_are_checked_before_the_list_is_built():
    with pytest.raises(ShapeError, match=str(MAX_TOKENS)):
        parse_shape("2x100000000000")
