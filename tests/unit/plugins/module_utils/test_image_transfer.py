"""Streaming an image from a source to receivers: archive identity, tokens, byte-exact copies."""

import hashlib
import io
import json
import os
import socket
import tarfile
import threading

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import (
    ImageStream,
    TransferError,
    archive_image,
    local_image,
    receive,
    serve,
)


def make_archive(path, images=1, payload=b"layer-bytes" * 5000):
    """A `docker save` shaped archive: config named by its sha256, manifest.json, a layer."""
    members, manifest = [], []
    for index in range(images):
        config = json.dumps({"architecture": "amd64", "os": "linux", "n": index}).encode()
        name = hashlib.sha256(config).hexdigest() + ".json"
        members += [(name, config), (f"layer{index}/layer.tar", payload)]
        manifest.append({"Config": name, "RepoTags": [f"demo/serving:v{index}"], "Layers": [f"layer{index}/layer.tar"]})
    members.append(("manifest.json", json.dumps(manifest).encode()))
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def fake_docker(engine):
    """An engine whose load keeps what it read (engine.loaded) and says what Docker says."""
    engine.loaded = []

    def load(req):
        engine.loaded.append(req.body)
        req.json(200, {"stream": "Loaded image: demo/serving:v0\n"})

    engine.route("POST", "/images/load", load)
    return DockerClient(engine.host)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_archive_identity_is_its_config_digest(tmp_path):
    path = make_archive(tmp_path / "image.tar")
    image_id, tags, size = archive_image(path)
    with tarfile.open(path) as tar:
        config_name = json.load(tar.extractfile("manifest.json"))[0]["Config"]
        digest = hashlib.sha256(tar.extractfile(config_name).read()).hexdigest()
    assert image_id == "sha256:" + digest
    assert tags == ["demo/serving:v0"]
    assert size == os.path.getsize(path)


def test_archive_of_two_images_is_refused(tmp_path):
    with pytest.raises(TransferError, match="holds 2 images"):
        archive_image(make_archive(tmp_path / "two.tar", images=2))


def test_a_file_that_is_no_archive_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(TransferError, match="not a `docker save` archive"):
        archive_image(tmp_path / "notes.txt")


def serve_in_background(source, port, tokens, idle_s=30):
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(serve(source, "127.0.0.1", port, tokens, 60, idle_s)))
    thread.start()
    return thread, outcome


def test_each_receiver_gets_the_whole_archive_once(tmp_path, engine, fake_docker):
    archive = make_archive(tmp_path / "image.tar")
    port = free_port()
    thread, outcome = serve_in_background(ImageStream(None, archive=archive), port, ["tok-a", "tok-b"])
    received = []
    for token in ("tok-a", "tok-b"):
        copied, _seconds, said = receive(fake_docker, f"http://127.0.0.1:{port}/{token}", connect_deadline_s=10)
        received.append(engine.loaded[-1])
        assert copied == os.path.getsize(archive)
        assert said == "Loaded image: demo/serving:v0"
    thread.join(10)
    assert not thread.is_alive(), "the source must stop once every receiver was served"
    assert received == [archive.read_bytes()] * 2
    assert outcome == {"tok-a": os.path.getsize(archive), "tok-b": os.path.getsize(archive)}


def test_a_token_is_served_once_and_a_wrong_one_never(tmp_path, fake_docker):
    archive = make_archive(tmp_path / "image.tar")
    port = free_port()
    thread, outcome = serve_in_background(ImageStream(None, archive=archive), port, ["only"], idle_s=1)
    with pytest.raises(TransferError, match="HTTP 404"):
        receive(fake_docker, f"http://127.0.0.1:{port}/guess", connect_deadline_s=10)
    receive(fake_docker, f"http://127.0.0.1:{port}/only", connect_deadline_s=10)
    thread.join(10)
    assert outcome == {"only": os.path.getsize(archive)}


