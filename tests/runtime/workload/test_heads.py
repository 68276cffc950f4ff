"""workload.heads: the one `Hk/Hv` grammar and HeadConfig every command shares."""

from __future__ import annotations

import pytest

from slime_flashqla.workload.heads import HeadConfig, HeadConfigError, checked_heads, parse_head_config, parse_heads


def test_head_configs():
    heads = parse_heads("16/32,8/16, 2/4,16/32")
    assert heads == [HeadConfig(16, 32), HeadConfig(8, 16), HeadConfig(2, 4)]
    assert heads[0].label == str(heads[0]) == "16/32" and heads[0].group == 2
    assert parse_heads("16/64")[0].group == 4
    assert sorted([HeadConfig(16, 32), HeadConfig(2, 8)]) == [HeadConfig(2, 8), HeadConfig(16, 32)]


@pytest.mark.parametrize(
    ("text", "match"),
    [("16/30", "multiple of Hk"), ("0/4", "positive"), ("16", "Hk/Hv"), ("a/b", "key heads"), ("", "no head")],
)
def test_bad_head_configs_name_what_is_wrong(text, match):
    with pytest.raises(HeadConfigError, match=match):
        parse_heads(text)
    assert issubclass(HeadConfigError, ValueError)  # the CLI reports it as the user's, one line


def test_checked_heads_names_its_source():
    with pytest.raises(HeadConfigError, match=r"config.json: Hv must be a positive multiple of Hk, got 3/4"):
        checked_heads(3, 4, "config.json")
    assert parse_head_config(" 2/8 ") == checked_heads(2, 8, "x")
