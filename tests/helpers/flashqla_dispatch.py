"""Read what a flash-qla release dispatches per compute version from its source (ast; nothing is imported).

Three things decide it, in the release's own files:
- chunk/__init__.py's top-level if/elif on `tilelang.contrib.nvcc.get_target_compute_version()`:
  which versions import, and which kernel names each branch binds (`fused_gdr_bwd = None`: no backward);
  its `else: raise` and any other such chain run at import (0.1.1/0.1.2's chunk/cp_context.py);
- 0.1.3's `ARCH = current_arch()` at import of chunk/cp/context.py: current_arch() raises for any
  version missing from COMPUTE_VERSION_ARCH (chunk/cp/autocp/launch.py);
- functions that import names lazily from the chunk package at call time (0.1.3's cp_preprocess_fwd):
  a name the branch never binds raises ImportError on that call (`*_bwd` functions: the backward).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

CHUNK = Path("flash_qla/ops/gated_delta_rule/chunk")
CHUNK_MODULE = "flash_qla.ops.gated_delta_rule.chunk"
# Modules that run their compute-version chain when flash_qla is imported (chunk/__init__.py imports them).
IMPORT_TIME_GATES = ("cp_context.py", "cp/context.py")


@dataclass(frozen=True)
class Dispatch:
    """What a release does on one compute version, as its code says."""

    importable: bool
    forward: bool
    backward: bool


@dataclass
class _Branch:
    versions: set[str]
    bound: set[str]
    none: set[str]


def _is_version_query(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get_target_compute_version"
        for n in ast.walk(node)
    )


def _versions(test: ast.expr) -> set[str]:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_version_query(test.left)):
        raise ValueError(f"unreadable compute-version test: {ast.unparse(test)}")
    (op,), (right,) = test.ops, test.comparators
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
        return {right.value}
    if isinstance(op, ast.In) and isinstance(right, ast.List | ast.Tuple | ast.Set):
        return {e.value for e in right.elts}
    raise ValueError(f"unreadable compute-version test: {ast.unparse(test)}")


def _bindings(body: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """(names bound, names bound to None) by the statements of one branch."""
    bound, none = set(), set()
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom):
            bound |= {alias.asname or alias.name for alias in stmt.names}
        elif isinstance(stmt, ast.Assign):
            names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            bound |= names
            if isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                none |= names
    return bound, none


def _chain(tree: ast.Module) -> tuple[list[_Branch], bool, set[str]] | None:
    """The module's top-level compute-version chain: (branches, whether its else raises, names bound elsewhere)."""
    found, outside = None, set()
    for stmt in tree.body:
        if found is None and isinstance(stmt, ast.If) and _is_version_query(stmt.test):
            branches, node = [], stmt
            while True:
                bound, none = _bindings(node.body)
                branches.append(_Branch(_versions(node.test), bound, none))
                if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                    node = node.orelse[0]
                    continue
                raises = any(isinstance(s, ast.Raise) for s in node.orelse)
                break
            found = (branches, raises)
        elif isinstance(stmt, ast.FunctionDef | ast.ClassDef):
            outside.add(stmt.name)
        else:
            outside |= _bindings([stmt])[0]
    return None if found is None else (*found, outside)


def _current_arch_versions(package: Path) -> set[str] | None:
    """COMPUTE_VERSION_ARCH's keys when chunk/cp/context.py runs `ARCH = current_arch()` at import, else None."""
    context, launch = package / CHUNK / "cp/context.py", package / CHUNK / "cp/autocp/launch.py"
    if not (context.is_file() and launch.is_file()):
        return None
    calls_at_import = any(
        isinstance(s, ast.Assign)
        and isinstance(s.value, ast.Call)
        and getattr(s.value.func, "id", "") == "current_arch"
        for s in ast.parse(context.read_text()).body
    )
    if not calls_at_import:
        return None
    for stmt in ast.parse(launch.read_text()).body:
        if isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "COMPUTE_VERSION_ARCH" for t in stmt.targets):
            return {k.value for k in stmt.value.keys}
    raise ValueError(f"{launch}: current_arch() is called at import but COMPUTE_VERSION_ARCH is not found")


def _lazy_imports(package: Path) -> list[tuple[str, set[str]]]:
    """(function name, names) for every function under chunk/ that imports from the chunk package when called."""
    found = []
    for path in sorted((package / CHUNK).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and inner.module == CHUNK_MODULE:
                        found.append((node.name, {alias.name for alias in inner.names}))
    return found


def read_dispatch(package: Path) -> dict[str, Dispatch]:
    """compute version ('9.0') -> what the release in `package` (the folder holding flash_qla/) does there."""
    chain = _chain(ast.parse((package / CHUNK / "__init__.py").read_text()))
    if chain is None:
        raise ValueError(f"{package / CHUNK / '__init__.py'}: no dispatch on get_target_compute_version()")
    branches, raises, outside = chain
    if not raises:
        raise ValueError("chunk/__init__.py's dispatch has no raising else: read this release by hand")
    importable = set().union(*(b.versions for b in branches))
    for gate in IMPORT_TIME_GATES:
        path = package / CHUNK / gate
        other = _chain(ast.parse(path.read_text())) if path.is_file() else None
        if other is not None and other[1]:
            importable &= set().union(*(b.versions for b in other[0]))
    arch = _current_arch_versions(package)
    if arch is not None:
        importable &= arch
    lazy = _lazy_imports(package)
    result = {}
    for branch in branches:
        bound = branch.bound | outside  # a name bound to None still imports; the code checks it for None
        missing = {fn: names - bound for fn, names in lazy if names - bound}
        forward = not any(not fn.endswith("_bwd") for fn in missing)
        backward = forward and not missing and "fused_gdr_bwd" in bound - branch.none
        for version in branch.versions:
            ok = version in importable
            result[version] = Dispatch(ok, ok and forward, ok and backward)
    return result