def test_a_receiver_that_never_comes_lets_the_source_go_after_the_idle_time(tmp_path):
    archive = make_archive(tmp_path / "image.tar")
    thread, outcome = serve_in_background(ImageStream(None, archive=archive), free_port(), ["never"], idle_s=1)
    thread.join(15)
    assert not thread.is_alive()
    assert outcome == {"never": "never requested before the deadline"}


def test_an_unreachable_source_is_named(fake_docker):
    with pytest.raises(TransferError, match=r"cannot reach the image source at http://127\.0\.0\.1:"):
        receive(fake_docker, f"http://127.0.0.1:{free_port()}/tok", connect_deadline_s=1)


def test_progress_is_written_as_json(tmp_path, fake_docker):
    archive = make_archive(tmp_path / "image.tar")
    port = free_port()
    thread, _ = serve_in_background(ImageStream(None, archive=archive), port, ["t"])
    progress = tmp_path / "progress.json"
    receive(fake_docker, f"http://127.0.0.1:{port}/t", 10, str(progress), os.path.getsize(archive))
    thread.join(10)
    report = json.loads(progress.read_text())
    assert report["state"] == "done"
    assert report["bytes"] == report["total_bytes"] == os.path.getsize(archive)


def test_a_failing_docker_load_is_reported(tmp_path, engine):
    archive = make_archive(tmp_path / "image.tar")
    engine.route("POST", "/images/load", lambda req: req.json(200, {
        "errorDetail": {"message": "open /var/lib/docker/tmp/x: no space left on device"},
        "error": "open /var/lib/docker/tmp/x: no space left on device"}))
    port = free_port()
    thread, _ = serve_in_background(ImageStream(None, archive=archive), port, ["t"])
    progress = tmp_path / "progress.json"
    with pytest.raises(TransferError, match=r"docker load failed after \d+ bytes: .* no space left on device"):
        receive(DockerClient(engine.host), f"http://127.0.0.1:{port}/t", 10, str(progress))
    thread.join(10)
    assert json.loads(progress.read_text())["state"] == "failed"


def test_the_engines_save_is_streamed_to_each_receiver(tmp_path, engine, fake_docker):
    saved = make_archive(tmp_path / "saved.tar").read_bytes()
    engine.route("GET", "/images/demo/serving:v0/get",
                 lambda req: req.chunked(200, [saved[i:i + 4096] for i in range(0, len(saved), 4096)]))
    port = free_port()
    thread, outcome = serve_in_background(ImageStream(fake_docker, image="demo/serving:v0"), port, ["t"])
    copied, _seconds, _said = receive(fake_docker, f"http://127.0.0.1:{port}/t", connect_deadline_s=10)
    thread.join(10)
    assert engine.loaded == [saved]
    assert copied == len(saved) and outcome == {"t": len(saved)}


def test_a_save_the_engine_refuses_is_reported_to_the_source(engine):
    engine.route("GET", "/images/demo/serving:v0/get", lambda req: req.json(404, {"message": "reference does not exist"}))
    with pytest.raises(TransferError, match="docker save demo/serving:v0 failed after 0 bytes: reference does not exist"):
        ImageStream(DockerClient(engine.host), image="demo/serving:v0").stream(lambda chunk: None)


def test_local_image_is_identity_or_none(engine):
    engine.route("GET", "/images/demo/serving:v0/json",
                 lambda req: req.json(200, {"Id": "sha256:abc", "RepoTags": ["demo/serving:v0"], "Size": 42}))
    engine.route("GET", "/images/demo/absent:v0/json", lambda req: req.json(404, {"message": "No such image"}))
    client = DockerClient(engine.host)
    assert local_image(client, "demo/serving:v0") == ("sha256:abc", ["demo/serving:v0"], 42)
    assert local_image(client, "demo/absent:v0") is None


def test_an_engine_that_does_not_answer_is_named(tmp_path):
    with pytest.raises(TransferError, match="Docker Engine does not answer on"):
        local_image(DockerClient(f"unix://{tmp_path}/none.sock"), "demo/serving:v0")
