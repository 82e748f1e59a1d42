"""The model's manifest and its copy down the chain, on real files and real sockets (no engine needed)."""

import contextlib
import hashlib
import os
import socket
import struct
import threading

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import (
    CONTENT_TYPE,
    Relay,
    TransferError,
    receive_stream,
    serve,
)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_model(root, weights=3 * (1 << 20) + 17):
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (root / "sub").mkdir()
    (root / "sub" / "tokenizer.json").write_text("{}" * 100)
    (root / "empty.txt").write_text("")
    (root / "model.safetensors").write_bytes(os.urandom(weights))
    (root / ".cache").mkdir()
    (root / ".cache" / "ignored").write_text("huggingface_hub's metadata")
    return root


def test_scan_hashes_and_caches_by_size_and_mtime(tmp_path):
    model = make_model(tmp_path / "m")
    files, hashed = model_files.scan(str(model))
    assert sorted(files) == ["config.json", "empty.txt", "model.safetensors", "sub/tokenizer.json"]
    assert files["model.safetensors"]["sha256"] == hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    assert sorted(hashed) == sorted(files)
    again, hashed = model_files.scan(str(model), files)
    assert hashed == [] and again == files
    # Changed content (and so mtime): hashed again, and the digest moves.
    os.utime(model / "config.json", ns=(1, 1))
    (model / "config.json").write_text('{"architectures": ["Other"]}')
    changed, hashed = model_files.scan(str(model), files)
    assert hashed == ["config.json"]
    assert model_files.digest(model_files.identity(changed)) != model_files.digest(model_files.identity(files))
    # rehash none: the changed file has no hash, nothing is read.
    unknown, hashed = model_files.scan(str(model), files, "none")
    assert hashed == [] and unknown["config.json"]["sha256"] is None


def test_needed_by_hash_and_by_size_when_the_reference_has_none():
    have = {"a": {"size": 1, "sha256": "x"}, "b": {"size": 2, "sha256": "y"}}
    assert model_files.needed(have, {"a": {"size": 1, "sha256": "x"}, "b": {"size": 2, "sha256": "z"}, "c": {"size": 3}}) == ["b", "c"]
    assert model_files.needed(have, {"a": {"size": 1, "sha256": None}, "b": {"size": 9, "sha256": None}}) == ["b"]


