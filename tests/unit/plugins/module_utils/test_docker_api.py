"""The Docker Engine client against a fake engine on a unix socket: what each call asks the engine and
what it makes of the answers (not found, the engine's messages, streams, chunked bodies, exec output)."""

import io
import json
import tarfile
import threading

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import (
    DockerClient,
    DockerError,
    demultiplex,
    socket_path,
)
from fake_engine import frame


@pytest.fixture
def client(engine):
    return DockerClient(engine.host, timeout=5)


def tar_of(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize(("argument", "environment", "expected"), [
    (None, None, "/var/run/docker.sock"),
    (None, "unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock"),
    ("unix:///tmp/engine.sock", "unix:///run/other.sock", "/tmp/engine.sock"),
])
def test_the_socket_comes_from_the_argument_then_docker_host_then_the_default(monkeypatch, argument, environment,
                                                                               expected):
    if environment:
        monkeypatch.setenv("DOCKER_HOST", environment)
    else:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert socket_path(argument) == expected


def test_a_tcp_docker_host_is_refused_with_the_reason():
    with pytest.raises(DockerError, match=r"tcp://10\.0\.0\.1:2375 is not a unix:// socket"):
        DockerClient("tcp://10.0.0.1:2375")


def test_an_engine_that_is_not_there_is_unreachable(tmp_path):
    with pytest.raises(DockerError, match=r"Docker Engine does not answer on .*nothing\.sock") as caught:
        DockerClient(f"unix://{tmp_path}/nothing.sock").info()
    assert caught.value.unreachable and caught.value.status is None


def test_info_is_the_engines_json(engine, client):
    engine.route("GET", "/info", lambda req: req.json(200, {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}}))
    assert client.info() == {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}}


def test_an_absent_image_is_none_and_its_name_is_asked_as_is(engine, client):
    engine.route("GET", "/images/registry:5000/demo/serving:v1/json",
                 lambda req: req.json(200, {"Id": "sha256:abc", "RepoTags": ["registry:5000/demo/serving:v1"]}))
    engine.route("GET", "/images/demo/absent:1/json", lambda req: req.json(404, {"message": "No such image: demo/absent:1"}))
    assert client.image_inspect("registry:5000/demo/serving:v1")["Id"] == "sha256:abc"
    assert client.image_inspect("demo/absent:1") is None


def test_the_engines_message_is_passed_through_with_its_status(engine, client):
    engine.route("GET", "/images/demo:1/json",
                 lambda req: req.json(500, {"message": "write /var/lib/docker/tmp: no space left on device"}))
    with pytest.raises(DockerError, match=r"^write /var/lib/docker/tmp: no space left on device$") as caught:
        client.image_inspect("demo:1")
    assert caught.value.status == 500 and not caught.value.unreachable


def test_an_answer_that_is_not_json_is_passed_through_as_text(engine, client):
    engine.route("GET", "/info", lambda req: req.raw(502, b"bad gateway from a proxy\n", "text/plain"))
    with pytest.raises(DockerError, match=r"^bad gateway from a proxy$"):
        client.info()


def test_save_streams_a_chunked_answer_chunk_by_chunk(engine, client):
    parts = [b"a" * 70000, b"b" * 3, b"c" * 200000]
    engine.route("GET", "/images/demo/serving:v1/get", lambda req: req.chunked(200, parts))
    chunks = list(client.image_save("demo/serving:v1"))
    assert b"".join(chunks) == b"".join(parts)


def test_save_of_an_absent_image_fails_before_streaming(engine, client):
    engine.route("GET", "/images/demo:2/get", lambda req: req.json(404, {"message": "reference does not exist"}))
    with pytest.raises(DockerError, match="reference does not exist") as caught:
        next(client.image_save("demo:2"))
    assert caught.value.status == 404


def test_load_sends_the_archive_chunked_and_returns_what_the_engine_said(engine, client):
    engine.route("POST", "/images/load", lambda req: req.chunked(200, [
        b'{"stream":"Loaded image: demo/serving:v1\\n"}\r\n']))
    parts = [b"x" * 1000, b"y" * 5, b"z" * 100000]
    said = client.image_load(iter(parts))
    assert said == "Loaded image: demo/serving:v1"
    method, path, query, body = engine.requests[-1]
    assert (method, path, query, body) == ("POST", "/images/load", {"quiet": "1"}, b"".join(parts))


def test_a_load_error_inside_a_200_stream_is_an_error(engine, client):
    engine.route("POST", "/images/load", lambda req: req.json(200, {
        "errorDetail": {"message": "archive/tar: invalid tar header"}, "error": "archive/tar: invalid tar header"}))
    with pytest.raises(DockerError, match="invalid tar header"):
        client.image_load([b"not a tar"])


def test_a_broken_upload_raises_the_producers_own_error(engine, client):
    engine.route("POST", "/images/load", lambda req: req.json(200, {"stream": "never"}))

    def source():
        yield b"first chunk"
        raise ConnectionResetError("the image source went away")

    with pytest.raises(ConnectionResetError, match="the image source went away"):
        client.image_load(source())


def test_demultiplex_splits_stdout_and_stderr_in_order():
    stream = frame(1, b"out 1\n") + frame(2, b"err 1\n") + frame(1, b"out 2\n") + frame(2, b"")
    assert demultiplex(stream) == (b"out 1\nout 2\n", b"err 1\n")


