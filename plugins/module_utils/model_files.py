# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A model directory's manifest, and the model's files down the copy chain.

The manifest (PATH.vllmops-manifest.json, beside the model directory PATH)
lists every file of the model (relative path, size, sha256) and where the
model came from. Its digest, a sha256 over the sorted (path, size, sha256)
lines, is the model's identity: every node that serves must hold the same.
The manifest also keeps each file's size and mtime as a cache, so that a
re-run hashes only the files whose size or mtime changed since.

Every version of the model at PATH = PARENT/NAME lives in its own directory,
PARENT/.vllmops-versions/NAME/HEX (HEX: the first 16 hex digits of its
digest), its manifest beside it. PATH is a relative link to the version
served, so that it resolves inside a container that mounts PARENT at the same
path; only flip() moves it (the release switch), and a new version is kept
beside the served one, ready to serve or to go back to. A model directory of
the layout before versions (a real directory at PATH, its manifest at
PATH.vllmops-manifest.json) is moved there once, by adopt().

A copy never writes into a version: a node builds the new one in
PARENT/.vllmops-staging/NAME (hard links to the files the served version
holds right, the rest from the stream), checks every file's hash, then
renames it to its version directory. The stream is the listed files' bytes,
one after the other, in the order every node of the chain was given; each
node writes the files it lacks and relays everything (image_transfer's chain).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat

from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import TransferError
from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import read_documents, write_json

MANIFEST_SUFFIX = ".vllmops-manifest.json"
SCHEMA = "vllmops.model-manifest/1"
STAGING = ".vllmops-staging"
VERSIONS = ".vllmops-versions"
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


def versions_dir(path):
    """Where the versions of the model served at path are kept: PARENT/.vllmops-versions/NAME."""
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.normpath(os.path.join(parent, VERSIONS, name))


def _hex16(model_digest):
    """The first 16 hex digits of a digest ("sha256:" and 64 of them); None when it is not one."""
    found = re.fullmatch(r"sha256:([0-9a-f]{64})", model_digest) if isinstance(model_digest, str) else None
    return found.group(1)[:16] if found else None


def version_path(path, model_digest):
    """The directory of the version with model_digest of the model served at path."""
    hex16 = _hex16(model_digest)
    if hex16 is None:
        raise ModelError(f"{model_digest!r} is not a model digest (sha256: and 64 hex digits)")
    return os.path.join(versions_dir(path), hex16)


def _linked_version(path):
    """The version directory path links to, when path is a link into versions_dir(path); else None."""
    if not os.path.islink(path):
        return None
    target = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
    return target if os.path.dirname(target) == versions_dir(path) else None


def served_version(path):
    """The directory the model at path is served from: the version path links to; path itself when it is
    not our link (a directory of the layout before versions, or one an operator placed); None when nothing is there."""
    path = path.rstrip("/")
    linked = _linked_version(path)
    if linked:
        return linked
    return path if os.path.lexists(path) else None


def _point(path, version):
    """Make path a relative link to version in one step: a link made beside it, renamed over it."""
    temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.vllmops-link-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    os.symlink(os.path.join(VERSIONS, os.path.basename(path), os.path.basename(version)), temp)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _replace_dir(source, version):
    """Rename the directory source to version; what was at version (an incomplete or stale copy) is removed."""
    os.makedirs(os.path.dirname(version), mode=0o755, exist_ok=True)
    aside = None
    if os.path.lexists(version):
        aside = os.path.join(os.path.dirname(version), f".{os.path.basename(version)}.old-{os.getpid()}")
        os.rename(version, aside)
    os.rename(source, version)
    if aside:
        shutil.rmtree(aside, ignore_errors=True)


def legacy_manifest(path):
    """The manifest of a model directory in the layout before versions (path a real directory, our manifest
    beside it, not itself a version), which adopt() moves; None for anything else."""
    path = os.path.normpath(path)
    if os.path.islink(path) or not os.path.isdir(path) or os.path.basename(os.path.dirname(os.path.dirname(path))) == VERSIONS:
        return None
    kept = read_manifest(path)
    return kept if kept and isinstance(kept.get("files"), dict) else None


def adopt(path):
    """Move a model directory of the layout before versions to its version directory, its manifest beside it, and
    link path to it; return the version's directory, None when there was nothing to move. A container that mounts
    the directory keeps it through the rename."""
    path = path.rstrip("/")
    kept = legacy_manifest(path)
    if kept is None:
        return None
    version = version_path(path, digest(identity(kept["files"])))
    # The version's manifest first: an adoption cut off before the rename is simply done again.
    write_manifest(version, kept["files"], kept.get("source"))
    _replace_dir(path, version)
    _point(path, version)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(manifest_path(path))
    return version


def commit_version(staged, path, files, source):
    """Keep the complete directory staged as the version of the model at path that files ({name: {size, sha256,
    mtime_ns}}) make (replacing what lies there), and write its manifest; return the manifest. path is linked to it only when nothing is there
    yet: what is served changes with flip() alone."""
    path = path.rstrip("/")
    model_digest = digest(identity(files))
    version = version_path(path, model_digest)
    # Staged, every file was checked: it replaces what is there (a copy cut off, or files changed since their
    # manifest - the digest names what a version should hold, not what it holds).
    _replace_dir(staged, version)
    manifest = write_manifest(version, files, source)
    if not os.path.lexists(path):
        _point(path, version)
    return manifest


def flip(path, version):
    """Serve version at path: point the link at it in one step (a model directory of the layout before versions is
    adopted first). Return whether the link changed."""
    path, version = path.rstrip("/"), os.path.normpath(version)
    if os.path.dirname(version) != versions_dir(path):
        raise ModelError(f"{version} is not a version of {path} (those are in {versions_dir(path)})")
    adopt(path)
    if not os.path.isdir(version) or os.path.islink(version) or read_manifest(version) is None:
        raise ModelError(f"{version} is not a complete version of {path} (no directory, or no manifest beside it)")
    if os.path.lexists(path) and not _linked_version(path):
        raise ModelError(f"{path} is not ours to replace (a directory without our manifest, or another link): move "
                         "it away to serve the model's versions there")
    if _linked_version(path) == version:
        return False
    _point(path, version)
    return True


def versions(path):
    """The versions of the model at path on disk, each {digest, path, bytes} (by its manifest; a directory without
    one is not a version)."""
    found = []
    for manifest_file, kept in read_documents(versions_dir(path), SCHEMA, MANIFEST_SUFFIX):
        version = manifest_file[:-len(MANIFEST_SUFFIX)]
        if os.path.isdir(version) and not os.path.islink(version):
            found.append({"digest": kept.get("digest", ""), "path": version, "bytes": kept.get("bytes", 0)})
    return found


def prune_versions(path, keep):
    """Remove the versions of the model at path (and what an interrupted copy left among them) but those with a
    digest in keep and the one served; return (the directories removed, the bytes that freed: files that other
    versions hold too, by hard links, free nothing)."""
    keep = set(keep)
    kept_names = {_hex16(each) for each in keep}
    directory, served = versions_dir(path), served_version(path)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], 0
    removed, freed = [], 0
    for stem in sorted({name[:-len(MANIFEST_SUFFIX)] if name.endswith(MANIFEST_SUFFIX) else name for name in names}):
        version = os.path.join(directory, stem)
        if stem in kept_names or version == served or (read_manifest(version) or {}).get("digest") in keep:
            continue
        if os.path.isdir(version) and not os.path.islink(version):
            freed += _unshared_bytes(version)
            shutil.rmtree(version)
        elif not os.path.isfile(manifest_path(version)):
            continue  # not ours
        with contextlib.suppress(FileNotFoundError):
            os.unlink(manifest_path(version))
        removed.append(version)
    return removed, freed


