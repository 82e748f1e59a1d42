"""Streaming an image from a source down a chain of receivers: archive identity, tokens per hop, byte-exact
copies, bytes relayed as they arrive, errors that reach every node below the hop that broke."""

import contextlib
import hashlib
import io
import json
import os
import socket
import struct
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import content_id
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import (
    CHALLENGE_HEADER,
    CONTENT_TYPE,
    MAX_FRAME,
    PROOF_HEADER,
    ImageStream,
    Relay,
    TransferError,
    archive_image,
    check_bind_address,
    check_loaded,
    local_image,
    proof,
    receive,
    serve,
    ticket,
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
    image_id, _content_id, tags, size = archive_image(path)
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
    with pytest.raises(TransferError, match=r"docker save demo/serving:v0 on \S+ failed after 0 bytes: reference does not exist"):
        ImageStream(DockerClient(engine.host), image="demo/serving:v0").stream(lambda chunk: None)


def test_local_image_is_identity_or_none(engine):
    engine.route("GET", "/images/demo/serving:v0/json",
                 lambda req: req.json(200, {"Id": "sha256:abc", "RepoTags": ["demo/serving:v0"], "Size": 42}))
    engine.route("GET", "/images/demo/absent:v0/json", lambda req: req.json(404, {"message": "No such image"}))
    client = DockerClient(engine.host)
    assert local_image(client, "demo/serving:v0") == ("sha256:abc", None, ["demo/serving:v0"], 42)
    assert local_image(client, "demo/absent:v0") is None


def test_an_engine_that_does_not_answer_is_named(tmp_path):
    with pytest.raises(TransferError, match="Docker Engine does not answer on"):
        local_image(DockerClient(f"unix://{tmp_path}/none.sock"), "demo/serving:v0")


# --- The chain: each node relays what it receives to the next ------------------------------------


class Engine:
    """A node's engine: image_load keeps the chunks as they come (on_chunk sees each), or fails after fail_after."""

    def __init__(self, on_chunk=None, fail_after=None):
        self.chunks, self.on_chunk, self.fail_after = [], on_chunk, fail_after

    def image_load(self, chunks):
        for chunk in chunks:
            self.chunks.append(chunk)
            if self.on_chunk:
                self.on_chunk(chunk)
            if self.fail_after is not None and len(self.chunks) >= self.fail_after:
                raise DockerError("write /var/lib/docker/tmp/x: no space left on device", 500)
        return "Loaded image: demo/serving:v0"

    @property
    def loaded(self):
        return b"".join(self.chunks)


class Scripted:
    """A source that writes each part in turn, calling a step (a wait, a failure) before a part where asked."""

    def __init__(self, parts, before=None):
        self.parts, self.before = parts, before or {}

    def stream(self, write):
        sent = 0
        for index, part in enumerate(self.parts):
            if index in self.before:
                self.before[index]()
            write(part)
            sent += len(part)
        return sent


def run_node(outcome, name, *args, **kwargs):
    """receive() in a thread, as a node's image_receive runs; its result or error lands in outcome[name]."""
    def body():
        try:
            outcome[name] = receive(*args, **kwargs)
        except TransferError as err:
            outcome[name] = err
    thread = threading.Thread(target=body)
    thread.start()
    return thread


def chain_of_two(source, engine_a, engine_b, idle_s=10, relay_capacity=1 << 20):
    """source -> node-a -> node-b on 127.0.0.1, each hop with its own token; returns the outcomes and node-a's relay."""
    source_port, relay_port = free_port(), free_port()
    server, served = serve_in_background(source, source_port, ["tok-a"])
    relay = Relay("node-b", "127.0.0.1", relay_port, "tok-b", deadline_s=30, idle_s=idle_s, capacity=relay_capacity)
    outcome = {}
    node_a = run_node(outcome, "node-a", engine_a, f"http://127.0.0.1:{source_port}/tok-a", 10,
                      upstream="the image source", relay=relay, idle_s=idle_s)
    node_b = run_node(outcome, "node-b", engine_b, f"http://127.0.0.1:{relay_port}/tok-b", 10,
                      upstream="node-a", idle_s=idle_s)
    for thread in (node_a, node_b, server):
        thread.join(30)
        assert not thread.is_alive(), "a hop hung"
    outcome["relay"] = relay.wait(10)
    outcome["served"] = served
    return outcome, relay


def test_a_node_relays_each_chunk_as_it_arrives_not_after_its_load():
    first_seen_below = threading.Event()
    # The source sends its second part only once node-b has the first: a relay
    # that waited for the whole stream would never let it.
    source = Scripted([b"first-part", b"second-part"], before={1: lambda: first_seen_below.wait(10)})
    engine_a, engine_b = Engine(), Engine(on_chunk=lambda chunk: first_seen_below.set())
    outcome, relay = chain_of_two(source, engine_a, engine_b)
    assert first_seen_below.is_set()
    assert engine_a.loaded == engine_b.loaded == b"first-partsecond-part"
    assert outcome["node-a"][0] == outcome["node-b"][0] == len(b"first-partsecond-part")
    assert relay.sent == len(b"first-partsecond-part") and outcome["relay"] is None


def test_a_chain_of_four_copies_an_archive_byte_for_byte(tmp_path):
    archive = make_archive(tmp_path / "image.tar", payload=os.urandom(3 << 20))
    ports = [free_port() for _ in range(4)]
    server, served = serve_in_background(ImageStream(None, archive=archive), ports[0], ["tok-1"])
    engines, outcome, threads, relays = [Engine() for _ in range(4)], {}, [], []
    for index in range(4):
        relay = None
        if index < 3:
            relay = Relay(f"node{index + 2}", "127.0.0.1", ports[index + 1], f"tok-{index + 2}", 30, 10)
            relays.append(relay)
        upstream = "the image source" if index == 0 else f"node{index}"
        threads.append(run_node(outcome, f"node{index + 1}", engines[index], f"http://127.0.0.1:{ports[index]}/tok-{index + 1}",
                                10, upstream=upstream, relay=relay, idle_s=10))
    for thread in [*threads, server]:
        thread.join(30)
        assert not thread.is_alive()
    assert [engine.loaded for engine in engines] == [archive.read_bytes()] * 4
    assert [relay.wait(5) for relay in relays] == [None] * 3
    assert served == {"tok-1": os.path.getsize(archive)}, "the source serves only the first node"


def test_a_source_that_fails_mid_stream_fails_every_node_below_with_its_reason():
    def docker_save_breaks():
        raise TransferError("docker save demo/serving:v0 on node0 failed after 5 bytes: engine restarted")
    source = Scripted([b"12345", b"never"], before={1: docker_save_breaks})
    engine_a, engine_b = Engine(), Engine()
    outcome, _relay = chain_of_two(source, engine_a, engine_b)
    for node in ("node-a", "node-b"):
        assert isinstance(outcome[node], TransferError)
        assert "docker save demo/serving:v0 on node0 failed after 5 bytes: engine restarted" in str(outcome[node])
    assert outcome["relay"] is None, "node-a's relay did its job: it passed the error on"


def read_request(conn):
    """A raw hop's view of the GET: its request line and headers (name lower-cased)."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(4096)
        if not more:
            break
        data += more
    line, *fields = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    return line, {name.strip().lower(): value.strip() for name, value in (f.split(":", 1) for f in fields)}


def answer(conn, token=None, proof_of=None):
    """Read the GET and answer 200 with an image stream's Content-Type, and the proof for token when given (or
    proof_of(challenge): what an impostor can make of it); return the request line and headers."""
    line, headers = read_request(conn)
    said = proof(token, headers[CHALLENGE_HEADER.lower()]) if token else None
    if proof_of:
        said = proof_of(headers[CHALLENGE_HEADER.lower()])
    extra = f"{PROOF_HEADER}: {said}\r\n" if said else ""
    conn.sendall(f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\n{extra}\r\n".encode())
    return line, headers


def test_a_hop_that_dies_mid_stream_is_named_by_the_node_below(tmp_path):
    """node-a's process ends half-way (the connection closes without the end mark): node-b names node-a."""
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))

    def dying_hop():
        conn, _ = listener.accept()
        answer(conn, "tok-b")
        conn.sendall(b"D\x00\x00\x00\x05hello")
        conn.close()
    thread = threading.Thread(target=dying_hop)
    thread.start()
    with pytest.raises(TransferError, match=r"the stream from node-a broke after 5 bytes .*see node-a's own result"):
        receive(Engine(), f"http://127.0.0.1:{port}/tok-b", 10, upstream="node-a", idle_s=5)
    thread.join(5)
    listener.close()