def chain(tmp_path, source, targets, names):
    """Serve names from source to targets[0], each relaying to the next; return each node's (result or error)."""
    files = model_files.identity(model_files.scan(str(source))[0])
    ports = [free_port() for _ in targets]
    tokens = [f"tok{index}" for index in range(len(targets))]
    outcome = {}
    sizes = {name: files[name]["size"] for name in names}
    server = threading.Thread(target=lambda: outcome.__setitem__("source", serve(
        model_files.FileStream(str(source), names, sizes), "127.0.0.1", ports[0], [tokens[0]], 30, idle_s=10)))
    server.start()

    def node(index, target):
        try:
            have = model_files.identity(model_files.scan(str(target))[0])
            copy = model_files.StagedCopy(str(target), files, names, model_files.needed(have, files))
            copy.prepare(have)
            relay = None
            if index + 1 < len(targets):
                relay = Relay(f"n{index + 1}", "127.0.0.1", ports[index + 1], tokens[index + 1], 30, 10)
            url = f"http://127.0.0.1:{ports[index]}/{tokens[index]}"
            received, _s, written = receive_stream(copy.write, "writing the model", url, 10, None, None, f"up{index}",
                                                   relay, 10)
            if relay:
                relay.wait(30)
            outcome[index] = (received, written, copy.commit({"node": "source"})["digest"])
        except TransferError as err:
            outcome[index] = err

    threads = [threading.Thread(target=node, args=(i, t)) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in [*threads, server]:
        thread.join(60)
    return files, outcome


def test_a_chain_writes_what_each_node_lacks_and_relays_everything(tmp_path):
    source = make_model(tmp_path / "src" / "m")
    fresh = tmp_path / "n0" / "m"
    # The second node holds the model but for one corrupted file, and a file the model does not have.
    partial = tmp_path / "n1" / "m"
    partial.parent.mkdir()
    os.system(f"cp -a {source} {partial}")
    with open(partial / "model.safetensors", "r+b") as handle:
        handle.seek(100)
        handle.write(b"rot")
    (partial / "stray.bin").write_text("not the model's")
    names = ["config.json", "empty.txt", "model.safetensors", "sub/tokenizer.json"]
    files, outcome = chain(tmp_path, source, [fresh, partial], names)
    total = sum(entry["size"] for entry in files.values())
    want = model_files.digest(files)
    assert outcome[0] == (total, total, want)
    assert outcome[1] == (total, files["model.safetensors"]["size"], want)  # read everything, wrote one file
    for node in (fresh, partial):
        assert model_files.read_manifest(str(node))["digest"] == want
        assert not (node / "stray.bin").exists()
        assert (node / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
        assert not os.path.exists(model_files.staging_path(str(node)))


def test_a_corrupt_source_fails_the_copy_and_leaves_the_served_model_alone(tmp_path):
    source = make_model(tmp_path / "src" / "m")
    target = make_model(tmp_path / "n0" / "m", weights=100)
    before = (target / "model.safetensors").read_bytes()
    files = model_files.identity(model_files.scan(str(source))[0])
    # The source's bytes change after its manifest was read: same size, other content.
    with open(source / "model.safetensors", "r+b") as handle:
        handle.write(b"xx")
    port = free_port()
    names = list(files)
    server = threading.Thread(target=serve, args=(model_files.FileStream(str(source), names,
                              {n: files[n]["size"] for n in names}), "127.0.0.1", port, ["t"], 30, 10))
    server.start()
    have = model_files.identity(model_files.scan(str(target))[0])
    copy = model_files.StagedCopy(str(target), files, names, model_files.needed(have, files))
    copy.prepare(have)
    with pytest.raises(TransferError, match=r"model\.safetensors arrived with sha256"):
        receive_stream(copy.write, "writing the model", f"http://127.0.0.1:{port}/t", 10)
    server.join(30)
    assert (target / "model.safetensors").read_bytes() == before
    # The next attempt starts afresh: the interrupted staging directory is discarded.
    again = model_files.StagedCopy(str(target), files, names, names)
    again.prepare(have)
    assert again.discarded


def test_a_sender_without_the_proof_writes_nothing_and_the_failed_copy_leaves_nothing(tmp_path):
    """A program that took the copy port first serves the model's very bytes, well framed, but cannot prove it holds
    the token: nothing is written, the staging directory goes, the served model and its manifest stay."""
    source = make_model(tmp_path / "src" / "m")
    target = make_model(tmp_path / "n0" / "m", weights=100)
    before = {path: path.read_bytes() for path in target.rglob("*") if path.is_file()}
    files = model_files.identity(model_files.scan(str(source))[0])
    names = list(files)
    stream = []
    model_files.FileStream(str(source), names, {n: files[n]["size"] for n in names}).stream(stream.append)
    body = b"".join(b"D" + struct.pack(">I", len(chunk)) + chunk for chunk in stream)
    body += b"E" + struct.pack(">I", len(str(sum(map(len, stream))))) + str(sum(map(len, stream))).encode()
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))

    def impostor():
        conn, _ = listener.accept()
        conn.recv(4096)
        # the receiver may hang up before all of it is sent (it refuses the stream at its header): that is its answer
        with contextlib.suppress(ConnectionError):
            conn.sendall(f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\n\r\n".encode() + body)
        conn.close()
    thread = threading.Thread(target=impostor)
    thread.start()
    have = model_files.identity(model_files.scan(str(target))[0])
    copy = model_files.StagedCopy(str(target), files, names, model_files.needed(have, files))
    copy.prepare(have)
    with pytest.raises(TransferError, match="did not prove that it holds this node's token"):
        receive_stream(copy.write, "writing the model", f"http://127.0.0.1:{port}/t", 5, upstream="node-a", idle_s=5)
    thread.join(5)
    listener.close()
    assert copy.written == 0
    copy.discard()  # what model_receive does with a copy that failed
    assert not os.path.exists(copy.staging)
    assert {path: path.read_bytes() for path in target.rglob("*") if path.is_file()} == before
    assert model_files.read_manifest(str(target)) is None


@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a", ".cache/x", "", "a\0b",
                                  None, 7])
def test_file_names_that_leave_the_directory_are_refused(tmp_path, name):
    with pytest.raises(TransferError, match="refusing the file name"):
        model_files.safe_name(name)
    with pytest.raises(TransferError):
        model_files.FileStream(str(tmp_path), [name], {name: 1})
    with pytest.raises(TransferError):  # a reference name is joined to paths too (prepare links it)
        model_files.StagedCopy(str(tmp_path / "m"), {name: {"size": 1, "sha256": "x"}}, [], [])


@pytest.mark.parametrize("name", ["config.json", "sub/tokenizer.json", "a.b/..c", ".hidden"])
def test_file_names_inside_the_directory_pass(name):
    assert model_files.safe_name(name) == name


def test_swap_replaces_the_directory_whole(tmp_path):
    target, staged = tmp_path / "m", tmp_path / "staged"
    target.mkdir()
    (target / "old").write_text("old")
    staged.mkdir()
    (staged / "new").write_text("new")
    model_files.swap(str(staged), str(target))
    assert os.listdir(target) == ["new"] and not staged.exists()
    assert [p for p in os.listdir(tmp_path) if "old-" in p] == []