def _unshared_bytes(tree):
    """Bytes of the files under tree that have no other name (a hard link elsewhere keeps the data)."""
    total = 0
    for top, _dirs, names in os.walk(tree):
        for name in names:
            info = os.lstat(os.path.join(top, name))
            if info.st_nlink == 1 and stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


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
    """A new version of the model at target, built beside it and kept as a version of its own.

    prepare() starts the staging directory afresh (a copy interrupted earlier
    is discarded) with hard links to the files the served version already holds
    right; write(chunks) takes the stream of `stream_names` and writes those in
    `wanted`, checking each one's sha256; commit() checks that the staging
    directory holds exactly the reference and keeps it as its version
    (commit_version: what target serves does not change)."""

    def __init__(self, target, reference, stream_names, wanted):
        self.target = target.rstrip("/")
        self.reference = {safe_name(name): entry for name, entry in reference.items()}  # name -> {size, sha256}
        self.stream_names = [safe_name(n) for n in stream_names]
        self.wanted = set(wanted)
        self.staging = staging_path(self.target)
        self.written = 0
        self.discarded = False

    def prepare(self, have):
        """have: the files of the version target serves ({name: {size, sha256}}), the ones linked from there."""
        if os.path.lexists(self.staging):
            shutil.rmtree(self.staging)
            self.discarded = True
        os.makedirs(self.staging, mode=0o755)
        base = served_version(self.target) or self.target
        for name, want in self.reference.items():
            if name in self.wanted:
                continue
            if have.get(name, {}).get("sha256") != want["sha256"]:
                raise ModelError(f"{base}/{name} is neither right here nor in the stream")
            self._dir_for(name)
            os.link(os.path.join(base, name), os.path.join(self.staging, name))

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
        """Keep the staging directory as its version (commit_version); return its manifest."""
        listed = listing(self.staging)
        missing = sorted(set(self.reference) - set(listed))
        if missing or set(listed) - set(self.reference):
            raise ModelError(f"the staged copy at {self.staging} lacks {missing[:5]} or holds files the manifest "
                             "does not list")
        # Every file was checked as it arrived (or was linked from a checked one): its sha256 is the reference's.
        files = {name: {"size": info.st_size, "sha256": self.reference[name]["sha256"], "mtime_ns": info.st_mtime_ns}
                 for name, info in listed.items()}
        return commit_version(self.staging, self.target, files, source)


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
