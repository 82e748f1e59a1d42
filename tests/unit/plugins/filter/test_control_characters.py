"""A control character in a value written into a unit or an environment file is named - the setting, where in it,
which character - never echoed; everything else passes."""

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.control_characters import control_characters

SECRET = "hf_s3cr3t-never-echoed"

# (id, settings, the setting each sentence names (in order), the character it names)
REFUSED = [
    ("a line break in a flag's value", {"vllm_serve_args": {"served_model_name": "tiny\nExecStartPre=/bin/sh -c id"}},
     ["vllm_serve_args.served_model_name"], "U+000A, a line feed"),
    ("a line break in an env value, a secret", {"vllm_serve_env": {"HF_TOKEN": f"{SECRET}\nLD_PRELOAD=/tmp/x.so"}},
     ["vllm_serve_env.HF_TOKEN"], "U+000A, a line feed"),
    ("a carriage return in the API key", {"vllm_serve_api_key": f"{SECRET}\r"}, ["vllm_serve_api_key"],
     "U+000D, a carriage return"),
    ("a tab in a path", {"vllm_serve_model": "/srv/models/\tqwen"}, ["vllm_serve_model"], "U+0009, a tab"),
    ("DEL", {"vllm_serve_image": "vllm:0.32\x7f"}, ["vllm_serve_image"], "U+007F, a delete"),
    ("NUL", {"vllm_serve_host": "127.0.0.1\x00"}, ["vllm_serve_host"], "U+0000, a NUL"),
    ("U+001F, unnamed", {"vllm_serve_shm_size": "4g\x1f"}, ["vllm_serve_shm_size"], "U+001F)"),
    ("in a list item", {"vllm_serve_docker_args": ["--label", "a=b\nc"]}, ["vllm_serve_docker_args[1]"], "line feed"),
    ("nested in a flag's JSON value", {"vllm_serve_args": {"compilation_config": {"backend": ["x", "y\n"]}}},
     ["vllm_serve_args.compilation_config.backend[1]"], "line feed"),
    ("in a key", {"vllm_serve_env": {"A\nB": "1"}}, ["the key 'A\\nB' of vllm_serve_env"], "line feed"),
    ("one sentence per setting, in order",
     {"vllm_serve_args": {"a": "1\n", "b": 2, "c": "\n3"}, "vllm_serve_env": {"X": "\x1b[31m"}},
     ["vllm_serve_args.a", "vllm_serve_args.c", "vllm_serve_env.X"], "line feed"),
]


@pytest.mark.parametrize(("settings", "named", "char"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_control_character_is_named_and_never_echoed(settings, named, char):
    problems = control_characters(settings)
    assert [problem.split(" holds a control character")[0] for problem in problems] == named
    assert char in problems[0]
    assert all(problem.endswith("in the unit or environment file: remove it.") for problem in problems)
    assert SECRET not in " ".join(problems) and "ExecStartPre" not in " ".join(problems)


ACCEPTED = [
    ("ordinary settings", {"vllm_serve_args": {"max_model_len": 4096, "enable_prefix_caching": True, "quantization": None,
                                               "compilation_config": {"level": 3, "cudagraph_capture_sizes": [1, 2]},
                                               "chat_template": "{% for m in messages %}{{ m.content }} {% endfor %}"},
                           "vllm_serve_env": {"HF_TOKEN": SECRET, "NCCL_DEBUG": "INFO"},
                           "vllm_serve_ulimits": ["memlock=-1:-1"], "vllm_serve_restart_sec": 10}),
    ("text beyond ASCII", {"vllm_serve_served_model_name": "qwen-ü-模型"}),
    ("nothing set", {}),
    ("none", None),
]


@pytest.mark.parametrize("settings", [case[1] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_text_without_control_characters_passes(settings):
    assert control_characters(settings) == []
