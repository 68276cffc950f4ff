"""Head counts of --model (a named model or a config.json, as strict as --heads), and the layer config from heads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slime_flashqla.workload.heads import HeadConfig, parse_head_config
from slime_flashqla.workload.models import gdn_layer_config, model_heads, model_rank_heads, split_for_tp


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
    """warmup refuses a config.json with unusable heads in one line, exit 2, before any process starts."""
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


def test_a_model_s_heads_are_split_over_the_tp_ranks_or_refused():
    assert split_for_tp(model_heads("qwen3-next-80b-a3b"), 8) == HeadConfig(2, 4)
    assert split_for_tp(model_heads("qwen3.5-397b-a17b"), 2) == HeadConfig(8, 32)
    with pytest.raises(ValueError, match="does not divide"):
        split_for_tp(HeadConfig(16, 48), 32)


@pytest.mark.parametrize("tp", ["x", "2,two", ","])
def test_a_tp_that_is_not_a_list_of_sizes_is_named(tp):
    with pytest.raises(ValueError, match=r"--tp .*: give a comma list of tensor-parallel sizes"):
        model_rank_heads(["qwen3-next-80b-a3b"], tp)
    assert model_rank_heads(["qwen3-next-80b-a3b"], "1, 2") == [HeadConfig(16, 32), HeadConfig(8, 16)]


def test_a_config_nested_too_deeply_is_refused_in_one_line(tmp_path):
    """A config.json nested too deeply for json is refused as not valid JSON, in one line (issue 34 ND22)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"deep.json is not valid JSON \(nested too deeply\)"):
        model_heads(str(path))


def test_a_config_too_large_to_be_one_is_refused_unread(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as handle:
        handle.truncate(64 * 2**20)  # sparse: a 64 MiB file of zeros
    with pytest.raises(ValueError, match=r"64 MiB: a model's config.json is at most 16 MiB"):
        model_heads(str(path))


def test_a_checkpoint_folder_is_read_through_its_config_json(tmp_path):
    """A checkpoint folder is read through the config.json it holds (issue 35 item 18)."""
    (tmp_path / "config.json").write_text(json.dumps({"linear_num_key_heads": 16, "linear_num_value_heads": 32}))
    assert model_heads(str(tmp_path)) == HeadConfig(16, 32)
    assert model_heads(f"{tmp_path}/") == HeadConfig(16, 32)


def test_a_folder_without_config_json_and_a_missing_file_say_so(tmp_path):
    with pytest.raises(ValueError, match=r"is a directory without config.json: pass the model's config.json"):
        model_heads(str(tmp_path))
    with pytest.raises(ValueError, match=r"/nonexistent/config.json: no such file"):
        model_heads("/nonexistent/config.json")
    with pytest.raises(ValueError, match=r"unknown model 'qwen3-next': use one of qwen3-next-80b-a3b, "):
        model_heads("qwen3-next")  # a name, not a path: the names are listed


@pytest.mark.parametrize("counts", [(10**12, 2 * 10**12), (1024, 2048), (2048, 2048)])
def test_head_counts_have_a_stated_upper_bound(tmp_path, counts):
    """Head counts are bounded (at most 1024 value heads), in --model and --heads alike (issue 34 ND20)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"linear_num_key_heads": counts[0], "linear_num_value_heads": counts[1]}))
    with pytest.raises(ValueError, match="at most 1024 value heads"):
        model_heads(str(path))
    with pytest.raises(ValueError, match="at most 1024 value heads"):
        parse_head_config(f"{counts[0]}/{counts[1]}")
    assert parse_head_config("512/1024") == HeadConfig(512, 1024)


def test_warmup_refuses_a_deeply_nested_model_in_one_line(tmp_path):
    """`warmup --model deep.json` is one line and exit 2 (issue 34 ND22)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "warmup", "--model", str(path), "--backends", "torch",
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    output = (done.stdout + done.stderr).strip().splitlines()
    assert len(output) == 1 and "nested too deeply" in output[0], output


def test_the_layer_config_carries_every_size_under_the_names_hugging_face_gives_them():
    """The layer reads every size gdn_layer_config is asked for; its keys are the ones slime's layer classes read."""
    from slime_flashqla.layers.config import GDNConfig

    config = GDNConfig.from_hf(gdn_layer_config(4, 12, head_dim=32, hidden_size=96, conv_kernel=3))
    sizes = (config.num_key_heads, config.num_value_heads, config.key_head_dim, config.value_head_dim)
    assert sizes == (4, 12, 32, 32)
    assert (config.hidden_size, config.conv_kernel_dim, config.hidden_act, config.rms_norm_eps) == (96, 3, "silu", 1e-6)
    assert set(gdn_layer_config(1, 1)) == {
        "hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "hidden_act", "rms_norm_eps",
    }  # fmt: skip
