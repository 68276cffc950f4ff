"""workload.setup: the one serialisable layer setup of `bench gdn`, `bench stream` and the stream worker."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace

import pytest

from slime_flashqla.workload.setup import MAX_SEED, LayerSetup, LayerSetupError

SETUP = LayerSetup("cuda:1", "bfloat16", 128, 2048, 7, layer_model="qwen3.5", slime_source="/src/slime")


def test_a_setup_survives_a_json_round_trip():
    assert LayerSetup.from_json(json.loads(json.dumps(SETUP.to_json()))) == SETUP
    assert SETUP.to_json() == {
        "device": "cuda:1",
        "dtype": "bfloat16",
        "head_dim": 128,
        "hidden_size": 2048,
        "seed": 7,
        "layer_model": "qwen3.5",
        "slime_source": "/src/slime",
    }
    plain = LayerSetup("cpu", "float32", 8, 16, 0)
    assert LayerSetup.from_json({k: v for k, v in plain.to_json().items() if k not in ("layer_model", "slime_source")})
    assert (plain.layer_model, plain.slime_source) == ("qwen3-next", None)


def test_a_setup_is_frozen_and_knows_its_device_type():
    with pytest.raises(FrozenInstanceError):
        SETUP.seed = 1
    types = [LayerSetup(device, "float32", 8, 16, 0).device_type for device in ("cpu", "cuda", "cuda:3")]
    assert types == ["cpu", "cuda", "cuda"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"device": "mps"}, "device must be cpu, cuda or cuda:N, got 'mps'"),
        ({"dtype": "float64"}, "dtype must be one of bfloat16, float16, float32, got 'float64'"),
        ({"head_dim": 0}, "head_dim must be a positive integer, got 0"),
        ({"hidden_size": 2.5}, "hidden_size must be a positive integer, got 2.5"),
        ({"seed": MAX_SEED + 1}, "seed must be an integer from 0 to 2**64-1"),
        ({"seed": True}, "seed must be an integer"),
        ({"layer_model": "qwen4"}, "layer_model must be one of qwen3-next, qwen3.5, got 'qwen4'"),
        ({"slime_source": 3}, "slime_source must be a path string or None"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_the_field(change, words):
    with pytest.raises(LayerSetupError, match="layer setup: ") as refused:
        replace(SETUP, **change)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert issubclass(LayerSetupError, ValueError)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({**SETUP.to_json(), "heads": "1/2"}, "unknown field(s) heads"),
        ({k: v for k, v in SETUP.to_json().items() if k != "seed"}, "missing field(s) seed"),
    ],
)
def test_from_json_refuses_unknown_and_missing_fields(data, words):
    with pytest.raises(LayerSetupError, match=words.replace("(", r"\(").replace(")", r"\)")):
        LayerSetup.from_json(data)
