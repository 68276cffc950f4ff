"""What the docs name exists: the modules of their `python -m` commands, each relative link and its
anchor, every `bench gdn` variant in bench_gdn's table."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from slime_flashqla.bench.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted({*ROOT.glob("README*.md"), *(ROOT / "docs").rglob("*.md")})
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def relative(page: Path) -> str:
    return str(page.relative_to(ROOT))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (CJK kept), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of `page`'s headings, numbered as GitHub numbers repeats."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            base = slug(heading[1])
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_relative_link_and_anchor_resolves(page):
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # an address on the web
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{relative(page)}: {target} does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"{relative(page)}: {target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_documented_module_exists(page):
    """`python -m slime_flashqla...` in a doc names a module this checkout has (issue 35 item 25)."""
    for module in re.findall(r"python3? -m (slime_flashqla[\w.]*)", page.read_text()):
        assert importlib.util.find_spec(module) is not None, f"{relative(page)}: no module {module}"


@pytest.mark.parametrize("language", ["en", "zh"])
def test_bench_gdn_lists_every_variant_the_command_takes(language):
    text = (ROOT / "docs" / language / "bench_gdn.md").read_text()
    table = {
        name for row in re.findall(r"^\| (`[^|]+`) \|", text, re.MULTILINE) for name in re.findall(r"`([^`]+)`", row)
    }
    assert set(VARIANTS) <= table, f"missing from the variant table: {sorted(set(VARIANTS) - table)}"
