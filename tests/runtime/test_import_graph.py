"""The package's import graph: folders on floors, every import pointing down, no circle between modules.

Read from the source with `ast` (imports inside functions included), so a lazy import that
points back up is caught as surely as one at the top of a module. A module's
`if __name__ == "__main__":` block is its program entry, which nothing imports: not counted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import slime_flashqla

PACKAGE = Path(slime_flashqla.__file__).parent
# Top to bottom: a folder imports only folders below it (README's layout table lists them so).
FLOORS = [
    "cli",
    "bench",
    "kernel_cache",
    "diagnostics",
    "integrations",
    "comm_guard",
    "layers",
    "kernels",
    "gdn",
    "triton_ops",
    "workload",
    "files",
]
# The edges that point up, each with why it stays.
UPWARD = {
    # diagnostics/node.py, the one home of the node's GPU and version queries, is a leaf: a
    # preload record's fingerprint reads it as `cache export` does.
    ("kernels.tilelang_specs", "diagnostics.node"): "leaf queries",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = PACKAGE.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def is_entry(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def walk_imports(tree: ast.Module):
    """Every node of the module but those under its top-level `if __name__ == "__main__":`."""
    for top in tree.body:
        if not is_entry(top):
            yield from ast.walk(top)


def imports() -> dict[str, set[str]]:
    """Module (relative to slime_flashqla) -> the package's modules it imports, anywhere in its body.

    `from slime_flashqla.x import y` is an edge to the module x.y where y is one, else to x.
    """
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        here = module_name(path)
        for node in walk_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module != "slime_flashqla" and not node.module.startswith("slime_flashqla."):
                    continue
                base = node.module.removeprefix("slime_flashqla").removeprefix(".")
                for alias in node.names:
                    name = f"{base}.{alias.name}" if base else alias.name
                    graph[here].add(name if is_module(name) else base)
            elif isinstance(node, ast.Import):
                graph[here] |= {
                    a.name.removeprefix("slime_flashqla.") for a in node.names if a.name.startswith("slime_flashqla.")
                }
    graph = {module: {t for t in targets if t and t != module} for module, targets in graph.items()}
    return graph


def folder(module: str) -> str | None:
    head = module.split(".")[0]
    return head if (PACKAGE / head).is_dir() else None


def test_every_folder_is_on_a_floor():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(FLOORS)


def test_no_import_points_up_but_the_listed_ones():
    floor = {name: i for i, name in enumerate(FLOORS)}
    upward = set()
    for source, targets in imports().items():
        for target in targets:
            a, b = folder(source), folder(target)
            if a and b and floor[b] < floor[a]:
                upward.add((source, target))
    assert upward == set(UPWARD)


def test_no_circle_between_modules():
    edges = imports()
    done, path = set(), []

    def visit(node: str) -> None:
        if node in path:
            cycle = [*path[path.index(node) :], node]
            raise AssertionError("import circle: " + " -> ".join(cycle))
        if node in done:
            return
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            visit(nxt)
        path.pop()
        done.add(node)

    for module in sorted(edges):
        visit(module)


def test_the_modules_an_upward_edge_reaches_stay_leaves():
    """An upward edge may only reach a module that imports nothing of this package: it can drag no floor in."""
    graph = imports()
    for _, target in UPWARD:
        assert not graph.get(target), f"{target} imports {sorted(graph[target])}"
