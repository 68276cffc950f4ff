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
    from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators
    module = import_deferring_decorators("compiled_at_import")
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
    assert import_deferring_decorators("compiled_at_import") is module
    """
)


def run_child(code: str, *args) -> str:
    """Run `code` in a fresh interpreter (so imports start from nothing); its stdout, after checking it exited 0."""
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def tagged_lines(stdout: str) -> dict[str, str]:
    """The child's `TAG value` lines, by tag."""
    return dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)


def plain_import(module_dir, module: str, expression: str) -> str:
    """What `expression` prints after a plain (not deferred) import of `module` from `module_dir`."""
    code = f"import sys; sys.path.insert(0, {str(module_dir)!r}); import {module}; print({expression})"
    return run_child(code).strip()


def test_the_import_builds_no_compiler_and_the_first_call_compiles(tmp_path):
    (tmp_path / "compiled_at_import.py").write_text(MODULE)
    lines = tagged_lines(run_child(CHILD, tmp_path))
    assert lines["INDUCTOR_AFTER_IMPORT"] == "False False"  # a plain `import` would have built both
    assert lines["FRAMES_AFTER_FIRST_CALL"] == "1" and lines["FRAMES_AFTER_SECOND_CALL"] == "1"


def test_a_plain_import_of_the_same_module_does_build_the_compiler(tmp_path):
    """The control: what the deferral saves is real."""
    (tmp_path / "compiled_at_import.py").write_text(MODULE)
    assert plain_import(tmp_path, "compiled_at_import", "'torch._dynamo' in sys.modules") == "True"


DISABLED_MODULE = textwrap.dedent(
    """
    import torch

    seen_compiling = []

    @torch.compiler.disable
    def kernel_call(x):
        seen_compiling.append(torch.compiler.is_compiling())
        return x * 3

    @torch.compiler.disable(reason="a host-side kernel launcher")
    def with_reason(x):
        seen_compiling.append(torch.compiler.is_compiling())
        return x - 1
    """
)

DISABLED_CHILD = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators
    module = import_deferring_decorators("disabled_at_import")
    assert torch.compiler.disable.__module__ == "torch.compiler", "torch.compiler.disable is restored"
    print("DYNAMO_AFTER_IMPORT", "torch._dynamo" in sys.modules)
    x = torch.arange(4.0)
    assert torch.equal(module.kernel_call(x), x * 3) and torch.equal(module.with_reason(x), x - 1)
    print("DYNAMO_AFTER_EAGER_CALLS", "torch._dynamo" in sys.modules)
    print("SYMPY_AFTER_EAGER_CALLS", "sympy" in sys.modules)
    assert module.kernel_call.__name__ == "kernel_call"

    def outer(x):
        return module.kernel_call(x.sin()) + module.with_reason(x).cos()

    compiled = torch.compile(outer, backend="eager", fullgraph=False)
    assert torch.allclose(compiled(x), outer(x))
    assert torch.allclose(compiled(x + 1), outer(x + 1))
    from torch._dynamo.utils import counters
    print("TRACED_INSIDE", any(module.seen_compiling))
    print("GRAPH_BREAKS", sum(counters["graph_break"].values()) > 0)
    """
)


def test_a_deferred_compiler_disable_imports_no_dynamo_and_still_disables_it_under_torch_compile(tmp_path):
    """The deferred marker: no Dynamo (nor sympy) at import or in eager calls; a compiled caller still never traces
    into the function (the marker hands it to the real `torch.compiler.disable`), and the results match eager."""
    (tmp_path / "disabled_at_import.py").write_text(DISABLED_MODULE)
    lines = tagged_lines(run_child(DISABLED_CHILD, tmp_path))
    assert lines["DYNAMO_AFTER_IMPORT"] == "False" and lines["DYNAMO_AFTER_EAGER_CALLS"] == "False"
    assert lines["SYMPY_AFTER_EAGER_CALLS"] == "False"
    assert lines["TRACED_INSIDE"] == "False"  # every call ran eagerly, as the real marker makes it
    assert lines["GRAPH_BREAKS"] == "True"


def test_a_plain_import_of_a_compiler_disable_does_import_dynamo(tmp_path):
    """The control: `@torch.compiler.disable` at import time loads TorchDynamo, which is what the deferral saves."""
    (tmp_path / "disabled_at_import.py").write_text(DISABLED_MODULE)
    loaded = plain_import(tmp_path, "disabled_at_import", "'torch._dynamo' in sys.modules, 'sympy' in sys.modules")
    assert loaded == "True True"


SLOW_MODULE = textwrap.dedent(
    """
    import gate  # the test's: lets the test hold this import half-way
    import torch

    gate.entered.set()
    gate.release.wait(60)

    @torch.compile
    def plain(x):
        return x * 2

    COMPLETE = True
    """
)

THREADS_CHILD = textwrap.dedent(
    """
    import sys, threading, types, torch
    sys.path.insert(0, sys.argv[1])
    gate = types.ModuleType("gate")
    gate.entered, gate.release = threading.Event(), threading.Event()
    sys.modules["gate"] = gate
    from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators
    got = {}

    def importer(name):
        return lambda: got.setdefault(name, import_deferring_decorators("slow_at_import"))

    preload = threading.Thread(target=importer("preload"))
    preload.start()
    assert gate.entered.wait(60)  # the preload thread is inside the import, torch.compile swapped
    # The training thread builds its model meanwhile: its torch.compile is the real one.
    model = torch.compile(torch.nn.Linear(2, 2), backend="eager")
    print("REAL_COMPILE", isinstance(model, torch.nn.Module), getattr(model, "deferred_torch_compile", False))
    second = threading.Thread(target=importer("second"))
    second.start()
    second.join(0.5)
    print("SECOND_WAITS", second.is_alive())  # the module is in sys.modules, half-run: it must wait
    gate.release.set()
    preload.join(60); second.join(60)
    print("SAME_COMPLETE", got["second"] is got["preload"], getattr(got["second"], "COMPLETE", False))
    print("DEFERRED_IN_IMPORT", got["preload"].plain.deferred_torch_compile)
    """
)


def test_a_deferred_import_on_another_thread_changes_nothing_for_this_one(tmp_path):
    """A kernel preload imports flash_qla on its own thread: the training thread's torch.compile is the real
    one meanwhile, and its own import of the module waits for that import instead of taking the half-run module."""
    (tmp_path / "slow_at_import.py").write_text(SLOW_MODULE)
    lines = tagged_lines(run_child(THREADS_CHILD, tmp_path))
    assert lines["REAL_COMPILE"] == "True False"
    assert lines["SECOND_WAITS"] == "True"
    assert lines["SAME_COMPLETE"] == "True True"
    assert lines["DEFERRED_IN_IMPORT"] == "True"
