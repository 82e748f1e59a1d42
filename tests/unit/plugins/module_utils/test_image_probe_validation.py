"""Flags and architectures checked against a probe result."""

from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.validation import validate

VLLM = {"version": "0.16.0", "flags": ["--max-num-seqs", "--tensor-parallel-size", "-tp", "--disable-log-requests"],
        "negatable_flags": [], "store_true_flags": ["--disable-log-requests"], "value_boolean_flags": [],
        "deprecated_flags": ["--disable-log-requests"], "architectures": ["LlamaForCausalLM"],
        "parser_features": {"underscores": True, "dash_o": False, "dotted_keys": False, "allow_abbrev": False}}
RESULT = {"image": {"id": "sha256:0123456789abcdef0123"}, "vllm": VLLM, "notes": []}


def test_known_flags_and_architectures_pass():
    checked = validate(RESULT, {"tensor_parallel_size": 2}, ["LlamaForCausalLM"])
    assert checked["ok"] is True
    assert checked["argv"] == ["--tensor-parallel-size", "2"]
    assert checked["messages"] == []


def test_an_unknown_flag_fails_naming_it_and_the_version():
    checked = validate(RESULT, ["--num-scheduler-steps", "10"])
    assert checked["ok"] is False
    assert [u["flag"] for u in checked["unknown_flags"]] == ["--num-scheduler-steps"]
    assert "--num-scheduler-steps" in checked["messages"][0] and "0.16.0" in checked["messages"][0]


def test_a_deprecated_flag_is_reported_not_refused():
    checked = validate(RESULT, ["--disable-log-requests"])
    assert checked["ok"] is True
    assert checked["deprecated_flags"] == ["--disable-log-requests"]


def test_an_unregistered_architecture_fails():
    checked = validate(RESULT, None, ["Qwen3ForCausalLM", "LlamaForCausalLM"])
    assert checked["ok"] is False
    assert checked["unsupported_architectures"] == ["Qwen3ForCausalLM"]
    assert "Qwen3ForCausalLM" in checked["messages"][0]


def test_an_image_without_vllm_cannot_be_validated():
    checked = validate(dict(RESULT, vllm=None, notes=["no vllm package in /usr/lib"]), ["--port", "8000"])
    assert checked["ok"] is False
    assert checked["messages"] == ["image sha256:0123456789ab has no vLLM (no vllm package in /usr/lib): "
                                   "nothing to validate against"]