def test_a_hop_that_stalls_is_named_after_the_idle_time():
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def stalling_hop():
        conn, _ = listener.accept()
        answer(conn, "tok-b")
        stop.wait(10)
        conn.close()
    thread = threading.Thread(target=stalling_hop)
    thread.start()
    started = time.monotonic()
    with pytest.raises(TransferError, match=r"the stream from node-a stalled after 0 bytes"):
        receive(Engine(), f"http://127.0.0.1:{port}/tok-b", 10, upstream="node-a", idle_s=1)
    assert time.monotonic() - started < 8
    stop.set()
    thread.join(5)
    listener.close()


# --- Only a sender that proves it holds the hop's token feeds a node (issue 38) --------------------------------


def impostor(port, **how):
    """A program that took the copy port first: it answers the GET (answer()'s `how`) with a whole, well-framed
    stream; returns its thread and what it saw of the request."""
    listener = socket.create_server(("127.0.0.1", port))
    seen = {}

    def run():
        conn, _ = listener.accept()
        seen["request"] = answer(conn, **how)
        with contextlib.suppress(OSError):
            conn.sendall(b"D" + struct.pack(">I", 7) + b"hostile" + b"E" + struct.pack(">I", 1) + b"7")
        conn.close()
        listener.close()
    thread = threading.Thread(target=run)
    thread.start()
    return thread, seen


