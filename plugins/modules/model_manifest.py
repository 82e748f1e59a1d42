#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_manifest
short_description: What a node holds of a model (every file's size and sha256), and what it lacks of a reference
version_added: 0.2.0
description:
  - Lists every file of the model directory O(path) with its size and sha256, and computes the model's digest
    (sha256 over the sorted path, size and sha256 of its files), its identity across nodes.
  - Keeps the result as a manifest beside the directory (C(DIRECTORY.vllmops-manifest.json)), which also serves as a
    cache - with O(rehash=stat) only the files whose size or modification time changed since are hashed again, so a
    re-run over hundreds of gigabytes takes seconds.
  - With O(reference) (the manifest of the version every node must hold), returns the files this node lacks or holds
    differently, the bytes they need and the free bytes where they go; with O(check_space) fails when they do not fit,
    before any byte moves.
  - huggingface_hub's download metadata (a top-level C(.cache) directory) is not part of the model.
  - Where O(path) is a link to one of the model's versions (C(PARENT/.vllmops-versions/NAME/HEX), each with its
    manifest beside it), reads the version it serves; with O(reference), the first version on disk (the served one,
    then the others) that holds it, so that a node which keeps the version asked for needs nothing. With O(write), a
    model directory of the layout before versions (a directory at O(path), its manifest beside it) is first moved to
    its version directory and O(path) becomes a link to it (what it serves does not change).
  - Any other directory (one without our manifest, a version directory itself, one with O(manifest_file)) is read as
    it is, its manifest beside it (or at O(manifest_file)).
