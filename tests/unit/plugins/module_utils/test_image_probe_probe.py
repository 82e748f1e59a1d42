"""The probe: what it asks the engine, what it says when the image or the engine is missing, the cache, and
what it reports for images without Python or without vLLM."""


import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.cache import write_cache
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.probe import (
    PROBE_VERSION,
    ProbeError,
    probe_files,
    probe_image,
)
from memory_files import MemoryFiles

INSPECT = {"Id": "sha256:abc", "RepoTags": ["demo/serving:v1"], "Architecture": "amd64",
           "Config": {"Env": ["PATH=/usr/bin"]}, "GraphDriver": {"Name": "overlay2", "Data": {}}}


def test_an_image_the_engine_lacks_is_named_with_what_to_do(engine, tmp_path):
    engine.route("GET", "/images/demo/absent:1/json", lambda req: req.json(404, {"message": "No such image"}))
    with pytest.raises(ProbeError, match="image demo/absent:1 is not on this host's Docker Engine; pull it"):
        probe_image(DockerClient(engine.host), "demo/absent:1", cache_directory=str(tmp_path))


def test_an_engine_that_does_not_answer_is_named(tmp_path):
    with pytest.raises(ProbeError, match=r"Docker Engine does not answer on this host .*apply the vllmops\.cluster\.docker"):
        probe_image(DockerClient(f"unix://{tmp_path}/none.sock"), "demo:1", cache_directory=str(tmp_path))


def test_a_cached_image_costs_one_inspect(engine, tmp_path):
    engine.route("GET", "/images/demo/serving:v1/json", lambda req: req.json(200, INSPECT))
    write_cache(str(tmp_path), "sha256:abc", PROBE_VERSION, {"vllm": None, "python": None, "notes": []})
    result = probe_image(DockerClient(engine.host), "demo/serving:v1", cache_directory=str(tmp_path))
    assert result["cached"] is True
    assert result["image"]["repo_tags"] == ["demo/serving:v1"]
    assert [path for _method, path, _query, _body in engine.requests] == ["/images/demo/serving:v1/json"]


def test_no_python_is_a_note_not_a_failure():
    found = probe_files(MemoryFiles({"/bin/busybox": ""}), {})
    assert found["python"] is None and found["vllm"] is None
    assert found["packages"]["ray"] is None
    assert found["notes"][0].startswith("no Python found")


def test_python_without_vllm_says_where_it_looked():
    files = MemoryFiles({"/usr/bin/python3": "", "/usr/lib/python3/dist-packages/apt/__init__.py": "",
                         "/usr/lib/python3/dist-packages/ray/_version.py": "version = '2.9.0'\n"})
    found = probe_files(files, {})
    assert found["vllm"] is None
    assert found["python"]["site_packages"] == "/usr/lib/python3/dist-packages"
    assert found["packages"]["ray"] == "2.9.0"
    assert found["notes"] == ["no vllm package in /usr/lib/python3/dist-packages, nor a checkout under /opt, "
                              "/workspace, /app, /vllm-workspace"]
