"""The model's manifest and its copy down the chain, on real files and real sockets (no engine needed)."""

import hashlib
import os
import socket
import threading

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import Relay, TransferError, receive_stream, serve


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


def test_file_names_that_leave_the_directory_are_refused(tmp_path):
    for name in ("../etc/passwd", "/etc/passwd", "a/../../b", ".cache/x", ""):
        with pytest.raises(TransferError):
            model_files.FileStream(str(tmp_path), [name], {name: 1})


def test_swap_replaces_the_directory_whole(tmp_path):
    target, staged = tmp_path / "m", tmp_path / "staged"
    target.mkdir()
    (target / "old").write_text("old")
    staged.mkdir()
    (staged / "new").write_text("new")
    model_files.swap(str(staged), str(target))
    assert os.listdir(target) == ["new"] and not staged.exists()
    assert [p for p in os.listdir(tmp_path) if "old-" in p] == []
