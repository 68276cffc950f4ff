"""Head counts of --model: a named model or a config.json, checked as strictly as --heads before any work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slime_flashqla.workload.heads import HeadConfig, parse_head_config
from slime_flashqla.workload.models import model_heads, model_rank_heads


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"linear_num_key_heads": 0, "linear_num_value_heads": 0}, "positive multiple"),
        ({"linear_num_key_heads": -16, "linear_num_value_heads": -32}, "positive multiple"),
        ({"linear_num_key_heads": 3, "linear_num_value_heads": 4}, "positive multiple"),
        ({"linear_num_key_heads": "16", "linear_num_value_heads": 32.5}, "a whole number"),
        ({"linear_num_key_heads": True, "linear_num_value_heads": 2}, "a whole number"),
        ({"linear_num_key_heads": 16}, "has no 'linear_num_value_heads'"),
        ([16, 32], "not a JSON object"),
        ({"text_config": [1]}, "not a JSON object"),
    ],
)
def test_a_config_with_unusable_heads_is_refused_with_the_reason(tmp_path, config, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=words) as raised:
        model_heads(str(path))
    assert str(path) in str(raised.value)


def test_a_config_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        model_heads(str(path))


def test_good_configs_give_the_same_heads_as_parse_heads(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"text_config": {"linear_num_key_heads": 16, "linear_num_value_heads": 64}}))
    assert model_heads(str(path)) == parse_head_config("16/64") == HeadConfig(16, 64)
    assert model_heads("qwen3-next-80b-a3b") == HeadConfig(16, 32)


def test_warmup_refuses_bad_model_heads_before_any_process_starts(tmp_path):
    """The probe's warmup case: ZeroDivisionError per configuration before; now one line and exit 2."""
    path = tmp_path / "z.json"
    path.write_text(json.dumps({"linear_num_key_heads": 0, "linear_num_value_heads": 0}))
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "warmup", "--model", str(path), "--backends", "torch",
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    output = (done.stdout + done.stderr).strip().splitlines()
    assert len(output) == 1 and "positive multiple" in output[0]


@pytest.mark.parametrize("tp", ["x", "2,two", ","])
def test_a_tp_that_is_not_a_list_of_sizes_is_named(tp):
    with pytest.raises(ValueError, match=r"--tp .*: give a comma list of tensor-parallel sizes"):
        model_rank_heads(["qwen3-next-80b-a3b"], tp)
    assert model_rank_heads(["qwen3-next-80b-a3b"], "1, 2") == [HeadConfig(16, 32), HeadConfig(8, 16)]
