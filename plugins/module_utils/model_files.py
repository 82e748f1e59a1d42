# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model directory's manifest, and the model's files down the copy chain.

The manifest (PATH.vllmops-manifest.json, beside the model directory PATH)
lists every file of the model (relative path, size, sha256) and where the
model came from. Its digest, a sha256 over the sorted (path, size, sha256)
lines, is the model's identity: every node that serves must hold the same.
The manifest also keeps each file's size and mtime as a cache, so that a
re-run hashes only the files whose size or mtime changed since.

A copy never writes into the served directory: a node builds the new
version in PARENT/.vllmops-staging/NAME (hard links to the files it already
holds right, the rest from the stream), checks every file's hash, then
swaps the directory into place. The stream is the listed files' bytes, one
after the other, in the order every node of the chain was given; each node
writes the files it lacks and relays everything (image_transfer's chain).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import TransferError
from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import write_json

MANIFEST_SUFFIX = ".vllmops-manifest.json"
SCHEMA = "vllmops.model-manifest/1"
STAGING = ".vllmops-staging"
# huggingface_hub's download metadata in a local_dir: not part of the model.
IGNORED_TOP = frozenset({".cache"})
CHUNK = 1 << 20


class ModelError(TransferError):
    pass


class _Reader:
    """read(n) over an iterator of chunks: at most n bytes, b'' at its end."""

    def __init__(self, chunks):
        self.chunks, self.buffer = iter(chunks), b""

    def read(self, amount):
        if not self.buffer:
            self.buffer = next(self.chunks, b"")
        piece, self.buffer = self.buffer[:amount], self.buffer[amount:]
        return piece


def manifest_path(path):
    return path.rstrip("/") + MANIFEST_SUFFIX


def staging_path(path):
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.join(parent, STAGING, name)


def free_bytes(path):
    """Free bytes of the file system that holds (or will hold) path."""
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    return shutil.disk_usage(probe).free


def sha256_file(path):
    return _read_into(path, hashlib.sha256())[0].hexdigest()


def sha256_and_git_blob_sha1(path):
    """In one read: the file's sha256, and the hash git (and the hub, for files not in LFS) gives its content."""
    blob = hashlib.sha1(usedforsecurity=False)
    blob.update(b"blob %d\0" % os.path.getsize(path))
    sha256, blob = _read_into(path, hashlib.sha256(), blob)
    return sha256.hexdigest(), blob.hexdigest()


def _read_into(path, *digests):
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            for each in digests:
                each.update(block)
    return digests


def digest(files):
    """The model's identity: sha256 over its files' sorted (path, size, sha256)."""
    lines = "".join(f"{name}\t{files[name]['size']}\t{files[name]['sha256']}\n" for name in sorted(files))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def listing(path):
    """relative path -> os.stat_result of every regular file under path (links followed), IGNORED_TOP left out."""
    found = {}
    if not os.path.isdir(path):
        return found
    for top, dirs, names in os.walk(path):
        if top == path:
            dirs[:] = [d for d in dirs if d not in IGNORED_TOP]
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(top, name)
            try:
                info = os.stat(full)
            except FileNotFoundError:  # a dangling link
                continue
            if os.path.isfile(full):
                found[os.path.relpath(full, path)] = info
    return found


WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".gguf")


def weight_bytes(files):
    """The bytes of the weights vLLM loads, from a listing (relative path to a dict with 'size'): the top-level
    safetensors when there are any (a repository may also ship the same weights as original/*.pth, which vLLM does
    not load then), else the top-level .bin, .pt, .pth and .gguf files."""
    top = {name: entry for name, entry in (files or {}).items() if "/" not in name}
    chosen = [entry for name, entry in top.items() if name.endswith(".safetensors")] or \
             [entry for name, entry in top.items() if name.endswith(WEIGHT_SUFFIXES)]
    return sum(int(entry.get("size") or 0) for entry in chosen)


