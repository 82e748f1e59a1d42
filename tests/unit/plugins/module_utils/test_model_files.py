"""The model's manifest and its copy down the chain, on real files and real sockets (no engine needed)."""

import contextlib
import hashlib
import os
import shutil
import socket
import struct
import threading
from pathlib import Path

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
        version = Path(model_files.version_path(str(node), want))
        assert model_files.read_manifest(str(version))["digest"] == want
        assert not (version / "stray.bin").exists()
        assert (version / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
        assert not os.path.exists(model_files.staging_path(str(node)))
    # Nothing served on the fresh node: it serves the new version now. The other keeps serving its own directory.
    assert model_files.served_version(str(fresh)) == model_files.version_path(str(fresh), want)
    assert not partial.is_symlink() and (partial / "stray.bin").exists()


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


def stage(target, model, files=None):
    """Put a copy of the directory model where a copy for target is staged; return its files as scanned."""
    staging = model_files.staging_path(str(target))
    os.makedirs(os.path.dirname(staging), exist_ok=True)
    shutil.copytree(model, staging, ignore=shutil.ignore_patterns(".cache"))
    return model_files.scan(staging)[0]


def commit(target, model):
    """Stage a copy of model for target and keep it as a version; return the version's manifest."""
    files = stage(target, model)
    return model_files.commit_version(model_files.staging_path(str(target)), str(target), files, {"node": "test"})


def files_of(directory):
    """relative path -> content of the model's files under directory (huggingface_hub's .cache left out)."""
    found = {path.relative_to(directory).as_posix(): path for path in Path(directory).rglob("*") if path.is_file()}
    return {name: path.read_bytes() for name, path in found.items() if not name.startswith(".cache/")}


def test_the_first_version_is_served_by_a_relative_link(tmp_path):
    source, target = make_model(tmp_path / "src" / "m"), tmp_path / "models" / "m"
    manifest = commit(target, source)
    version = model_files.version_path(str(target), manifest["digest"])
    assert manifest["path"] == version == str(tmp_path / "models" / ".vllmops-versions" / "m" / manifest["digest"][7:23])
    assert os.readlink(target) == f".vllmops-versions/m/{manifest['digest'][7:23]}"  # resolves in any mount of models/
    assert model_files.served_version(str(target)) == version
    assert model_files.read_manifest(version) == manifest
    assert os.path.isfile(version + ".vllmops-manifest.json") and not os.path.exists(str(target) + ".vllmops-manifest.json")
    assert files_of(target) == files_of(source)
    assert not os.path.exists(model_files.staging_path(str(target)))


def test_a_new_version_is_kept_beside_the_served_one_which_it_does_not_touch(tmp_path):
    target = tmp_path / "models" / "m"
    first = commit(target, make_model(tmp_path / "v1"))
    link, served = os.readlink(target), files_of(first["path"])
    newer = make_model(tmp_path / "v2")
    (newer / "config.json").write_text('{"architectures": ["Newer"]}')
    second = commit(target, newer)
    assert second["path"] != first["path"] and second["digest"] != first["digest"]
    assert os.readlink(target) == link and files_of(target) == served == files_of(first["path"])
    assert (Path(second["path"]) / "config.json").read_text() == '{"architectures": ["Newer"]}'
    assert model_files.versions(str(target)) == sorted(
        [{"digest": each["digest"], "path": each["path"], "bytes": each["bytes"]} for each in (first, second)],
        key=lambda each: each["path"])
    # The same version again: the one on disk is kept (the same inode), the staged copy goes.
    inode = os.stat(second["path"]).st_ino
    assert commit(target, newer) == second
    # a version committed again replaces what lay there (its files may have changed since their manifest)
    assert os.stat(second["path"]).st_ino != inode and not os.path.exists(model_files.staging_path(str(target)))


def test_flip_moves_the_link_in_one_step_and_back(tmp_path, monkeypatch):
    target = tmp_path / "models" / "m"
    first = commit(target, make_model(tmp_path / "v1"))
    newer = make_model(tmp_path / "v2", weights=10)
    second = commit(target, newer)
    renames = []
    real_replace = os.replace

    def replace(src, dst):  # the link is never absent: a new link is renamed over it
        renames.append((os.readlink(src), os.readlink(dst)))
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    assert model_files.flip(str(target), second["path"]) is True
    assert renames == [(f".vllmops-versions/m/{second['digest'][7:23]}", f".vllmops-versions/m/{first['digest'][7:23]}")]
    assert model_files.served_version(str(target)) == second["path"] and files_of(target) == files_of(newer)
    assert model_files.flip(str(target), second["path"]) is False
    assert model_files.flip(str(target), first["path"]) is True
    assert model_files.served_version(str(target)) == first["path"]
    assert sorted(os.listdir(tmp_path / "models")) == [".vllmops-staging", ".vllmops-versions", "m"]  # no link left over


def test_flip_refuses_what_is_not_a_version_and_a_directory_not_ours(tmp_path):
    target = tmp_path / "models" / "m"
    version = commit(target, make_model(tmp_path / "v1"))["path"]
    for wrong in (str(tmp_path / "v1"), os.path.join(model_files.versions_dir(str(target)), "0" * 16)):
        with pytest.raises(model_files.ModelError, match="version"):
            model_files.flip(str(target), wrong)
    placed = make_model(tmp_path / "models" / "placed")  # by an operator: no manifest of ours
    beside = commit(placed, make_model(tmp_path / "v3"))["path"]
    with pytest.raises(model_files.ModelError, match="not ours to replace"):
        model_files.flip(str(placed), beside)
    assert not placed.is_symlink() and (placed / "config.json").exists()
    assert model_files.served_version(str(target)) == version


def test_adopt_moves_a_legacy_directory_once_and_leaves_others_alone(tmp_path):
    legacy = make_model(tmp_path / "models" / "m")
    files = model_files.scan(str(legacy))[0]
    written = model_files.write_manifest(str(legacy), files, {"node": "n1"})
    inode, before = os.stat(legacy).st_ino, files_of(legacy)
    version = model_files.adopt(str(legacy))
    assert version == model_files.version_path(str(legacy), written["digest"])
    assert os.stat(version).st_ino == inode  # renamed, not copied
    assert os.readlink(legacy) == f".vllmops-versions/m/{written['digest'][7:23]}"
    assert files_of(legacy) == before
    assert model_files.identity(model_files.scan(str(legacy))[0]) == model_files.identity(files)
    assert not os.path.exists(model_files.manifest_path(str(legacy)))
    moved = model_files.read_manifest(version)
    assert (moved["path"], moved["digest"], moved["files"], moved["source"]) == (version, written["digest"], files,
                                                                                   {"node": "n1"})
    assert model_files.adopt(str(legacy)) is None and os.readlink(legacy).endswith(written["digest"][7:23])
    assert model_files.adopt(version) is None and os.path.isdir(version)  # a version, its manifest beside it, stays
    placed = make_model(tmp_path / "models" / "placed")
    assert model_files.adopt(str(placed)) is None and model_files.adopt(str(tmp_path / "models" / "absent")) is None
    assert not placed.is_symlink() and not os.path.exists(model_files.versions_dir(str(placed)))


def test_flip_adopts_a_legacy_directory_first(tmp_path):
    legacy = make_model(tmp_path / "models" / "m", weights=10)
    old = model_files.write_manifest(str(legacy), model_files.scan(str(legacy))[0], {})
    newer = make_model(tmp_path / "v2", weights=20)
    new = commit(legacy, newer)
    assert not legacy.is_symlink()  # a real directory is not replaced by a commit
    assert model_files.flip(str(legacy), new["path"]) is True
    assert model_files.served_version(str(legacy)) == new["path"]
    assert [each["digest"] for each in model_files.versions(str(legacy))] == sorted([old["digest"], new["digest"]],
                                                                                     key=lambda d: d[7:23])


def test_prune_keeps_the_listed_versions_and_the_served_one(tmp_path):
    target = tmp_path / "models" / "m"
    made = [commit(target, make_model(tmp_path / f"v{n}", weights=1000 * n)) for n in (1, 2, 3)]
    model_files.flip(str(target), made[1]["path"])
    leftover = os.path.join(model_files.versions_dir(str(target)), "0123456789abcdef")  # a commit cut off: no manifest
    os.makedirs(leftover)
    staging = model_files.staging_path(str(target))
    os.makedirs(staging)
    removed, freed = model_files.prune_versions(str(target), [made[2]["digest"]])
    assert sorted(removed) == sorted([made[0]["path"], leftover])
    assert freed == made[0]["bytes"]
    assert [each["path"] for each in model_files.versions(str(target))] == sorted([made[1]["path"], made[2]["path"]])
    assert not os.path.exists(model_files.manifest_path(made[0]["path"])) and os.path.isdir(staging)
    assert model_files.served_version(str(target)) == made[1]["path"]
    assert model_files.prune_versions(str(target), [made[2]["digest"]]) == ([], 0)


def test_a_staged_copy_links_what_the_served_version_holds_and_serves_nothing_new(tmp_path):
    target = tmp_path / "models" / "m"
    first = commit(target, make_model(tmp_path / "v1"))
    config = b'{"architectures": ["Newer"]}'
    reference = {**model_files.identity(first["files"]),
                 "config.json": {"size": len(config), "sha256": hashlib.sha256(config).hexdigest()}}
    have = model_files.identity(model_files.scan(str(target))[0])
    copy = model_files.StagedCopy(str(target), reference, ["config.json"], model_files.needed(have, reference))
    copy.prepare(have)
    assert copy.write(iter([config[:5], config[5:]])) == len(config)
    second = copy.commit({"node": "n1"})
    assert second["path"] == model_files.version_path(str(target), model_files.digest(reference))
    assert model_files.served_version(str(target)) == first["path"]
    weights = [os.stat(os.path.join(each["path"], "model.safetensors")) for each in (first, second)]
    assert weights[0].st_ino == weights[1].st_ino and weights[0].st_nlink == 2
    assert (Path(second["path"]) / "config.json").read_bytes() == config
    assert (target / "config.json").read_text() == '{"architectures": ["LlamaForCausalLM"]}'


def test_an_interrupted_staged_copy_leaves_the_served_version_alone(tmp_path):
    target = tmp_path / "models" / "m"
    first = commit(target, make_model(tmp_path / "v1"))
    link, served = os.readlink(target), files_of(target)
    reference = {**model_files.identity(first["files"]), "extra.bin": {"size": 10, "sha256": "0" * 64}}

    def broken():
        yield b"12345"
        raise TransferError("the upstream hung up")
    copy = model_files.StagedCopy(str(target), reference, ["extra.bin"], ["extra.bin"])
    copy.prepare(model_files.identity(model_files.scan(str(target))[0]))
    with pytest.raises(TransferError, match="hung up"):
        copy.write(broken())
    copy.discard()
    assert os.readlink(target) == link and files_of(target) == served == files_of(first["path"])
    assert [each["path"] for each in model_files.versions(str(target))] == [first["path"]]
    assert sorted(os.listdir(model_files.versions_dir(str(target)))) == sorted(
        os.path.basename(each) for each in (first["path"], model_files.manifest_path(first["path"])))


def test_served_version_of_a_link_a_directory_and_nothing(tmp_path):
    target = tmp_path / "models" / "m"
    assert model_files.served_version(str(target)) is None
    version = commit(target, make_model(tmp_path / "v1"))["path"]
    assert model_files.served_version(str(target)) == model_files.served_version(str(target) + "/") == version
    placed = make_model(tmp_path / "models" / "placed")
    assert model_files.served_version(str(placed)) == str(placed)
    elsewhere = tmp_path / "models" / "elsewhere"
    elsewhere.symlink_to(tmp_path / "v1")  # an operator's link, not into the versions
    assert model_files.served_version(str(elsewhere)) == str(elsewhere)
