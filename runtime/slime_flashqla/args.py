"""Megatron/slime argument: `--qwen-gdn-backend`."""

from __future__ import annotations

import argparse

from slime_flashqla.gdn.names import BACKENDS, DEFAULT_BACKEND

GDN_BACKEND_HELP = (
    "kernel for the Qwen3.5/Qwen3-Next Gated DeltaNet layers: 'fla' (FLA's own Triton kernels, the "
    "default), 'flashqla' (FlashQLA's TileLang kernels, validated at start-up), 'torch' (pure PyTorch "
    "reference), 'auto' (FlashQLA where it validates and fits the inputs, else FLA on CUDA, else torch; "
    "logs its choice and reason)"
)


def add_gdn_backend_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add `--qwen-gdn-backend {fla,flashqla,torch,auto}` (default `fla`) to a parser or group."""
    parser.add_argument("--qwen-gdn-backend", choices=BACKENDS, default=DEFAULT_BACKEND, help=GDN_BACKEND_HELP)
    return parser


def widen_gdn_backend_argument(parser: argparse.ArgumentParser) -> bool:
    """Let a parser's `--qwen-gdn-backend` (slime's: fla, flashqla) take every backend; False if it has none."""
    for action in parser._actions:  # argparse keeps no public index of its options
        if "--qwen-gdn-backend" in action.option_strings:
            action.choices = BACKENDS
            action.help = GDN_BACKEND_HELP
            return True
    return False
