"""A chat template given as a path: found in the image, among vLLM's built-in templates, on the host, or not."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe import probe
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.cache import write_cache
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.chat_template import (
    HostFiles,
    check_chat_template,
    flag_value,
    template_path,
)
from memory_files import MemoryFiles

VLLM_DIR = "/usr/local/lib/python3.12/dist-packages/vllm"
IMAGE = {"/vllm-workspace/examples/tool_chat_template_hermes.jinja": "{{ x }}",
         "/vllm-workspace/examples/tool_chat_template_mistral.jinja": "{{ x }}",
         "/vllm-workspace/examples/README.md": "",
         f"{VLLM_DIR}/transformers_utils/chat_templates/template_chatml.jinja": "{{ x }}"}


@pytest.mark.parametrize(("flags", "expected"), [
    ({"chat_template": "/t.jinja"}, "/t.jinja"),
    ({"chat-template": "examples/t.jinja"}, "examples/t.jinja"),
    ({"--chat_template": "/t.jinja"}, "/t.jinja"),
    (["--port", "8000", "--chat-template", "/t.jinja"], "/t.jinja"),
    (["--chat-template=/t.jinja"], "/t.jinja"),
    ({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}, None),  # inline
    ({"chat_template": None}, None),
    ({"max_model_len": 256}, None),
    (None, None),
])
def test_template_path(flags, expected):
    assert template_path(flags) == expected


def test_flag_value_takes_any_spelling():
    assert flag_value({"tool-call-parser": "hermes"}, "tool-call-parser") == "hermes"
    assert flag_value(["--tool_call_parser", "hermes"], "tool-call-parser") == "hermes"
    assert flag_value(["--tool-call-parser"], "tool-call-parser") == ""
    assert flag_value(["--tool-call-parser-x", "y"], "tool-call-parser") is None


@pytest.mark.parametrize(("value", "path", "where"), [
    ("/vllm-workspace/examples/tool_chat_template_hermes.jinja",
     "/vllm-workspace/examples/tool_chat_template_hermes.jinja", "image"),
    ("examples/tool_chat_template_hermes.jinja", "/vllm-workspace/examples/tool_chat_template_hermes.jinja", "image"),
    ("./examples/../examples/tool_chat_template_mistral.jinja",
     "/vllm-workspace/examples/tool_chat_template_mistral.jinja", "image"),
    ("template_chatml.jinja", f"{VLLM_DIR}/transformers_utils/chat_templates/template_chatml.jinja", "vllm builtin"),
])
def test_templates_found_in_the_image(value, path, where):
    found = check_chat_template(MemoryFiles(IMAGE), value, "/vllm-workspace", VLLM_DIR)
    assert found == {"value": value, "path": path, "found": True, "where": where, "suggestions": []}


def test_a_missing_template_suggests_the_closest_jinja_file_beside_it():
    found = check_chat_template(MemoryFiles(IMAGE), "examples/tool_chat_template_hermess.jinja", "/vllm-workspace",
                                VLLM_DIR)
    assert found["found"] is False and found["path"] == "/vllm-workspace/examples/tool_chat_template_hermess.jinja"
    assert found["suggestions"][0] == "/vllm-workspace/examples/tool_chat_template_hermes.jinja"
    assert all(s.endswith(".jinja") for s in found["suggestions"])


def test_a_directory_is_not_a_template_and_unlisted_readers_suggest_nothing():
    files = MemoryFiles(IMAGE, cheap_listing=False)
    found = check_chat_template(files, "/vllm-workspace/examples", "/", VLLM_DIR)
    assert found["found"] is False and found["suggestions"] == []


def test_a_template_on_the_host(tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{{ x }}")
    found = check_chat_template(MemoryFiles(IMAGE), str(template), "/", VLLM_DIR, HostFiles())
    assert found["found"] is True and found["where"] == "host"
    assert check_chat_template(MemoryFiles(IMAGE), str(tmp_path), "/", VLLM_DIR, HostFiles())["found"] is False
    assert HostFiles().listdir(str(tmp_path)) == ["chat.jinja"] and HostFiles().listdir(str(tmp_path / "x")) is None


INSPECT = {"Id": "sha256:abc", "RepoTags": ["demo/serving:v1"], "Architecture": "amd64",
           "Config": {"Env": ["PATH=/usr/bin"], "WorkingDir": "/vllm-workspace"}}


def test_a_cached_probe_still_reads_the_template_from_the_image(engine, tmp_path, monkeypatch):
    engine.route("GET", "/images/demo/serving:v1/json", lambda req: req.json(200, INSPECT))
    write_cache(str(tmp_path), "sha256:abc", probe.PROBE_VERSION,
                {"vllm": {"path": VLLM_DIR}, "python": None, "notes": [], "backend": "overlay2"})
    monkeypatch.setattr(probe, "open_image_files", lambda docker, inspect, backend: (MemoryFiles(IMAGE), "overlay2"))
    result = probe.probe_image(DockerClient(engine.host), "demo/serving:v1", cache_directory=str(tmp_path),
                               chat_template="examples/tool_chat_template_hermes.jinja")
    assert result["cached"] is True and result["image"]["working_dir"] == "/vllm-workspace"
    assert result["chat_template"]["where"] == "image"
    plain = probe.probe_image(DockerClient(engine.host), "demo/serving:v1", cache_directory=str(tmp_path))
    assert "chat_template" not in plain
