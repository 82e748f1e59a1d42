"""model_hub's download with the real huggingface_hub client (2.4.0, the serving image's) against the sandbox's hub
stand-in. The container is the one thing stood in for: its python is this venv's, the bind mounts are the same
paths, and the token file reaches the client only as HF_TOKEN_PATH, as in the container."""

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import ContainerRun
from ansible_collections.vllmops.cluster.plugins.module_utils.model_hub import Hub, HubError, explain

pytest.importorskip("huggingface_hub", minversion="2.4.0",
                    reason="huggingface_hub (2.4.0, pinned in requirements.txt) is not in this venv: run `make venv`")
HUB_PY = Path(__file__).resolve().parents[3] / "sandbox" / "hub.py"
TOKEN = "hf_unit_reader"


class LocalEngine:
    """DockerClient.run() as the model download uses it, run here: what the container would see, nothing more."""

    def __init__(self):
        self.runs = []

    def run(self, image, entrypoint, cmd, timeout, name=None, labels=None, device_requests=None, env=None,
            host_config=None):
        binds = {inside: outside for outside, inside, *_ in (b.split(":") for b in host_config.get("Binds", []))}
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        environ.update(entry.split("=", 1) for entry in env)
        if "HF_TOKEN_PATH" in environ:
            environ["HF_TOKEN_PATH"] = binds[environ["HF_TOKEN_PATH"]]
            self.runs.append({"env": env, "token": Path(environ["HF_TOKEN_PATH"]).read_text(),
                              "mode": oct(Path(environ["HF_TOKEN_PATH"]).stat().st_mode & 0o777),
                              "token_path": environ["HF_TOKEN_PATH"], "cmd": cmd})
        else:
            self.runs.append({"env": env, "cmd": cmd})
        proc = subprocess.run([sys.executable, *cmd], env=environ, capture_output=True, timeout=timeout)
        return ContainerRun(proc.returncode, proc.stdout, proc.stderr, False)


@pytest.fixture(scope="module")
def hub(load_script, tmp_path_factory):
    module = load_script("sandbox_hub_for_model_hub", HUB_PY)
    source = tmp_path_factory.mktemp("model")
    (source / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (source / "model.safetensors").write_bytes(os.urandom(3 << 20))
    root = tmp_path_factory.mktemp("hub")
    revision = module.publish(root, "org/model", source)
    module.publish(root, "org/gated", source)
    with module.HubServer(root, gated={"org/gated": TOKEN}) as server:
        yield server, revision, source


def test_download_checks_the_hub_hashes_and_keeps_a_version_with_its_manifest(hub, tmp_path):
    server, revision, source = hub
    target = tmp_path / "models" / "tiny"
    manifest, downloaded = Hub(LocalEngine(), "image", server.url).download("org/model", revision, str(target))
    assert downloaded == sum(p.stat().st_size for p in source.iterdir())
    assert manifest["path"] == model_files.version_path(str(target), manifest["digest"])
    assert sorted(os.listdir(manifest["path"])) == ["config.json", "model.safetensors"]  # no .cache left
    assert not os.path.exists(model_files.staging_path(str(target)))
    assert manifest["files"]["model.safetensors"]["sha256"] == hashlib.sha256(
        (source / "model.safetensors").read_bytes()).hexdigest()
    assert manifest["source"] == {"hub": "org/model", "revision": revision, "endpoint": server.url}
    assert model_files.read_manifest(manifest["path"]) == manifest
    # Nothing was served there yet: the path links to the version now, relatively.
    assert os.readlink(target) == f".vllmops-versions/tiny/{manifest['digest'][7:23]}"
    assert (target / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()


def test_a_download_beside_a_served_version_does_not_change_what_is_served(hub, tmp_path):
    server, revision, _source = hub
    target = tmp_path / "models" / "tiny"
    staging = Path(model_files.staging_path(str(target)))
    staging.mkdir(parents=True)
    (staging / "config.json").write_text('{"architectures": ["Served"]}')
    served = model_files.commit_version(str(staging), str(target), model_files.scan(str(staging))[0], {})
    manifest, _downloaded = Hub(LocalEngine(), "image", server.url).download("org/model", revision, str(target))
    assert model_files.served_version(str(target)) == served["path"] != manifest["path"]
    assert os.listdir(target) == ["config.json"] and sorted(os.listdir(manifest["path"])) == ["config.json",
                                                                                              "model.safetensors"]


def test_the_config_is_read_before_any_weight_file_is_fetched(hub):
    server, revision, _source = hub
    before = len(server.requests)
    commit, files, config = Hub(LocalEngine(), "image", server.url).info_and_config("org/model", revision)
    assert (commit, sorted(files)) == (revision, ["config.json", "model.safetensors"])
    assert config == {"architectures": ["LlamaForCausalLM"]}
    fetched = [path for _method, path in server.requests[before:] if "/resolve/" in path]
    assert fetched and all(path.endswith("/config.json") for path in fetched), fetched


def test_the_token_reaches_the_client_only_as_a_private_file(hub, tmp_path):
    server, revision, _source = hub
    engine = LocalEngine()
    Hub(engine, "image", server.url, token=TOKEN).download("org/gated", revision, str(tmp_path / "gated"))
    for run in engine.runs:
        assert run["token"] == TOKEN and run["mode"] == "0o600"
        assert not any(TOKEN in part for part in run["env"] + run["cmd"])
        assert not os.path.exists(run["token_path"])  # removed after the run


@pytest.mark.parametrize(("repo", "revision", "token", "said"), [
    # A gated repository lists its files to anyone (as the Hub does); its files need the token.
    ("org/gated", None, "", "org/gated is gated: accept the model's terms"),
    ("org/gated", None, "hf_someone_else", "org/gated is gated and model_hub_token may not read it"),
    ("org/nothing", None, "", "has no model org/nothing (or it is private: set model_hub_token)"),
    ("org/model", "0" * 40, "", f"org/model has no revision {'0' * 40}"),
])
def test_bad_input_is_one_sentence_and_serves_nothing(hub, tmp_path, repo, revision, token, said):
    server, good, _source = hub
    target = tmp_path / "m"
    with pytest.raises(HubError, match=re.escape(said)):
        Hub(LocalEngine(), "image", server.url, token=token).download(repo, revision or good, str(target))
    assert not target.exists()


def test_an_image_without_the_client_says_so():
    assert "has no usable huggingface_hub" in explain("ImportError", "No module named 'huggingface_hub'", "a/b", "x", "",
                                                      False)
    assert "cannot reach http://hub:1 from this node" in explain("ConnectError", "refused", "a/b", "x", "http://hub:1",
                                                                  False)
