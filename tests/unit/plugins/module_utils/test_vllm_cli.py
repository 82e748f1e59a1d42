"""Settings -> argv, and argv checked the way a given vLLM parser accepts it."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import (
    CliArgsError,
    settings_to_argv,
    validate_argv,
)

NEW = {  # the shape of a recent vLLM (BooleanOptionalAction, -O, dotted keys)
    "flags": ["--tensor-parallel-size", "-tp", "--enable-prefix-caching", "--no-enable-prefix-caching",
              "--max-num-seqs", "--max-model-len", "--compilation-config", "-O", "--optimization-level",
              "--async-scheduling", "--no-async-scheduling", "--disable-log-requests", "--api-key",
              "--trust-remote-code", "--no-trust-remote-code", "--headless"],
    "negatable_flags": ["--enable-prefix-caching", "--async-scheduling", "--trust-remote-code"],
    "store_true_flags": ["--headless"],
    "deprecated_flags": ["--disable-log-requests"],
    "parser_features": {"underscores": True, "dash_o": True, "dotted_keys": True, "allow_abbrev": True},
}
OLD = {  # vLLM 0.6: store_true flags, StoreBoolean, no -O rewriting
    "flags": ["--tensor-parallel-size", "-tp", "--enable-prefix-caching", "--num-scheduler-steps",
              "--enable-chunked-prefill", "--max-num-seqs", "--max-model-len"],
    "store_true_flags": ["--enable-prefix-caching"],
    "value_boolean_flags": ["--enable-chunked-prefill"],
    "parser_features": {"underscores": True, "dash_o": False, "dotted_keys": False, "allow_abbrev": True},
}

RENDER = [
    ({"tensor_parallel_size": 2, "enable_prefix_caching": True}, NEW,
     ["--tensor-parallel-size", "2", "--enable-prefix-caching"]),
    ({"enable_prefix_caching": False}, NEW, ["--no-enable-prefix-caching"]),
    ({"enable_prefix_caching": False}, OLD, []),
    ({"enable_chunked_prefill": False}, OLD, ["--enable-chunked-prefill", "false"]),
    ({"compilation_config": {"mode": 3, "cudagraph_capture_sizes": [1, 2]}}, NEW,
     ["--compilation-config", '{"cudagraph_capture_sizes":[1,2],"mode":3}']),
    ({"api_key": ["k1", "k2"], "max_model_len": None}, NEW, ["--api-key", "k1", "k2"]),
    ({"-tp": 2}, NEW, ["-tp", "2"]),
    (["--port", 8000], NEW, ["--port", "8000"]),
    ({"enable_prefix_caching": False}, None, ["--no-enable-prefix-caching"]),
]


@pytest.mark.parametrize(("settings", "info", "argv"), RENDER)
def test_settings_to_argv(settings, info, argv):
    assert settings_to_argv(settings, info) == argv


def test_false_without_a_negation_is_refused():
    info = dict(NEW, negatable_flags=[], store_true_flags=[])
    with pytest.raises(CliArgsError, match="has no --no-trust-remote-code"):
        settings_to_argv({"trust_remote_code": False}, info)


VALID = [
    (["--tensor-parallel-size", "2"], NEW),
    (["--tensor_parallel_size=2"], NEW),
    (["-tp", "2"], NEW),
    (["--max-num-seq", "8"], NEW),                    # unambiguous abbreviation
    (["-O3"], NEW), (["-O", "3"], NEW),
    (["--compilation-config.mode=3"], NEW),
    (["--compilation_config.cudagraph_mode", "FULL"], NEW),
    (["--no-enable-prefix-caching"], NEW),
    (["--max-model-len", "-1"], NEW),                 # a negative number is a value, not a flag
    (["--num-scheduler-steps", "10"], OLD),
]


@pytest.mark.parametrize(("argv", "info"), VALID)
def test_accepted(argv, info):
    assert validate_argv(argv, info)["unknown_flags"] == []


INVALID = [
    (["--num-scheduler-steps", "10"], NEW, "--async-scheduling"),
    (["--tensor-paralel-size", "2"], NEW, "--tensor-parallel-size"),
    (["--max", "8"], NEW, "--max-model-len"),        # ambiguous abbreviation
    (["-O3"], OLD, None),                             # 0.6 did not rewrite -O3
    (["--no-enable-prefix-caching"], OLD, "--enable-prefix-caching"),
    (["--compilation-config.mode=3"], OLD, None),
]


@pytest.mark.parametrize(("argv", "info", "suggestion"), INVALID)
def test_refused_with_suggestions(argv, info, suggestion):
    unknown = validate_argv(argv, info)["unknown_flags"]
    assert [u["flag"] for u in unknown] == [argv[0]]
    if suggestion:
        assert suggestion in unknown[0]["suggestions"]


def test_deprecated_flags_are_accepted_and_reported():
    result = validate_argv(["--disable-log-requests"], NEW)
    assert result["unknown_flags"] == []
    assert result["deprecated_flags"] == ["--disable-log-requests"]
