"""Flags, parser names, the chat template, architectures and the oldest vLLM checked against a probe result."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.validation import validate, version_key

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


# -- parser names, the oldest vLLM, the chat template ---------------------------------------------------------

PARSING = dict(VLLM, version="0.32.0",
               flags=[*VLLM["flags"], "--tool-call-parser", "--tool-parser-plugin", "--reasoning-parser",
                      "--enable-auto-tool-choice", "--chat-template"],
               tool_parsers=["hermes", "llama3_json", "qwen3_coder", "qwen3_xml"],
               reasoning_parsers=["deepseek_r1", "qwen3"], parsers_known={"tool": True, "reasoning": True})
PARSED = dict(RESULT, vllm=PARSING)


@pytest.mark.parametrize("flags", [
    {"tool_call_parser": "qwen3_codr", "enable_auto_tool_choice": True},
    {"tool-call-parser": "qwen3_codr"},
    ["--tool-call-parser", "qwen3_codr"],
    ["--tool-call-parser=qwen3_codr"],
])
def test_a_misspelled_tool_call_parser_is_refused_with_the_closest_name(flags):
    checked = validate(PARSED, flags)
    assert checked["ok"] is False and checked["unknown_flags"] == []
    assert checked["unknown_parsers"] == [{"option": "tool_call_parser", "name": "qwen3_codr",
                                           "suggestions": ["qwen3_coder", "qwen3_xml"]}]
    assert checked["messages"] == [
        "tool_call_parser 'qwen3_codr' is not a tool-call parser vLLM 0.32.0 in this image registers; did you mean "
        "'qwen3_coder'? (it has: hermes, llama3_json, qwen3_coder, qwen3_xml)"]


def test_a_misspelled_reasoning_parser_is_refused_with_the_closest_name():
    checked = validate(PARSED, {"reasoning_parser": "deepseek-r1"})
    assert checked["ok"] is False
    assert checked["unknown_parsers"][0]["suggestions"][0] == "deepseek_r1"
    assert "reasoning_parser 'deepseek-r1' is not a reasoning parser vLLM 0.32.0" in checked["messages"][0]
    assert "did you mean 'deepseek_r1'?" in checked["messages"][0]


def test_a_name_nothing_resembles_gets_no_suggestion():
    checked = validate(PARSED, {"tool_call_parser": "zzz"})
    assert checked["messages"] == ["tool_call_parser 'zzz' is not a tool-call parser vLLM 0.32.0 in this image "
                                   "registers (it has: hermes, llama3_json, qwen3_coder, qwen3_xml)"]


def test_registered_parsers_pass():
    checked = validate(PARSED, {"tool_call_parser": "qwen3_coder", "enable_auto_tool_choice": True,
                                "reasoning_parser": "qwen3"})
    assert checked["ok"] is True and checked["unknown_parsers"] == [] and checked["messages"] == []


def test_a_tool_parser_plugin_may_register_more():
    checked = validate(PARSED, {"tool_call_parser": "my_parser", "tool_parser_plugin": "/plugins/mine.py"})
    assert checked["ok"] is True and checked["unknown_parsers"] == []
    assert "tool_parser_plugin may register it at startup" in checked["notes"][0]
    # ... tool parsers only: a misspelled reasoning parser is still refused
    assert validate(PARSED, {"reasoning_parser": "qwen", "tool_parser_plugin": "/p.py"})["ok"] is False


def test_parsers_the_probe_could_not_read_are_not_refused():
    unread = dict(RESULT, vllm=dict(PARSING, tool_parsers=[], parsers_known={"tool": False, "reasoning": True}))
    assert validate(unread, {"tool_call_parser": "anything"})["ok"] is True
    older_probe = dict(RESULT, vllm={k: v for k, v in PARSING.items() if k not in ("tool_parsers", "parsers_known")})
    assert validate(older_probe, {"tool_call_parser": "anything"})["ok"] is True


def test_a_parser_option_this_vllm_lacks_is_only_an_unknown_flag():
    checked = validate(RESULT, {"reasoning_parser": "qwen3"})  # VLLM has no --reasoning-parser
    assert [u["flag"] for u in checked["unknown_flags"]] == ["--reasoning-parser"]
    assert checked["unknown_parsers"] == [] and len(checked["messages"]) == 1


@pytest.mark.parametrize(("have", "want", "too_old"), [
    ("0.10.2", "0.11.1", True),
    ("0.11.1rc2", "0.11.1", True),
    ("0.11.1", "0.11.1rc2", False),
    ("0.11.1", "0.11.1", False),
    ("0.11.1.0", "0.11.1", False),
    ("0.10.2+cpu", "0.10.2", False),
    ("0.6.3", "0.6.3.post1", True),
    ("0.6.3.post1", "0.6.3", False),
    ("0.12.0.dev3+g1234", "0.12.0rc1", True),
    ("0.12.0.dev3", "0.11.9", False),
    ("0.32.0", "0.17.0", False),
    ("0.9.2", "0.17.0", True),
])
def test_min_vllm_version(have, want, too_old):
    checked = validate(dict(RESULT, vllm=dict(VLLM, version=have)), min_vllm_version=want)
    assert checked["vllm_too_old"] is too_old and checked["ok"] is not too_old
    if too_old:
        assert checked["messages"] == [f"vLLM {have} in this image is older than {want}, the oldest that serves this "
                                       "recipe (vllm.min_version); use an image with a newer vLLM"]


def test_versions_that_cannot_be_compared():
    assert validate(dict(RESULT, vllm=dict(VLLM, version=None)), min_vllm_version="0.11.0")["ok"] is True
    assert "cannot be compared" in validate(dict(RESULT, vllm=dict(VLLM, version="main")),
                                            min_vllm_version="0.11.0")["notes"][0]
    assert validate(RESULT, min_vllm_version="latest")["ok"] is False  # a recipe's typo


@pytest.mark.parametrize(("version", "key"), [("1.0.dev1", "1.0a1"), ("1.0a1", "1.0b2"), ("1.0b2", "1.0rc1"),
                                              ("1.0rc1", "1.0"), ("1.0", "1.0.post1"), ("1.0.post1", "1.1.dev0")])
def test_pep_440_order(version, key):
    assert version_key(version) < version_key(key)


def test_a_missing_chat_template_is_refused_with_a_suggestion():
    template = {"value": "examples/tool_chat_template_hermess.jinja",
                "path": "/vllm-workspace/examples/tool_chat_template_hermess.jinja", "found": False, "where": None,
                "suggestions": ["/vllm-workspace/examples/tool_chat_template_hermes.jinja"]}
    result = dict(PARSED, chat_template=template, image=dict(RESULT["image"], working_dir="/vllm-workspace"))
    checked = validate(result, {"chat_template": template["value"]})
    assert checked["ok"] is False and checked["chat_template"] == template
    assert checked["messages"] == [
        "chat_template examples/tool_chat_template_hermess.jinja (relative to the image's working directory "
        "/vllm-workspace) is not a file in the image, nor one of vLLM's built-in templates, nor on this host; did you "
        "mean /vllm-workspace/examples/tool_chat_template_hermes.jinja?"]


def test_a_chat_template_found_on_the_host_passes_with_a_note():
    template = {"value": "/srv/models/m/t.jinja", "path": "/srv/models/m/t.jinja", "found": True, "where": "host",
                "suggestions": []}
    checked = validate(dict(PARSED, chat_template=template), {"chat_template": template["value"]})
    assert checked["ok"] is True and "only through a mount" in checked["notes"][0]
