"""The Chinese README and results pages exist, are linked from both READMEs, and run the English commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bash_commands(page: Path) -> list[str]:
    """The commands of `page`'s ```bash fences, in order, comments dropped."""
    commands = []
    for fence in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
        joined = re.sub(r"\\\n\s*", "", fence)
        commands += [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines()]
    return [command for command in commands if command and not command.startswith("#")]


def test_the_chinese_readme_runs_the_same_commands_and_is_linked():
    assert bash_commands(ROOT / "README.zh.md") == bash_commands(ROOT / "README.md")
    assert "(README.zh.md)" in (ROOT / "README.md").read_text()
    assert "(README.md)" in (ROOT / "README.zh.md").read_text()


@pytest.mark.parametrize("page", ["benchmarks.md", "gpu_validation.md"])
def test_the_results_pages_have_a_chinese_version_linked_from_both_readmes(page):
    assert (ROOT / "docs" / "zh" / page).is_file()
    for readme in ("README.md", "README.zh.md"):
        text = (ROOT / readme).read_text()
        assert re.search(rf"\(docs/{page}(#current-results)?\)", text) and f"(docs/zh/{page})" in text, readme


def numbers(text: str) -> list[str]:
    """The numbers of the table rows of `text`, in order, links' anchors and dates left out."""
    rows = "\n".join(line for line in text.splitlines() if line.startswith("| "))
    rows = re.sub(r"\]\([^)]*\)", "]", rows)
    return re.findall(r"\d+(?:\.\d+)?(?:e-\d+)?", rows)


@pytest.mark.parametrize("page", ["benchmarks.md", "gpu_validation.md"])
def test_the_chinese_results_page_quotes_the_english_current_tables(page):
    en = (ROOT / "docs" / page).read_text()
    current = en[en.index("## Current results") : en.index("## Runs, newest first")]
    assert numbers((ROOT / "docs" / "zh" / page).read_text()) == numbers(current)
