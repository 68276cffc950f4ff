"""The Python calls gdn_backends.md shows run as written; `slime_flashqla.gdn` lists its exports (issue 35 item 22)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import slime_flashqla.gdn
from slime_flashqla.gdn import check_inputs, get_chunk_gated_delta_rule

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_documented_choice_for_call_runs_on_real_tensors(language):
    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / language / "gdn_backends.md").read_text(), flags=re.M | re.S)
    calls = [code for code in re.findall(r"`([^`]+)`", text) if code.startswith("fn.choice_for(check_inputs(")]
    assert calls, "gdn_backends.md shows no runnable choice_for call"
    batch, tokens, key_heads, value_heads, dim = 1, 12, 2, 4, 8
    q, k = (torch.randn(batch, tokens, key_heads, dim) for _ in range(2))
    v = torch.randn(batch, tokens, value_heads, dim)
    g = torch.nn.functional.logsigmoid(torch.randn(batch, tokens, value_heads))
    beta = torch.rand(batch, tokens, value_heads)
    cu_seqlens = torch.tensor([0, 5, 12])
    scope = {"fn": get_chunk_gated_delta_rule("auto"), "check_inputs": check_inputs, **locals()}
    for call in calls:
        assert eval(call, scope).backend == "torch"  # inputs on the CPU


def test_dir_of_the_gdn_package_lists_its_lazy_exports():
    """Tab completion and dir() find the public names, which load on first use."""
    assert set(slime_flashqla.gdn.__all__) <= set(dir(slime_flashqla.gdn))
