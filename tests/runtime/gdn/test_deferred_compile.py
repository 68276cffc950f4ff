"""Importing with @torch.compile deferred: the import builds no compiler, the first call compiles, results match."""

from __future__ import annotations

import subprocess
import sys
import textwrap

MODULE = textwrap.dedent(
    """
    import torch

    @torch.compile
    def plain(x):
        return x * 2 + 1

    @torch.compile(backend="eager", dynamic=False)
    def with_options(x):
        return x.sin()
    """
)

CHILD = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    from slime_flashqla.gdn.deferred_compile import import_deferring_torch_compile
    module = import_deferring_torch_compile("compiled_at_import")
    assert torch.compile.__module__.startswith("torch"), "torch.compile is restored after the import"
    assert module.plain.deferred_torch_compile and module.with_options.deferred_torch_compile
    assert module.plain.__name__ == "plain"
    print("INDUCTOR_AFTER_IMPORT", "torch._inductor" in sys.modules, "torch._dynamo" in sys.modules)
    x = torch.randn(8)
    assert torch.equal(module.with_options(x), x.sin())
    from torch._dynamo.utils import counters
    print("FRAMES_AFTER_FIRST_CALL", counters["frames"]["ok"])
    assert torch.equal(module.with_options(x), x.sin())
    print("FRAMES_AFTER_SECOND_CALL", counters["frames"]["ok"])
    assert import_deferring_torch_compile("compiled_at_import") is module
    """
)


def test_the_import_builds_no_compiler_and_the_first_call_compiles(tmp_path):
    (tmp_path / "compiled_at_import.py").write_text(MODULE)
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["INDUCTOR_AFTER_IMPORT"] == "False False"  # a plain `import` would have built both
    assert lines["FRAMES_AFTER_FIRST_CALL"] == "1" and lines["FRAMES_AFTER_SECOND_CALL"] == "1"


def test_a_plain_import_of_the_same_module_does_build_the_compiler(tmp_path):
    """The control: what the deferral saves is real."""
    (tmp_path / "compiled_at_import.py").write_text(MODULE)
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import compiled_at_import; "
    code += "print('torch._dynamo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "True"