@pytest.mark.parametrize("how", [
    {},
    {"token": "tok-other"},
    {"proof_of": lambda challenge: proof(ticket("tok-b"), challenge)},  # all it saw was the ticket
    {"proof_of": lambda challenge: challenge},
], ids=["no-proof", "another-token", "keyed-by-the-ticket", "echo"])
def test_a_sender_without_the_proof_is_refused_and_nothing_is_loaded(how):
    port = free_port()
    thread, seen = impostor(port, **how)
    engine = Engine()
    with pytest.raises(TransferError, match=r"node-a at http://127\.0\.0\.1:\d+ did not prove that it holds this "
                                            r"node's token, so its stream was refused before anything was read"):
        receive(engine, f"http://127.0.0.1:{port}/tok-b", 5, upstream="node-a", idle_s=5)
    thread.join(5)
    assert engine.chunks == [], "nothing of an unproven stream reaches docker load"
    line, headers = seen["request"]
    assert "tok-b" not in line + " ".join(headers.values()), "the token itself never crosses the network"


def test_an_impostor_upstream_feeds_no_node_of_the_chain():
    source_port, relay_port = free_port(), free_port()
    fake, _seen = impostor(source_port)
    relay = Relay("node-b", "127.0.0.1", relay_port, "tok-b", deadline_s=30, idle_s=10)
    engine_a, engine_b, outcome = Engine(), Engine(), {}
    node_a = run_node(outcome, "node-a", engine_a, f"http://127.0.0.1:{source_port}/tok-a", 10,
                      upstream="the image source", relay=relay, idle_s=10)
    node_b = run_node(outcome, "node-b", engine_b, f"http://127.0.0.1:{relay_port}/tok-b", 10, upstream="node-a",
                      idle_s=10)
    for thread in (node_a, node_b, fake):
        thread.join(30)
        assert not thread.is_alive(), "a hop hung"
    for node in ("node-a", "node-b"):
        assert "the image source at http://127.0.0.1" in str(outcome[node])
        assert "did not prove that it holds this node's token" in str(outcome[node])
    assert engine_a.chunks == engine_b.chunks == [] and relay.sent == 0


def test_a_request_without_a_challenge_gets_nothing_and_leaves_the_token_unused(tmp_path, fake_docker):
    archive = make_archive(tmp_path / "image.tar")
    port = free_port()
    thread, outcome = serve_in_background(ImageStream(None, archive=archive), port, ["tok"], idle_s=1)
    for _ in range(50):  # until the source listens
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.1)
    with pytest.raises(urllib.error.HTTPError, match="400"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/{ticket('tok')}", timeout=5)
    receive(fake_docker, f"http://127.0.0.1:{port}/tok", connect_deadline_s=10)
    thread.join(10)
    assert outcome == {"tok": os.path.getsize(archive)}


def test_a_frame_bigger_than_the_cap_is_refused_before_it_is_read():
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))

    def greedy_hop():
        conn, _ = listener.accept()
        answer(conn, "tok-b")
        conn.sendall(b"D\xff\xff\xff\xff" + b"x" * 10)  # a 4 GiB frame, of which 10 bytes come
        conn.close()
    thread = threading.Thread(target=greedy_hop)
    thread.start()
    with pytest.raises(TransferError, match=rf"node-a sent a frame of {0xFFFFFFFF} bytes, more than the {MAX_FRAME} a "
                                            "frame may hold, after 0 bytes"):
        receive(Engine(), f"http://127.0.0.1:{port}/tok-b", 5, upstream="node-a", idle_s=5)
    thread.join(5)
    listener.close()


