"""The backend registry: every backend a GDNBackend in it, and a fifth one needs its module and one registry line.

The last test copies the package, adds a throwaway backend module and registers it in the
registry, changing no other file, and shows the CLI's choices, the validation before a
launch, `auto`'s reasons, doctor, the start-up imports and the stack fingerprint (the archive's,
the preload's, doctor's) all take it in.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import slime_flashqla
from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.gdn.api import GDNKernel
from slime_flashqla.gdn.backends import DEFAULT_BACKEND, KERNEL_BACKENDS, REFERENCE, GDNBackend
from slime_flashqla.gdn.backends.auto import candidates, in_auto_order
from slime_flashqla.gdn.backends.contract import KernelContract
from slime_flashqla.gdn.backends.reporting import ReportHooks
from slime_flashqla.gdn.backends.tooling import ToolHooks

PACKAGE = Path(slime_flashqla.__file__).parent
TESTS = Path(__file__).parents[2]

FIFTH = '''\
"""A throwaway fifth backend: the torch reference under another name, for K = V = 64 on any device."""

from __future__ import annotations

from slime_flashqla.gdn.backends.base import GDNBackend


class FifthBackend(GDNBackend):
    """The reference kernel, refusing every head size but 64."""

    name = "fifth"
    label = "Fifth"
    device_types = None
    auto_priority = 2  # after FlashQLA and FLA, before the reference
    runs = "the fifth kernel runs these inputs"
    kernel_distributions = ("packaging",)  # what its kernels are built from (a throwaway: any installed one)

    def available(self, device=None, *, backward: bool = False) -> tuple[bool, str]:
        return True, "nothing to install"

    def input_problem(self, shape, dtype, device) -> str | None:
        if shape.key_dim != 64 or shape.value_dim != 64:
            return f"Fifth needs K = V = 64, got K={shape.key_dim}, V={shape.value_dim}"
        return None

    def kernel(self):
        from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch

        return chunk_gated_delta_rule_torch
'''

# What the copy with the fifth backend answers, as JSON.
PROBE = textwrap.dedent(
    """
    import argparse, json, torch
    from helpers.gdn_inputs import make_inputs
    from slime_flashqla.args import add_gdn_backend_argument
    from slime_flashqla.cli import build_parser
    from slime_flashqla.cli.doctor import report_rows
    from slime_flashqla.diagnostics.report import collect_report
    from slime_flashqla.gdn import GDNInputError, explain_auto, get_chunk_gated_delta_rule
    from slime_flashqla.kernel_cache.stack import current_stack
    from slime_flashqla.kernels.fingerprint import fingerprint_fields
    from slime_flashqla.kernels.imports import kernel_imports

    out = {}
    parser = build_parser()
    out["check"] = parser.parse_args(["check", "--backend", "fifth"]).backend
    out["megatron"] = add_gdn_backend_argument(argparse.ArgumentParser()).parse_args(
        ["--qwen-gdn-backend", "fifth"]).qwen_gdn_backend
    fifth, reference = get_chunk_gated_delta_rule("fifth"), get_chunk_gated_delta_rule("torch")
    for dim in (16, 64):
        inputs = make_inputs(key_dim=dim, value_dim=dim)
        args = (inputs["q"], inputs["k"], inputs["v"])
        kwargs = dict(g=inputs["g"], beta=inputs["beta"], cu_seqlens=inputs["cu_seqlens"])
        try:
            out[f"K={dim}"] = bool(torch.equal(fifth(*args, **kwargs)[0], reference(*args, **kwargs)[0]))
        except GDNInputError as error:
            out[f"K={dim}"] = str(error)
    for dim in (128, 64):
        choice = explain_auto("cpu", key_dim=dim, value_dim=dim)
        out[f"auto K={dim}"] = [choice.backend, choice.reason]
    report = collect_report()
    out["doctor"] = [row for row in report_rows(report) if row[0] == "backend fifth"]
    out["imports"] = kernel_imports("fifth")
    out["fingerprint"] = [
        fingerprint_fields().count("packaging"),
        current_stack().compared_fields()["packaging"] is not None,  # the archive's
        report["kernel_fingerprint"]["packaging"] is not None,  # doctor's (the preload records the same)
    ]
    print(json.dumps(out))
    """
)


def test_every_backend_is_a_gdn_backend_under_its_own_name():
    assert all(isinstance(b, GDNBackend) and b.name == name and b.label for name, b in KERNEL_BACKENDS.items())
    assert DEFAULT_BACKEND in KERNEL_BACKENDS
    assert REFERENCE in KERNEL_BACKENDS and KERNEL_BACKENDS[REFERENCE].auto_priority is None


def test_auto_tries_backends_by_priority_and_doctor_lists_them_in_that_order():
    assert [b.name for b in candidates()] == ["flashqla", "fla"]
    assert [b.name for b in in_auto_order()] == ["flashqla", "fla", "torch"]


class ContractOnly(KernelContract):
    """A backend with the kernel contract alone: no doctor or tool hook to lean on."""

    name, label, device_types = "contract-only", "ContractOnly", None

    def available(self, device=None, *, backward: bool = False) -> tuple[bool, str]:
        return True, "nothing to install"

    def kernel(self):
        return KERNEL_BACKENDS[REFERENCE].kernel()


def test_a_call_needs_the_kernel_contract_alone():
    """The call path reads no doctor or tool hook: a contract-only backend runs, and runs the kernel it names."""
    import torch

    from helpers.gdn_inputs import make_inputs

    backend = ContractOnly()
    assert not isinstance(backend, ReportHooks | ToolHooks)
    inputs = make_inputs(key_heads=2, value_heads=4)
    args = (inputs["q"], inputs["k"], inputs["v"])
    kwargs = dict(g=inputs["g"], beta=inputs["beta"], cu_seqlens=inputs["cu_seqlens"], output_final_state=True)
    ran = GDNKernel(backend)(*args, **kwargs)
    expected = get_chunk_gated_delta_rule(REFERENCE)(*args, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(ran, expected, strict=True))


def _differences(left: Path, right: Path) -> list[str]:
    """Files added to or changed in `right` against `left`, relative paths, caches ignored."""
    found = []
    compared = filecmp.dircmp(left, right, ignore=["__pycache__"])
    found += [str(Path(right.name, name)) for name in compared.right_only + compared.diff_files]
    for name in compared.subdirs:
        found += [str(Path(right.name, path)) for path in _differences(left / name, right / name)]
    return found


def test_a_fifth_backend_is_its_module_and_one_registry_line(tmp_path):
    copy = tmp_path / "slime_flashqla"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "gdn" / "backends" / "fifth.py").write_text(FIFTH)
    registry = copy / "gdn" / "backends" / "__init__.py"
    text = registry.read_text()
    torch_import = "from slime_flashqla.gdn.backends.torch import TorchBackend\n"
    edits = (
        (torch_import, torch_import + "from slime_flashqla.gdn.backends.fifth import FifthBackend\n"),
        ("TorchBackend())}", "TorchBackend(), FifthBackend())}"),
    )
    for anchor, replacement in edits:
        assert text.count(anchor) == 1, anchor
        text = text.replace(anchor, replacement)
    registry.write_text(text)
    assert sorted(_differences(PACKAGE, copy)) == [
        "slime_flashqla/gdn/backends/__init__.py",
        "slime_flashqla/gdn/backends/fifth.py",
    ]

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(TESTS)])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["check"] == out["megatron"] == "fifth"  # the CLI's and Megatron's choices
    assert out["K=16"] == "chunk_gated_delta_rule[fifth]: Fifth needs K = V = 64, got K=16, V=16"
    assert out["K=64"] is True  # it runs, and runs its kernel
    on_cpu = "inputs are on cpu; FLA and FlashQLA run on CUDA only"
    assert out["auto K=128"] == ["torch", f"{on_cpu}; Fifth not used: Fifth needs K = V = 64, got K=128, V=128"]
    assert out["auto K=64"] == ["fifth", f"{on_cpu}; the fifth kernel runs these inputs"]
    assert out["doctor"] == [["backend fifth", "usable: nothing to install"]]
    assert out["imports"] == []  # nothing of its own to import at start
    assert out["fingerprint"] == [1, True, True]  # its declared distribution, once, in the one fingerprint