options:
  path:
    description: The model directory (absolute).
    type: path
    required: true
  rehash:
    description:
      - C(stat) hashes the files whose size or modification time differ from the manifest's; C(all) every file (a
        full check of the content, for bit rot that leaves both unchanged); C(none) hashes nothing (files changed
        since the manifest are listed in RV(stale)).
    type: str
    choices: [stat, all, none]
    default: stat
  write:
    description:
      - Write the manifest when it changed (never in check mode). The manifest's O(source) is kept.
      - A model directory of the layout before versions (its manifest beside it) is moved to its version directory
        either way, once (not with O(manifest_file), never in check mode).
    type: bool
    default: true
  manifest_file:
    description: Where the manifest is kept when not beside the directory (a directory on the controller that is not ours).
    type: path
  source:
    description: Where the model came from, recorded in the manifest when there was none (a hub repo and revision, a path).
    type: dict
  reference:
    description: The files every node must hold (C(files) of another node's manifest, name to size and sha256).
    type: dict
  whole:
    description:
      - With O(reference), count every file of it as needed (a node that downloads the model afresh); the served
        version is read, no other.
    type: bool
    default: false
  check_space:
    description: With O(reference), fail when the files this node lacks do not fit in the free space of O(path)'s file system.
    type: bool
    default: false
  space_margin:
    description: Bytes to leave free besides the files (O(check_space)).
    type: int
    default: 1073741824
attributes:
  check_mode:
    support: full
    description: Reads and hashes, writes no manifest and moves nothing (C(changed) says whether it would).
  diff_mode:
    support: none
    description: No diff.
  idempotent:
    support: full
    description: Writes the manifest only when a file changed; moves a directory of the layout before versions once.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: What the head holds of the model
  vllmops.cluster.model_manifest:
    path: /srv/models/Qwen3.5-122B-A10B-FP8
  register: head_model

- name: What each node lacks of it, and whether that fits
  vllmops.cluster.model_manifest:
    path: /srv/models/Qwen3.5-122B-A10B-FP8
    reference: "{{ hostvars[groups['vllm_nodes'][0]].head_model.files }}"
    check_space: true
"""

RETURN = r"""
exists:
  description: Whether O(path) is a directory holding files.
  returned: always
  type: bool
digest:
  description: The model's digest (C(sha256:...)); empty when a file's hash is unknown (O(rehash=none)) or there is no model.
  returned: always
  type: str
files:
  description: Relative path to C(size) and C(sha256) of every file.
  returned: always
  type: dict
bytes:
  description: Total bytes of the files.
  returned: always
  type: int
source:
  description: Where the manifest says the model came from (null when unknown).
  returned: always
  type: dict
manifest:
  description: Whether a manifest was kept for the model before this run.
  returned: always
  type: bool
recorded_digest:
  description: The digest the kept manifest recorded (empty without one); it differs from RV(digest) when a file changed since.
  returned: always
  type: str
hashed:
  description: Files hashed in this run.
  returned: always
  type: list
  elements: str
stale:
  description: Files whose size or modification time changed since the manifest (O(rehash=none)), or that are not in it.
  returned: always
  type: list
  elements: str
needed:
  description: Files of O(reference), in its order, that this node lacks or holds differently.
  returned: with O(reference)
  type: list
  elements: str
need_bytes:
  description: Bytes of RV(needed).
  returned: with O(reference)
  type: int
free_bytes:
  description: Free bytes of the file system that holds (or will hold) O(path).
  returned: always
  type: int
config:
  description: The model's C(config.json), parsed (null when it has none, or none that parses as a JSON object).
  returned: always
  type: dict
version:
  description:
    - The directory read - the version that holds O(reference), else the one served (what a copy links its files
      from); O(path) itself when it is a plain directory; empty when there is none.
  returned: always
  type: str
served:
  description: The directory O(path) serves (the version it links to, or O(path) itself when it is a directory); empty when nothing is there.
  returned: always
  type: str
kept_bytes:
  description:
    - Bytes of all versions of the model on disk, by their manifests (a file that versions share by hard links counts
      in each); an update keeps the previous version, for rollback.
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils import model_files


def _read(directory, rehash, manifest_file=None):
    """The manifest kept for the model directory (None without one), its files as they are, the names hashed now."""
    kept = model_files.read_manifest(directory, manifest_file)
    files, hashed = model_files.scan(directory, kept["files"] if kept else {}, rehash)
    return kept, files, hashed


def _holds(files, reference):
    """Whether files (as scanned, every hash known) hold every file of reference as it is there."""
    return all(entry["sha256"] for entry in files.values()) and not model_files.needed(model_files.identity(files), reference)


def _choose(served, others, reference, rehash):
    """The version to report on and what _read() says of it: the first of served and the other versions that holds
    reference, else served (the version a copy links its files from)."""
    chosen = (served, *_read(served, rehash)) if served else (None, None, {}, [])
    if reference is None or _holds(chosen[2], reference):
        return chosen
    for version in others:
        kept = model_files.read_manifest(version)
        if kept and not model_files.needed(model_files.identity(kept["files"]), reference):  # only these are read
            candidate = (version, *_read(version, rehash))
            if _holds(candidate[2], reference):
                return candidate
    return chosen


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            rehash=dict(type="str", choices=["stat", "all", "none"], default="stat"),
            write=dict(type="bool", default=True),
            manifest_file=dict(type="path"),
            source=dict(type="dict"),
            reference=dict(type="dict"),
            whole=dict(type="bool", default=False),
            check_space=dict(type="bool", default=False),
            space_margin=dict(type="int", default=1 << 30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"].rstrip("/")
    if not os.path.isabs(path):
        module.fail_json(msg=f"the model path {path} is not absolute")
    try:
        adopted = False
        # The layout before versions becomes a version once, write or not: the manifest moves as it is.
        if not params["manifest_file"]:  # a directory with its manifest elsewhere is not ours
            adopted = model_files.legacy_manifest(path) is not None
            if adopted and not module.check_mode:
                model_files.adopt(path)
        served = model_files.served_version(path)
        kept_versions = model_files.versions(path)
        if not params["manifest_file"] and served != path:  # our link, or nothing served yet
            reference = None if params["whole"] else params["reference"]
            others = [each["path"] for each in kept_versions if each["path"] != served]
            version, kept, files, hashed = _choose(served, others, reference, params["rehash"])
        else:  # a plain directory, its manifest beside it or at manifest_file
            version = path
            kept, files, hashed = _read(path, params["rehash"], params["manifest_file"])
        ident = model_files.identity(files)
        known = all(entry["sha256"] for entry in ident.values())
        source = (kept or {}).get("source") or params["source"]
        cache = kept["files"] if kept else {}
        result = dict(changed=adopted, exists=bool(files), files=ident, bytes=sum(e["size"] for e in ident.values()),
                      digest=model_files.digest(ident) if files and known else "", source=source,
                      manifest=kept is not None, recorded_digest=(kept or {}).get("digest", ""), hashed=hashed,
                      stale=sorted(name for name, entry in files.items() if entry["sha256"] is None or name not in cache),
                      free_bytes=model_files.free_bytes(path), config=model_files.read_config(version or path),
                      version=version if version and os.path.isdir(version) else "", served=served or "",
                      kept_bytes=sum(each["bytes"] for each in kept_versions))
        if params["write"] and files and known and (kept is None or kept.get("files") != files):
            result["changed"] = True
            if not module.check_mode:
                model_files.write_manifest(version, files, source, params["manifest_file"])
                # A model put at the served path by hand, now with its manifest: a version from here on.
                if version == path and not params["manifest_file"] and model_files.legacy_manifest(path):
                    result["version"] = result["served"] = model_files.adopt(path)
        # Nothing at the served path (a link removed by hand), a version that holds the model beside it: serve it.
        if params["write"] and not served and result["version"] and not params["manifest_file"] and result["version"] != path:
            result["changed"] = True
            if not module.check_mode:
                model_files.flip(path, result["version"])
                result["served"] = result["version"]
        if params["reference"] is not None:
            reference = params["reference"]
            wanted = list(reference) if params["whole"] else model_files.needed(ident, reference)
            result.update(needed=wanted, need_bytes=sum(reference[name]["size"] for name in wanted))
            room = result["free_bytes"] - params["space_margin"]
            if params["check_space"] and wanted and result["need_bytes"] > room:
                module.fail_json(msg=f"{path}: the model needs {_size(result['need_bytes'])} more here "
                                     f"({len(wanted)} files), {_size(result['free_bytes'])} is free (keeping "
                                     f"{_size(params['space_margin'])} spare; the versions kept for rollback hold "
                                     f"{_size(result['kept_bytes'])}): free space or set vllm_serve_model_dir "
                                     "to a larger file system. Nothing was copied.", **result)
    except (OSError, model_files.ModelError) as err:
        module.fail_json(msg=f"reading the model at {path}: {err}")
    module.exit_json(**result)


def _size(count):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.1f} {unit}" if unit != "bytes" else f"{count} bytes"
        count /= 1024
    return str(count)


if __name__ == "__main__":
    main()