def test_a_chunk_bigger_than_a_frame_is_sent_in_several():
    big = bytes(range(256)) * ((2 * MAX_FRAME + 512) // 256)
    port = free_port()
    server, served = serve_in_background(Scripted([big]), port, ["t"])
    engine = Engine()
    copied, _seconds, _said = receive(engine, f"http://127.0.0.1:{port}/t", 10)
    server.join(10)
    assert engine.loaded == big and copied == len(big) and served == {"t": len(big)}
    assert [len(chunk) for chunk in engine.chunks] == [MAX_FRAME, MAX_FRAME, 512]


# What the engine's load says (classic store: FamiliarString of each RepoTag, "Loaded image ID" for an untagged
# image; containerd store likewise), and whether image_receive, asked for `image`, accepts it.
@pytest.mark.parametrize(("said", "image", "image_id", "refused"), [
    ("Loaded image: demo/serving:v0", "demo/serving:v0", None, None),
    ("Loaded image: ubuntu:22.04", "docker.io/library/ubuntu:22.04", None, None),
    ("Loaded image: docker.io/vllm/vllm-openai:v1", "vllm/vllm-openai:v1", None, None),
    ("Loaded image: ubuntu:latest", "ubuntu", None, None),
    ("The image demo/serving:v0 already exists, renaming the old one with ID sha256:0ld to empty string\n"
     "Loaded image: demo/serving:v0", "demo/serving:v0", None, None),
    ("Loaded image ID: sha256:abc", "demo/serving:v0", "sha256:abc", None),
    ("", "demo/serving:v0", None, None),
    ("Loaded image: demo/serving:v0\nLoaded image: busybox:latest", "demo/serving:v0", None, "busybox:latest"),
    ("Loaded image: library/evil:1", "demo/serving:v0", None, "library/evil:1"),
    ("Loaded image: demo/serving:v1", "demo/serving:v0", None, "demo/serving:v1"),
    ("Loaded image ID: sha256:def", "demo/serving:v0", "sha256:abc", "sha256:def"),
    ("Loaded image ID: sha256:def", "demo/serving:v0", None, "sha256:def"),
])
def test_a_load_of_any_other_image_is_refused(said, image, image_id, refused):
    if refused is None:
        check_loaded(said, image, image_id)
        return
    with pytest.raises(TransferError, match=rf"docker load also loaded {refused}, not only {image}: the stream held"):
        check_loaded(said, image, image_id)


def test_a_node_whose_load_fails_still_relays_the_whole_stream():
    source = Scripted([b"a" * 1000, b"b" * 1000, b"c" * 1000])
    engine_a, engine_b = Engine(fail_after=1), Engine()
    outcome, relay = chain_of_two(source, engine_a, engine_b)
    assert isinstance(outcome["node-a"], TransferError)
    assert "docker load failed after 1000 bytes: write /var/lib/docker/tmp/x: no space left on device" in str(outcome["node-a"])
    assert engine_b.loaded == b"a" * 1000 + b"b" * 1000 + b"c" * 1000
    assert relay.sent == 3000 and outcome["relay"] is None


def test_each_hop_checks_its_own_token():
    relay_port = free_port()
    relay = Relay("node-b", "127.0.0.1", relay_port, "tok-b", deadline_s=30, idle_s=10)
    for wrong in ("tok-a", "guess"):  # the upstream's token is no good one hop further
        with pytest.raises(TransferError, match=r"node-a refused this node's token at http://127\.0\.0\.1:\d+/… \(HTTP 404\)"):
            receive(Engine(), f"http://127.0.0.1:{relay_port}/{wrong}", 5, upstream="node-a")
    outcome = {}
    node_b = run_node(outcome, "node-b", Engine(), f"http://127.0.0.1:{relay_port}/tok-b", 5, upstream="node-a")
    relay.put(b"payload")
    relay.finish(len(b"payload"))
    node_b.join(10)
    assert outcome["node-b"][0] == len(b"payload")
    with pytest.raises(TransferError, match=r"HTTP 404|cannot reach node-a"):  # once only; then the relay closes
        receive(Engine(), f"http://127.0.0.1:{relay_port}/tok-b", 1, upstream="node-a")
    assert relay.wait(5) is None


def test_a_next_node_that_never_connects_is_dropped_without_hanging_the_chain():
    relay = Relay("node-b", "127.0.0.1", free_port(), "tok-b", deadline_s=30, idle_s=1, capacity=2000)
    started = time.monotonic()
    for _ in range(5):  # more than the buffer holds: put() gives up on node-b instead of blocking forever
        relay.put(b"x" * 1000)
    relay.finish(5000)
    assert relay.wait(10) in ("node-b did not connect within 1 s", "node-b read nothing for 1 s (never connected, or stalled)")
    assert time.monotonic() - started < 8


def test_a_slow_next_node_holds_the_relay_at_its_buffer_size():
    relay = Relay("node-b", "127.0.0.1", free_port(), "tok-b", deadline_s=30, idle_s=10, capacity=2000)
    release = threading.Event()
    put_done = []

    def producer():
        for index in range(4):
            relay.put(b"x" * 1000)
            put_done.append(index)
        relay.finish(4000)
    consumer_out = []
    consumer = threading.Thread(target=lambda: consumer_out.append(relay.stream(lambda chunk: release.wait(10))))
    producing = threading.Thread(target=producer)
    producing.start()
    consumer.start()
    time.sleep(0.5)
    assert len(put_done) == 2, "the buffer holds 2000 bytes; the next put waits for the slow reader"
    release.set()
    producing.join(10)
    consumer.join(10)
    assert put_done == [0, 1, 2, 3] and consumer_out == [4000]


@pytest.mark.parametrize("address", ["0.0.0.0", "::", ""])
def test_a_relay_never_listens_on_every_address(address):
    with pytest.raises(TransferError, match="refusing to listen on"):
        check_bind_address(address)
    with pytest.raises(TransferError, match="refusing to listen on"):
        Relay("node-b", address, free_port(), "tok-b", deadline_s=5)


def test_a_relay_on_a_port_in_use_says_so():
    with socket.create_server(("127.0.0.1", 0)) as busy, pytest.raises(TransferError, match=r"cannot listen on 127\.0\.0\.1:\d+ .*image_transfer_port"):
        Relay("node-b", "127.0.0.1", busy.getsockname()[1], "tok-b", deadline_s=5)


# Recorded from real engines (tests/fixtures/image_identity/inspects.json): the same image on Docker 20.10 and
# on 26.1's containerd image store, whose `docker save` is an OCI layout (blobs/sha256/...) with a manifest.json.
RECORDED = json.loads((Path(__file__).parents[3] / "fixtures/image_identity/inspects.json").read_text())


def _save(path, config_name, config):
    data = json.dumps(config).encode()
    with tarfile.open(path, "w") as tar:
        for name, body in ((config_name, data), ("manifest.json", json.dumps(
                [{"Config": config_name, "RepoTags": ["vllmops-ident/img:full"], "Layers": []}]).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


@pytest.mark.parametrize(("saved_by", "config_name"), [
    ("docker-20.10-save", "0a527dc7c8a11125cb190abcc3f0edef64167e1075ce5655e58c9ce32ae0b45f.json"),
    ("docker-26-containerd-save", "blobs/sha256/0a527dc7c8a11125cb190abcc3f0edef64167e1075ce5655e58c9ce32ae0b45f"),
])
def test_an_archive_of_either_store_has_the_content_id_of_the_loaded_image(tmp_path, saved_by, config_name):
    found = archive_image(_save(tmp_path / "image.tar", config_name, RECORDED["configs"]["full"][saved_by]))
    assert found.image_id == "sha256:0a527dc7c8a11125cb190abcc3f0edef64167e1075ce5655e58c9ce32ae0b45f"
    loaded = RECORDED["inspects"]["full"]
    assert found.content_id == content_id(loaded["docker-20.10"]) == content_id(loaded["docker-26-containerd"])
    assert loaded["docker-26-containerd"]["Id"] != found.image_id  # what a content ID is for


def test_local_image_of_the_containerd_store_has_the_classic_stores_content_id(engine):
    loaded = RECORDED["inspects"]["a"]
    engine.route("GET", "/images/vllmops-ident/img:a/json", lambda req: req.json(200, loaded["docker-26-containerd"]))
    found = local_image(DockerClient(engine.host), "vllmops-ident/img:a")
    assert found.image_id == loaded["docker-26-containerd"]["Id"]
    assert found.content_id == content_id(loaded["docker-20.10"])