def read_config(path, limit=4 << 20):
    """The model's config.json as a dict; None when there is none, it is larger than limit, or not a JSON object."""
    try:
        with open(os.path.join(path, "config.json"), "rb") as handle:
            data = handle.read(limit + 1)
        config = json.loads(data) if len(data) <= limit else None
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def read_manifest(path, manifest_file=None):
    """The manifest kept for the model at path, None when there is none (or it is not ours)."""
    try:
        with open(manifest_file or manifest_path(path)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def scan(path, cache=None, rehash="stat"):
    """The files at path: {name: {size, sha256, mtime_ns}} and the names hashed now.

    rehash: 'stat' hashes only files whose size or mtime differ from cache (the
    last manifest's files), 'all' every file, 'none' none (their sha256 is None)."""
    cache = cache or {}
    files, hashed = {}, []
    for name, info in listing(path).items():
        known = cache.get(name)
        if rehash != "all" and known and known.get("size") == info.st_size and known.get("mtime_ns") == info.st_mtime_ns:
            sha = known.get("sha256")
        elif rehash == "none":
            sha = None
        else:
            sha = sha256_file(os.path.join(path, name))
            hashed.append(name)
        files[name] = {"size": info.st_size, "sha256": sha, "mtime_ns": info.st_mtime_ns}
    return files, hashed


def identity(files):
    """A file map without the local mtime cache: what the digest and other nodes compare."""
    return {name: {"size": entry["size"], "sha256": entry["sha256"]} for name, entry in files.items()}


def needed(files, reference):
    """Names of reference's files (in its order) that files lacks or holds differently: by sha256 where both
    are known, by size where the reference has no sha256 yet (the hub's listing before a download)."""
    def differs(have, want):
        return (have is None or have["size"] != want["size"]
                or (bool(want.get("sha256")) and have.get("sha256") != want["sha256"]))

    return [name for name, want in reference.items() if differs(files.get(name), want)]


def write_manifest(path, files, source, manifest_file=None):
    """Write the manifest atomically (mode 0644); return it."""
    data = {"schema": SCHEMA, "path": path, "digest": digest(files), "source": source, "files": files,
            "bytes": sum(entry["size"] for entry in files.values())}
    write_json(manifest_file or manifest_path(path), data, indent=1, sort_keys=True)
    return data


def safe_name(name):
    """name, when it is a relative path that stays inside a model directory; ModelError naming it when not.

    The one check of every file name that comes from elsewhere (a manifest, the play, the hub's listing)
    before it is joined to a directory."""
    # An absolute name starts with an empty part, as "" and "a//b" hold one; what is not text is refused likewise.
    parts = name.split("/") if isinstance(name, str) else [""]
    if any(part in ("", ".", "..") or "\0" in part for part in parts) or parts[0] in IGNORED_TOP:
        raise ModelError(f"refusing the file name {name!r} (absolute, empty, '..', or {sorted(IGNORED_TOP)})")
    return name


class FileStream:
    """image_transfer.serve()'s source: the bytes of `names` under root, one file after the other."""

    def __init__(self, root, names, sizes):
        self.root, self.names, self.sizes = root, [safe_name(n) for n in names], sizes

    def stream(self, write):
        sent = 0
        for name in self.names:
            full = os.path.join(self.root, name)
            try:
                with open(full, "rb") as handle:
                    if os.fstat(handle.fileno()).st_size != self.sizes[name]:
                        raise TransferError(f"{full} is {os.fstat(handle.fileno()).st_size} bytes here, the manifest "
                                            f"says {self.sizes[name]}: the source changed since it was read")
                    left = self.sizes[name]
                    while left:
                        chunk = handle.read(min(CHUNK, left))
                        if not chunk:
                            raise TransferError(f"{full} ended {left} bytes early")
                        write(chunk)
                        left -= len(chunk)
                        sent += len(chunk)
            except OSError as err:
                raise TransferError(f"reading {full}: {err}") from err
        return sent


class StagedCopy:
    """A new version of the model at target, built beside it and swapped into place.

    prepare() starts the staging directory afresh (a copy interrupted earlier
    is discarded) with hard links to the files target already holds right;
    write(chunks) takes the stream of `stream_names` and writes those in
    `wanted`, checking each one's sha256; commit() checks that the staging
    directory holds exactly the reference, swaps it in and writes the manifest."""

    def __init__(self, target, reference, stream_names, wanted):
        self.target = target.rstrip("/")
        self.reference = {safe_name(name): entry for name, entry in reference.items()}  # name -> {size, sha256}
        self.stream_names = [safe_name(n) for n in stream_names]
        self.wanted = set(wanted)
        self.staging = staging_path(self.target)
        self.written = 0
        self.discarded = False

    def prepare(self, have):
        """have: this node's files at target ({name: {size, sha256}})."""
        if os.path.lexists(self.staging):
            shutil.rmtree(self.staging)
            self.discarded = True
        os.makedirs(self.staging, mode=0o755)
        for name, want in self.reference.items():
            if name in self.wanted:
                continue
            if have.get(name, {}).get("sha256") != want["sha256"]:
                raise ModelError(f"{self.target}/{name} is neither right here nor in the stream")
            self._dir_for(name)
            os.link(os.path.join(self.target, name), os.path.join(self.staging, name))

    def _dir_for(self, name):
        parent = os.path.dirname(os.path.join(self.staging, name))
        os.makedirs(parent, mode=0o755, exist_ok=True)
        return parent

    def write(self, chunks):
        """Consume the whole stream (an iterator of bytes); return the bytes written here."""
        reader = _Reader(chunks)
        for name in self.stream_names:
            if name in self.wanted:
                with open(os.path.join(self._dir_for(name), os.path.basename(name)), "xb") as out:
                    sha256 = _copy_exactly(reader, self.reference[name]["size"], name, out)
                self.written += self.reference[name]["size"]
                os.chmod(os.path.join(self.staging, name), 0o644)
                if sha256 != self.reference[name]["sha256"]:
                    raise ModelError(f"{name} arrived with sha256 {sha256[:16]}…, the manifest says "
                                     f"{self.reference[name]['sha256'][:16]}…: the source's copy is not the manifest's")
            else:
                _copy_exactly(reader, self.reference[name]["size"], name, None)
        if reader.read(1):  # also reads the stream's end mark
            raise ModelError("the stream holds more bytes than its files")
        return self.written

    def discard(self):
        """Remove the staging directory (a copy that failed): nothing of it is left behind."""
        shutil.rmtree(self.staging, ignore_errors=True)

    def commit(self, source):
        """Swap the staging directory in; return the manifest written."""
        listed = listing(self.staging)
        missing = sorted(set(self.reference) - set(listed))
        if missing or set(listed) - set(self.reference):
            raise ModelError(f"the staged copy at {self.staging} lacks {missing[:5]} or holds files the manifest "
                             "does not list")
        # Every file was checked as it arrived (or was linked from a checked one): its sha256 is the reference's.
        files = {name: {"size": info.st_size, "sha256": self.reference[name]["sha256"], "mtime_ns": info.st_mtime_ns}
                 for name, info in listed.items()}
        swap(self.staging, self.target)
        return write_manifest(self.target, files, source)


def _copy_exactly(reader, size, name, out):
    """Read size bytes of the stream into out (None: skip them); return their sha256 when written."""
    hashing, left = hashlib.sha256(), size
    while left:
        piece = reader.read(min(left, CHUNK))
        if not piece:
            raise ModelError(f"the stream ended {left} bytes before the end of {name}")
        left -= len(piece)
        if out:
            hashing.update(piece)
            out.write(piece)
    return hashing.hexdigest()


def swap(staged, target):
    """Put the directory staged at target: the old one moves aside and is removed after the rename."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    old = None
    if os.path.lexists(target):
        old = f"{staged}.old-{os.getpid()}"
        os.rename(target, old)
    os.rename(staged, target)
    if old:
        shutil.rmtree(old, ignore_errors=True)
