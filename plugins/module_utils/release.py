# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's releases: what served, kept so that it can serve again.

A release is a directory ROOT/ID holding its record (release.json, schema
vllmops.release/1: the image, the model version, this node's part, the argv,
the proxy, the plan, and the sha256 of each of this node's files), a copy of
each of those files (files/NAME) and, where one was given, the API key
(secret). ROOT/index.json names three of them: the one serving now
(current), the last one that answered after a deploy (last_good) and the one
before it (previous); no other is kept. Every node keeps its own part of the
same releases, under the same IDs, so that a rollback is the same decision
everywhere.

The layout before it (two directories of copies, /etc/vllmops/last-good and
/etc/vllmops/previous) is migrated once into two releases with fixed IDs.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil

from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import write_json, write_whole

SCHEMA = "vllmops.release/1"
INDEX_SCHEMA = "vllmops.release-index/1"
ROOT = "/etc/vllmops/releases"
SLOTS = ("current", "last_good", "previous")
# What a record holds besides the caller's fields: the caller cannot set them.
RESERVED = frozenset({"schema", "id", "node", "created", "files", "digests"})
# IDs become directory names: a leading dot is refused too (ROOT/.ID.tmp and ROOT/.ID.old are a keep in progress).
_ID_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")

# The layout before releases: the IDs its two directories get (the same on every node, each migrating alone).
LEGACY_IDS = {"last_good": "legacy-last-good", "previous": "legacy-previous"}
LEGACY_VLLM_UNIT = "vllmops-vllm.service"


class ReleaseError(Exception):
    pass


def valid_id(release_id) -> str:
    """release_id when it can be a directory name of ours; ReleaseError naming it when not."""
    if not isinstance(release_id, str) or not _ID_RE.fullmatch(release_id):
        raise ReleaseError(f"refusing the release ID {release_id!r}: use letters, digits, '.', '_' and '-', not starting with '.'")
    return release_id


def empty_index() -> dict:
    return {"schema": INDEX_SCHEMA, "current": None, "last_good": None, "previous": None}


def sha256_or_none(path: str) -> str | None:
    try:
        return model_files.sha256_file(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def file_mode(mode) -> int:
    """A mode as Ansible passes it: octal text ('0644', '644') or the number itself (YAML's 0644 is 420)."""
    if isinstance(mode, int) and not isinstance(mode, bool):
        value = mode
    else:
        try:
            value = int(str(mode), 8)
        except ValueError:
            raise ReleaseError(f"refusing the file mode {mode!r}: give it in octal, quoted ('0644')") from None
    if not 0 <= value <= 0o7777:
        raise ReleaseError(f"refusing the file mode {mode!r}: not a file mode")
    return value


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _plain(data):
    """data as it reads back from JSON (tuples become lists): what a comparison with a stored record needs."""
    return json.loads(json.dumps(data))


def _same_record(one: dict | None, other: dict | None) -> bool:
    """Equal apart from when each was kept."""
    if one is None or other is None:
        return one is other
    return {k: v for k, v in one.items() if k != "created"} == {k: v for k, v in other.items() if k != "created"}


def _unique_names(paths: list[str]) -> list[str]:
    """The names the copies of paths get under files/: the basename, with '.2', '.3'... where one is taken."""
    names, taken = [], set()
    for path in paths:
        base = os.path.basename(path)
        if base in ("", ".", ".."):
            raise ReleaseError(f"refusing to keep {path!r}: not a file path")
        name, number = base, 1
        while name in taken:
            number += 1
            name = f"{base}.{number}"
        taken.add(name)
        names.append(name)
    return names


def _write_file(source: str, path: str, mode: int, owner_root: bool) -> None:
    """Copy source to path whole or not at all, with mode (owned by root when owner_root)."""
    def fill(out):
        with open(source, "rb") as handle:
            shutil.copyfileobj(handle, out)

    write_whole(path, fill, mode, binary=True, owner=(0, 0) if owner_root else None)


class Store:
    """The releases under root. With check_mode nothing is written: every method reports what it would do, and
    what a migration would have written is held in memory for the calls that follow."""

    def __init__(self, root: str = ROOT, check_mode: bool = False):
        self.root = root
        self.check_mode = check_mode
        self._planned_index: dict | None = None
        self._planned_records: dict[str, dict] = {}

    # Reading.

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def index(self) -> dict:
        """The index; an empty one where none was written yet."""
        if self._planned_index is not None:
            return dict(self._planned_index)
        data = _read_json(self._path("index.json"), "reading")
        if data is None:
            return empty_index()
        if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
            raise ReleaseError(f"{self._path('index.json')} is not a release index ({INDEX_SCHEMA}): move it aside")
        return {"schema": INDEX_SCHEMA, **{slot: data.get(slot) for slot in SLOTS}}

    def has_index(self) -> bool:
        return self._planned_index is not None or os.path.exists(self._path("index.json"))

    def exists(self, release_id: str) -> bool:
        return release_id in self._planned_records or os.path.isdir(self._path(valid_id(release_id)))

    def read(self, release_id: str) -> dict:
        """The record of a kept release; ReleaseError when it is not kept or is not a record of ours (another
        schema, another ID than its directory's)."""
        valid_id(release_id)
        if release_id in self._planned_records:
            return self._planned_records[release_id]
        path = self._path(release_id, "release.json")
        record = _read_json(path, "reading")
        if record is None:
            raise ReleaseError(f"the release {release_id!r} is not kept on this node ({path} is missing)")
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            raise ReleaseError(f"{path} is not a release record ({SCHEMA}): refusing it")
        if record.get("id") != release_id:
            raise ReleaseError(f"{path} holds the record of {record.get('id')!r}, not of {release_id!r}: refusing it")
        return record

    def read_secret(self, release_id: str) -> str | None:
        try:
            with open(self._path(valid_id(release_id), "secret"), encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def kept(self) -> list[str]:
        """The IDs of the release directories under root (not those a keep is building)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            names = []
        found = {name for name in names if _ID_RE.fullmatch(name) and os.path.isdir(self._path(name))}
        return sorted(found | set(self._planned_records))

    def resolve(self, name: str) -> str:
        """The ID that name stands for: a slot of the index (last_good, previous, current) or an ID kept here."""
        index = self.index()
        release_id = index[name] if name in SLOTS else valid_id(name)
        if release_id is None or not self.exists(release_id):
            kept = ", ".join(f"{slot}={index[slot]}" for slot in SLOTS if index[slot]) or "none"
            raise ReleaseError(f"no release {name!r} is kept under {self.root} on this node (kept: {kept})")
        return release_id

    def info(self, files: list[dict] = (), release: str = "last_good", read_secret: bool = False) -> dict:
        index = self.index()
        records = {slot: self.read(index[slot]) if index[slot] and self.exists(index[slot]) else None for slot in SLOTS}
        result = {"index": index, "records": records,
                  "live": {entry["path"]: sha256_or_none(entry["path"]) for entry in files}, "matches": None}
        if records["current"] is not None:
            kept = records["current"]["files"]
            # Given files: also the same set of files (a file of ours the record lacks, or one gone, is another release).
            present = {path for path, sha in result["live"].items() if sha}
            result["matches"] = (all(sha256_or_none(entry["path"]) == entry["sha256"] for entry in kept)
                                 and (not files or present == {entry["path"] for entry in kept}))
        if read_secret:
            result["secret"] = self.read_secret(self.resolve(release))
        return result

    # Writing.

    def _write_index(self, index: dict) -> bool:
        """Write the index when it differs; True when it did (or would)."""
        if index == self.index():
            return False
        if self.check_mode:
            self._planned_index = dict(index)
        else:
            self._make_root()
            write_json(self._path("index.json"), index, mode=0o600, indent=1, sort_keys=True)
        return True

    def _make_root(self) -> None:
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)

    def _unchanged_on_disk(self, record: dict, secret: str | None) -> bool:
        """Whether ROOT/ID already holds this record (apart from when it was kept), the copies it names, and secret."""
        try:
            old = self.read(record["id"])
        except ReleaseError:
            return False
        if not _same_record(old, record) or self.read_secret(record["id"]) != secret:
            return False
        for entry in record["files"]:
            copy = self._path(record["id"], "files", entry["name"])
            if sha256_or_none(copy) != entry["sha256"] or os.stat(copy).st_mode & 0o7777 != file_mode(entry["mode"]):
                return False
        return True

    def _write_release(self, record: dict, sources: list[str], secret: str | None) -> None:
        """Build ROOT/.ID.tmp (the record, a copy of each file, the secret) and put it in place of ROOT/ID."""
        release_id = record["id"]
        building, old, final = self._path(f".{release_id}.tmp"), self._path(f".{release_id}.old"), self._path(release_id)
        self._make_root()
        for leftover in (building, old):
            shutil.rmtree(leftover, ignore_errors=True)
        os.makedirs(os.path.join(building, "files"), mode=0o700)
        os.chmod(building, 0o700)
        for entry, source in zip(record["files"], sources, strict=True):
            _write_file(source, os.path.join(building, "files", entry["name"]), file_mode(entry["mode"]), owner_root=False)
            if model_files.sha256_file(os.path.join(building, "files", entry["name"])) != entry["sha256"]:
                raise ReleaseError(f"{source} changed while it was being kept: keep the release again")
        if secret is not None:
            fd = os.open(os.path.join(building, "secret"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(secret)
        write_json(os.path.join(building, "release.json"), record, mode=0o600, indent=1, sort_keys=True)
        if os.path.lexists(final):
            os.rename(final, old)
        os.rename(building, final)
        shutil.rmtree(old, ignore_errors=True)

    def _put(self, record: dict, sources: list[str], secret: str | None) -> bool:
        """Keep a release unless it is kept already as it is; True when it was (or would be) written."""
        if self._unchanged_on_disk(record, secret):
            return False
        if self.check_mode:
            self._planned_records[record["id"]] = record
        else:
            self._write_release(record, sources, secret)
        return True

    def keep(self, release_id: str, record: dict, files: list[dict], digests: dict, node: str,
             secret: str | None = None, model_path: str | None = None) -> dict:
        """Keep release_id as the last good one (and the one serving); forget every release but the three the
        index names, and with model_path the model versions none of them serves."""
        valid_id(release_id)
        taken = sorted(RESERVED & set(record or {}))
        if taken:
            raise ReleaseError(f"refusing to keep {release_id}: the record may not set {', '.join(taken)} (the release sets them)")
        paths = [entry["path"] for entry in files]
        missing = [path for path in paths if not os.path.isfile(path)]
        if missing:
            raise ReleaseError(f"keeping {release_id}: {', '.join(missing)} missing on this node, nothing kept")
        # A file given without its mode keeps the one it has.
        modes = [file_mode(entry["mode"]) if entry.get("mode") else os.stat(path).st_mode & 0o7777 for entry, path in zip(files, paths, strict=True)]
        kept_files = [{"path": path, "mode": f"{mode:04o}", "sha256": model_files.sha256_file(path), "name": name}
                      for path, mode, name in zip(paths, modes, _unique_names(paths), strict=True)]
        new = _plain({"schema": SCHEMA, "id": release_id, "node": node, "created": _now(), **(record or {}),
                      "files": kept_files, "digests": {label: sha256_or_none(path) for label, path in (digests or {}).items()}})
        changed = self._put(new, paths, secret)

        index = self.index()
        if index["last_good"] != release_id:
            index["previous"] = index["last_good"]
        index.update(last_good=release_id, current=release_id)
        changed |= self._write_index(index)
        removed = self.forget_others(index)
        result = {"id": release_id, "index": index, "removed": removed, "pruned_versions": [], "freed_bytes": 0}
        if model_path:
            result["pruned_versions"], result["freed_bytes"] = self._prune_model(model_path, self.model_digests(index))
        result["changed"] = changed or bool(removed) or bool(result["pruned_versions"])
        return result

    def forget_others(self, index: dict) -> list[str]:
        """Remove every release the index does not name; their IDs."""
        named = {index[slot] for slot in SLOTS}
        removed = [release_id for release_id in self.kept() if release_id not in named]
        for release_id in removed:
            if self.check_mode:
                self._planned_records.pop(release_id, None)
            else:
                shutil.rmtree(self._path(release_id))
        return removed

    def model_digests(self, index: dict) -> set[str]:
        """The digests of the model versions the releases the index names serve (those kept here)."""
        models = [self.read(release_id).get("model") for release_id in {index[slot] for slot in SLOTS} - {None} if self.exists(release_id)]
        return {model["digest"] for model in models if isinstance(model, dict) and model.get("digest")}

    def _prune_model(self, model_path: str, wanted: set) -> tuple[list[str], int]:
        if not self.check_mode:
            removed, freed = model_files.prune_versions(model_path, wanted)
            return sorted(removed), freed
        return _unwanted_versions(model_path, wanted)

    def restore(self, name: str, model_path: str | None = None) -> dict:
        """Put this node's files of a kept release back where they differ, its model version in place, and make
        it the current one. Units it does not have are the caller's to stop and remove."""
        release_id = self.resolve(name)
        record = self.read(release_id)
        differing = [entry for entry in record["files"] if not _is_live(entry)]
        if not self.check_mode:
            # Every copy is checked before the first file is put back: never half a release from a damaged one.
            for entry in differing:
                if sha256_or_none(self._path(release_id, "files", entry["name"])) != entry["sha256"]:
                    raise ReleaseError(f"restoring {release_id}: its copy of {entry['path']} ({self._path(release_id, 'files', entry['name'])}) "
                                       "is missing or differs from its record; nothing was put back")
            for entry in differing:
                _write_file(self._path(release_id, "files", entry["name"]), entry["path"], file_mode(entry["mode"]), os.geteuid() == 0)
        changed_files = [entry["path"] for entry in differing]
        model_changed = False
        model = record.get("model") or {}
        model_path = model_path or model.get("path")  # the served path the release recorded, unless given
        if model_path and model.get("version"):
            model_changed = self.link(model_path, model["version"])
        index = self.index()
        index["current"] = release_id
        index_changed = self._write_index(index)
        return {"id": release_id, "index": index, "record": record, "changed_files": changed_files,
                "model_changed": model_changed, "changed": bool(changed_files) or model_changed or index_changed}

    def promote(self, name: str) -> dict:
        """The release named becomes the last good one (and the one serving), the last good one before it the
        previous: after a rollback that answered, a second one goes forward again."""
        release_id = self.resolve(name)
        index = self.index()
        if index["last_good"] != release_id:
            index["previous"] = index["last_good"]
        index.update(last_good=release_id, current=release_id)
        return {"id": release_id, "index": index, "changed": self._write_index(index)}

    def link(self, model_path: str, version: str) -> bool:
        """Serve version at model_path; True when it was (or would be) switched."""
        if self.check_mode:
            return model_files.served_version(model_path) != os.path.normpath(version)
        return bool(model_files.flip(model_path, version))

    # The layout before releases.

    def migrate(self, legacy: dict, node: str) -> dict:
        """Turn the directories legacy names (last_good, previous) into releases; remove them once the releases
        and the index are written, so that an interrupted migration is done again. A node whose index names
        other releases keeps its legacy directories, with a warning."""
        dirs = {slot: legacy.get(slot) for slot in LEGACY_IDS if legacy.get(slot) and os.path.isdir(legacy[slot])}
        result = {"migrated": [], "removed": [], "warnings": [], "changed": False}
        if not dirs:
            return result
        index = empty_index()
        for slot in dirs:
            index[slot] = LEGACY_IDS[slot]
        index["current"] = index["last_good"]
        if self.has_index() and self.index() != index:
            result["warnings"].append(
                f"{' and '.join(dirs.values())} (kept before releases) remain beside the release index {self._path('index.json')}, "
                "which names other releases: left as they are; remove them once the releases are right")
            return result
        for slot, directory in dirs.items():
            record, sources = legacy_release(directory, LEGACY_IDS[slot], legacy, node)
            if self._put(record, sources, None):
                result["migrated"].append(record["id"])
        self._write_index(index)
        for directory in dirs.values():
            if not self.check_mode:
                shutil.rmtree(directory)
            result["removed"].append(directory)
        result["changed"] = True
        return result


def _is_live(entry: dict) -> bool:
    """Whether a kept file is in place: its content (sha256) and its mode."""
    try:
        mode = os.stat(entry["path"]).st_mode & 0o7777
    except FileNotFoundError:
        return False
    return mode == file_mode(entry["mode"]) and sha256_or_none(entry["path"]) == entry["sha256"]


def migrate(root: str, legacy: dict, node: str, check_mode: bool = False) -> dict:
    """Store(root).migrate(legacy, node): what was migrated, the legacy directories removed, warnings."""
    return Store(root, check_mode).migrate(legacy, node)


def _read_json(path: str, doing: str = "migrating"):
    """The JSON at path, None when there is no file; ReleaseError naming what was being done when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise ReleaseError(f"{doing} {path}: {err}") from err


def legacy_release(directory: str, release_id: str, legacy: dict, node: str) -> tuple[dict, list[str]]:
    """The record of a directory of the layout before releases, and the paths of the files it copies in.

    member.json is this node's part; an older layout kept none: a directory with the vLLM unit was then the
    head's one vLLM over Ray (rank 0, serving the API), one without it ran no rank here."""
    known = legacy.get("files") or {}
    member = _read_json(os.path.join(directory, "member.json"))
    if not isinstance(member, dict):
        if os.path.isfile(os.path.join(directory, legacy.get("vllm_unit") or LEGACY_VLLM_UNIT)):
            member = {"rank": 0, "runs_vllm": True, "serves_http": True, "api_port": legacy.get("api_port")}
        else:
            member = {"runs_vllm": False, "serves_http": False}
    plan = _read_json(os.path.join(directory, "plan.json"))
    names = [name for name in sorted(known) if os.path.isfile(os.path.join(directory, name))]
    sources = [os.path.join(directory, name) for name in names]
    files = [{"path": known[name]["path"], "mode": f"{file_mode(known[name].get('mode') or '0644'):04o}",
              "sha256": model_files.sha256_file(source), "name": name}
             for name, source in zip(names, sources, strict=True)]
    created = datetime.datetime.fromtimestamp(os.stat(directory).st_mtime, datetime.UTC).isoformat(timespec="seconds")
    plan = plan if isinstance(plan, dict) else None
    record = _plain({"schema": SCHEMA, "id": release_id, "node": node, "created": created, "member": member, "plan": plan,
                     "image": {"content_id": member.get("image_content_id"), "local_id": member.get("image_id")},
                     "model": _served_model(plan) if release_id == LEGACY_IDS["last_good"] else None,
                     "files": files, "digests": {}})
    return record, sources


def _served_model(plan: dict | None) -> dict | None:
    """The model version the plan's model path serves now (the last working configuration of the layout before
    releases served it: the model role made its directory a version in this run), None when there is none."""
    path = (plan or {}).get("model_path") or ""
    version = model_files.served_version(path) if path.startswith("/") else None
    manifest = model_files.read_manifest(version) if version and version != path else None
    return {"path": path, "digest": manifest["digest"], "version": version} if manifest and manifest.get("digest") else None


def _unwanted_versions(model_path: str, wanted: set) -> tuple[list[str], int]:
    """Check mode's prediction of model_files.prune_versions: the versions of model_path no kept release serves, the
    one served left out, and the bytes their manifests count (files hard-linked from a kept version would free none)."""
    served = model_files.served_version(model_path)
    unwanted = [version for version in model_files.versions(model_path) if version["digest"] not in wanted and version["path"] != served]
    return sorted(version["path"] for version in unwanted), sum(version["bytes"] for version in unwanted)
