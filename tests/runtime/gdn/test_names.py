"""The backend names a user is offered: the registry's kernel backends in its order, then `auto`, on every command line.

The expected names come from the registry (gdn/backends/__init__.py), the one list a new
backend joins; what is compared is the help a user reads and the parse a user gets.
"""

from __future__ import annotations

import argparse

import pytest

from slime_flashqla.args import add_gdn_backend_argument
from slime_flashqla.cli import build_parser
from slime_flashqla.gdn.backends import AUTO, KERNEL_BACKENDS

KERNELS = list(KERNEL_BACKENDS)
EVERY = [*KERNELS, AUTO]


def _help(argv: list[str], capsys) -> str:
    """`slime-flashqla ARGV --help` as printed, its lines joined (argparse wraps where the width ends)."""
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_check_offers_every_registered_backend_then_auto(capsys):
    assert f"--backend {{{','.join(EVERY)}}}" in _help(["check"], capsys)
    parser = build_parser()
    assert [parser.parse_args(["check", "--backend", name]).backend for name in EVERY] == EVERY


def test_megatron_s_option_offers_the_same_names_and_defaults_to_a_kernel_backend():
    parser = add_gdn_backend_argument(argparse.ArgumentParser())
    assert f"--qwen-gdn-backend {{{','.join(EVERY)}}}" in " ".join(parser.format_help().split())
    assert parser.parse_args([]).qwen_gdn_backend in KERNEL_BACKENDS  # slime's default runs a kernel, not `auto`


def test_warmup_lists_the_kernel_backends_and_bench_stream_every_backend(capsys):
    assert f"backends to warm: {', '.join(KERNELS)} (default" in _help(["warmup"], capsys)
    assert f"run one backend alone ({', '.join(EVERY)})" in _help(["bench", "stream"], capsys)


def test_every_public_name_of_the_gdn_package_loads_the_object_of_that_name():
    import slime_flashqla.gdn as gdn

    for name in gdn.__all__:
        value = getattr(gdn, name)  # AttributeError or ImportError where the name's home is wrong
        assert name in dir(gdn)  # what tab completion lists, before and after first use
        assert getattr(value, "__name__", name) == name, (name, value)  # a class or function is the one named so
    assert tuple(EVERY) == gdn.BACKENDS
