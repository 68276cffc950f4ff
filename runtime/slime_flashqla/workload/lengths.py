"""Packed sequence lengths: one grammar for every command (`1x32768`, `8192x4`, `28672+4096`) and their offsets.

A shape is a list of sequence lengths packed into one batch with cu_seqlens.  It is
written as terms joined by `+`; a term is `N` (one sequence of N tokens) or `AxB`
(B sequences of A tokens, FlashQLA's `8192x4`).  FlashQLA's benchmark also labels one
sequence as `1x32768`, so a leading 1 (`1xN`) means one sequence of N tokens: a batch
of N one-token sequences is never what a GDN benchmark wants.  A shape holds at most
2**31-1 tokens (cu_seqlens are int32) and 2**20 sequences.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

MAX_TOKENS = 2**31 - 1  # cu_seqlens are int32

_TERM = re.compile(r"^(\d+)(?:x(\d+))?$")
# A shape's lengths are a Python list and its cu_seqlens a tensor of as many offsets + 1.
MAX_SEQUENCES = 2**20


class ShapeError(ValueError):
    """A shape string that does not parse, or holds too much; the message says what is wrong."""


@dataclass(frozen=True)
class ShapeSpec:
    """Sequence lengths packed into one varlen batch, with the label they were written as."""

    label: str
    lengths: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    def cu_seqlens(self) -> list[int]:
        """The cumulative offsets [0, l0, l0+l1, ..., T]."""
        return packed_offsets(self.lengths)


def _term_lengths(term: str, text: str) -> list[int]:
    match = _TERM.match(term)
    if match is None:
        raise ShapeError(f"bad shape {text!r}: {term!r} is not N or AxB (e.g. 1x32768, 8192x4, 28672+4096, 1000+3096)")
    first, count = int(match.group(1)), match.group(2)
    if count is None or first == 1:  # N, or FlashQLA's 1xN: one sequence of N tokens
        length, sequences = (first if count is None else int(count)), 1
    else:
        length, sequences = first, int(count)
    if length <= 0 or sequences <= 0:
        raise ShapeError(f"bad shape {text!r}: {term!r} has an empty sequence or a zero count")
    # Bounded before the list is built: `2x100000000000` must not allocate first.
    if length * sequences > MAX_TOKENS:
        raise ShapeError(
            f"bad shape {text!r}: {term!r} holds {length * sequences} tokens; at most {MAX_TOKENS} (int32 cu_seqlens)"
        )
    if sequences > MAX_SEQUENCES:
        raise ShapeError(f"bad shape {text!r}: {term!r} holds {sequences} sequences; at most {MAX_SEQUENCES}")
    return [length] * sequences


def parse_shape(text: str) -> ShapeSpec:
    """Parse one shape (`1x32768`, `8192x4`, `28672+4096`) into its sequence lengths."""
    label = text.strip().replace(" ", "")
    if not label:
        raise ShapeError("empty shape: give sequence lengths such as 1x32768 or 28672+4096")
    lengths: list[int] = []
    for term in label.split("+"):
        lengths += _term_lengths(term, text)
        if sum(lengths) > MAX_TOKENS or len(lengths) > MAX_SEQUENCES:
            raise ShapeError(
                f"bad shape {text!r}: more than {MAX_TOKENS} tokens (int32 cu_seqlens) or {MAX_SEQUENCES} sequences"
            )
    return ShapeSpec(label, tuple(lengths))


def parse_shapes(text: str) -> list[ShapeSpec]:
    """Parse a comma list of shapes; duplicates are dropped, order kept."""
    shapes = [parse_shape(item) for item in text.split(",") if item.strip()]
    if not shapes:
        raise ShapeError(f"no shapes in {text!r}: give a comma list such as 1x32768,8192x4")
    return list(dict.fromkeys(shapes))


def packed_offsets(lengths) -> list[int]:
    """The cumulative offsets [0, l0, l0+l1, ..., T] of packed sequence lengths (cu_seqlens' values)."""
    return list(itertools.accumulate(lengths, initial=0))
