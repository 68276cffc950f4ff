"""The package's import graph: folders in two columns under the commands, over one ground floor.

Every import points down and the two columns import nothing of each other; no two modules import
each other in a circle. Read from the source with `ast` (imports inside functions included), so a
lazy import that points back up is caught as surely as one at the top of a module. A module's
`if __name__ == "__main__":` block is its program entry, which nothing imports: not counted.

Beside the graph, what a process has imported after it: the CLI's parser and the modules a
parser or a job's setup reads import no torch, and the package imports no kernel package until
a kernel is asked for (each line run in a fresh interpreter, so nothing imported before counts).
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import slime_flashqla

PACKAGE = Path(slime_flashqla.__file__).parent
# The checkout's README, beside tests/ (inside an image the package lies in site-packages, the tests do not).
README = Path(__file__).resolve().parents[2] / "README.md"
# The ground floor: imports no other folder of the package; every folder may import it.
GROUND = ["host", "workload", "files"]
# Each column top to bottom: a folder imports only the folders below it in its column (and the ground).
COLUMNS = {
    "GDN": ["layers", "kernels", "gdn", "triton_ops"],
    "comm": ["comm_guard"],
}
# Above the columns, top to bottom: a folder imports those below it here and the columns it stands on.
ABOVE = {
    "cli": {"GDN"},
    "bench": {"GDN", "comm"},
    "diagnostics": {"GDN", "comm"},
    "kernel_cache": {"GDN"},
    "integrations": {"GDN", "comm"},
}


def allowed() -> dict[str, set[str]]:
    """Folder -> the folders it may import, as the floors above say."""
    may = {name: set() for name in GROUND}
    for column in COLUMNS.values():
        for i, name in enumerate(column):
            may[name] = {*column[i + 1 :], *GROUND}
    above = list(ABOVE)
    for i, name in enumerate(above):
        columns = {member for column in ABOVE[name] for member in COLUMNS[column]}
        may[name] = {*above[i + 1 :], *columns, *GROUND}
    return may


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


def test_every_folder_is_on_a_floor_once():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    placed = [*GROUND, *(name for column in COLUMNS.values() for name in column), *ABOVE]
    assert sorted(placed) == sorted(folders)


def test_every_import_points_down_and_no_column_imports_the_other():
    """No exception: an import the floors do not allow fails, wherever in a module it sits."""
    may = allowed()
    wrong = sorted(
        f"{source} -> {target}"
        for source, targets in imports().items()
        for target in targets
        if (a := folder(source)) and (b := folder(target)) and a != b and b not in may[a]
    )
    assert not wrong, wrong


def test_each_column_and_each_stand_is_used():
    """The floors claim no tie the code lacks: each folder over another in a column imports it, each stand is real."""
    used = defaultdict(set)
    for source, targets in imports().items():
        used[folder(source)] |= {folder(target) for target in targets}
    for column in COLUMNS.values():
        for upper, lower in itertools.pairwise(column):
            assert lower in used[upper], f"{upper} does not import {lower}"
    for name, columns in ABOVE.items():
        for column in columns:
            assert used[name] & set(COLUMNS[column]), f"{name} stands on no folder of the {column} column"


def test_the_readme_draws_the_floors_as_they_are():
    """README's Layout table lists the folders floor by floor, in this test's order, each with its floor."""
    section = README.read_text(encoding="utf-8").split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|`]+?) \| `([a-z_]+)/", section, re.M)
    expected = [
        *(("above the columns", name) for name in ABOVE),
        *((f"{column} column", name) for column, names in COLUMNS.items() for name in names),
        *(("ground floor", name) for name in GROUND),
    ]
    assert rows == expected


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


KERNEL_PACKAGES = ("fla", "flash_qla", "tilelang", "triton")
HEAVY = ("torch", *KERNEL_PACKAGES)
# Test id -> (what a process runs, the packages still unimported after it).
UNIMPORTED_AFTER = {
    "cli-parser": ("import slime_flashqla.cli; slime_flashqla.cli.build_parser()", HEAVY),  # every --help
    "gdn.names": ("import slime_flashqla.gdn.names", HEAVY),
    "workload.heads": ("import slime_flashqla.workload.heads", HEAVY),
    "workload.setup": ("import slime_flashqla.workload.setup", HEAVY),
    "cache-cli": ("import slime_flashqla.cli.cache, slime_flashqla.kernel_cache.archive", HEAVY),
    "bench.gdn": ("import slime_flashqla.bench.gdn", HEAVY),
    "package": (
        "import slime_flashqla, slime_flashqla.gdn, slime_flashqla.layers, slime_flashqla.args, "
        "slime_flashqla.diagnostics.report, slime_flashqla.kernels.cache",
        KERNEL_PACKAGES,
    ),
    # Asking for the reference and for `auto`, and auto's choice on this machine, load no kernel either.
    "torch-and-auto": (
        "from slime_flashqla.gdn import get_chunk_gated_delta_rule as get, explain_auto; "
        "get('torch'); get('auto'); explain_auto()",
        KERNEL_PACKAGES,
    ),
}


@pytest.mark.parametrize("case", UNIMPORTED_AFTER)
def test_a_line_imports_none_of_the_packages_it_must_not(case):
    line, unimported = UNIMPORTED_AFTER[case]
    probe = f"import json, sys\n{line}\nprint(json.dumps(sorted(m for m in {unimported!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], line
