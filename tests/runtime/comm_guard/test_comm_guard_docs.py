"""docs/{en,zh}/comm_guard.md say which ProcessGroup methods `whitelist` skips by name, as the code does."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_flashqla.comm_guard.ops import PG_METHODS, SKIP_OPS, should_check_memory_for_comm

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "docs" / lang / "comm_guard.md" for lang in ("en", "zh")]
SKIPPED_METHODS = sorted(set(PG_METHODS) & SKIP_OPS)


def test_some_process_group_methods_are_on_the_skip_list():
    assert {"barrier", "allgather_into_tensor_coalesced"} <= set(SKIPPED_METHODS)
    assert not any(should_check_memory_for_comm(name) for name in SKIPPED_METHODS)
    assert should_check_memory_for_comm("allreduce") and should_check_memory_for_comm("_allgather_base")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.parent.name)
def test_docs_name_the_process_group_methods_whitelist_skips(doc):
    text = doc.read_text()
    paragraph = next(block for block in text.split("\n\n") if "ReloadableProcessGroup" in block)
    for name in SKIPPED_METHODS:
        assert f"`{name}`" in paragraph, (doc.name, name)
    assert "never match" not in text


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.parent.name)
def test_docs_name_every_read_of_slimes_probe(doc):
    why = doc.read_text().split("\n## ")[1]
    for read in ("mem_get_info", "memory_allocated()", "memory_reserved()", "psutil", "#2268"):
        assert read in why, (doc.parent.name, read)