def test_exec_returns_exit_status_and_demultiplexed_output(engine, client):
    engine.route("POST", "/containers/ray-head/exec", lambda req: req.json(201, {"Id": "exec1"}))
    engine.route("POST", "/exec/exec1/start",
                 lambda req: req.hijacked(frame(1, b"VLLMOPS-RAY-NODES []\n") + frame(2, b"a warning\n")))
    engine.route("GET", "/exec/exec1/json", lambda req: req.json(200, {"ExitCode": 3, "Running": False}))
    assert client.exec_run("ray-head", ["python3", "-c", "print(1)"]) == (3, b"VLLMOPS-RAY-NODES []\n", b"a warning\n")
    created = json.loads(engine.requests[0][3])
    assert created["Cmd"] == ["python3", "-c", "print(1)"]
    assert created["AttachStdout"] and created["AttachStderr"] and not created["Tty"]


def test_exec_in_a_stopped_container_says_so(engine, client):
    engine.route("POST", "/containers/ray-head/exec",
                 lambda req: req.json(409, {"message": "Container abc is not running"}))
    with pytest.raises(DockerError, match="Container abc is not running"):
        client.exec_run("ray-head", ["true"])


def container_routes(engine, wait=lambda req: req.json(200, {"StatusCode": 0}), start=None):
    engine.route("POST", "/containers/create", lambda req: req.json(201, {"Id": "c1", "Warnings": []}))
    engine.route("POST", "/containers/c1/start", start or (lambda req: req.raw(204, b"")))
    engine.route("POST", "/containers/c1/wait", wait)
    engine.route("POST", "/containers/c1/kill", lambda req: req.raw(204, b""))
    engine.route("GET", "/containers/c1/logs", lambda req: req.raw(200, frame(1, b"0, GPU, uuid\n") + frame(2, b"x\n"),
                                                                   "application/vnd.docker.multiplexed-stream"))
    engine.route("DELETE", "/containers/c1", lambda req: req.raw(204, b""))


def asked(engine):
    return [(method, path) for method, path, _query, _body in engine.requests]


def test_run_creates_starts_waits_reads_logs_and_removes(engine, client):
    container_routes(engine)
    gpus = [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]
    run = client.run("demo:1", ["nvidia-smi"], ["-L"], timeout=5, name="probe-1", labels={"io.vllmops.probe": "gpu"},
                     device_requests=gpus)
    assert (run.status, run.stdout, run.stderr, run.timed_out) == (0, b"0, GPU, uuid\n", b"x\n", False)
    assert asked(engine) == [("POST", "/containers/create"), ("POST", "/containers/c1/start"),
                             ("POST", "/containers/c1/wait"), ("GET", "/containers/c1/logs"),
                             ("DELETE", "/containers/c1")]
    create = engine.requests[0]
    assert create[2] == {"name": "probe-1"}
    config = json.loads(create[3])
    assert config["Entrypoint"] == ["nvidia-smi"] and config["Cmd"] == ["-L"]
    assert config["HostConfig"]["DeviceRequests"] == gpus
    assert engine.requests[-1][2] == {"force": "1", "v": "1"}


def test_a_container_past_its_timeout_is_killed_and_removed(engine):
    release = threading.Event()

    def never_exits(req):
        release.wait(10)
        req.json(200, {"StatusCode": 137})

    container_routes(engine, wait=never_exits)
    run = DockerClient(engine.host).run("demo:1", ["sleep"], ["600"], timeout=0.5)
    release.set()
    assert run.timed_out and run.status is None
    assert ("POST", "/containers/c1/kill") in asked(engine)
    assert asked(engine)[-1] == ("DELETE", "/containers/c1")


def test_a_container_that_cannot_start_is_removed_and_the_reason_kept(engine, client):
    reason = 'could not select device driver "" with capabilities: [[gpu]]'
    container_routes(engine, start=lambda req: req.json(500, {"message": reason}))
    with pytest.raises(DockerError) as caught:
        client.run("demo:1", ["nvidia-smi"], [], timeout=5)
    assert str(caught.value) == reason
    assert asked(engine)[-1] == ("DELETE", "/containers/c1")


def test_removing_a_container_that_is_gone_is_fine(engine, client):
    engine.route("DELETE", "/containers/gone", lambda req: req.json(404, {"message": "No such container: gone"}))
    engine.route("DELETE", "/containers/busy", lambda req: req.json(500, {"message": "removal of busy is in progress"}))
    assert client.container_remove("gone") is None
    method, path, query, _body = engine.requests[-1]
    assert (method, path, query.get("force")) == ("DELETE", "/containers/gone", "1")
    with pytest.raises(DockerError, match="removal of busy is in progress"):
        client.container_remove("busy")


def test_archive_of_a_path_and_of_a_missing_path(engine, client):
    archive = tar_of("version.py", b"__version__ = '1.2'\n")
    engine.route("GET", "/containers/c1/archive",
                 lambda req: req.raw(200, archive, "application/x-tar") if req.query["path"] == "/app/version.py"
                 else req.json(404, {"message": "Could not find the file in container c1"}))
    assert client.container_archive("c1", "/app/version.py") == archive
    assert client.container_archive("c1", "/app/missing.py") is None
