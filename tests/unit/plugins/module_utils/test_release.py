"""A node's releases on real files: kept whole, put back byte for byte, the index moving as a rollback needs,
everything but three releases (and the model versions they serve) removed, and the layout before releases
migrated once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import release
from ansible_collections.vllmops.cluster.plugins.module_utils.release import ReleaseError, Store


def content(path) -> bytes:
    return Path(path).read_bytes()


def sha(path) -> str:
    return hashlib.sha256(content(path)).hexdigest()


def mode(path) -> int:
    return os.stat(path).st_mode & 0o7777


@pytest.fixture()
def node(tmp_path):
    """This node's files of a release (a unit, the env file with the key, the cluster environment) and a store."""
    etc = tmp_path / "etc"
    (etc / "systemd").mkdir(parents=True)
    (etc / "systemd" / "vllmops-vllm.service").write_text("[Service]\nExecStart=/usr/bin/docker run image-a\n")
    (etc / "vllm.env").write_text("VLLM_API_KEY=k1\n")
    (etc / "cluster.env").write_text("VLLM_HOST_IP=10.0.0.1\n")
    os.chmod(etc / "systemd" / "vllmops-vllm.service", 0o644)
    os.chmod(etc / "vllm.env", 0o600)
    os.chmod(etc / "cluster.env", 0o644)
    files = [{"path": str(etc / "systemd" / "vllmops-vllm.service"), "mode": "0644"},
             {"path": str(etc / "vllm.env"), "mode": "0600"},
             {"path": str(etc / "cluster.env"), "mode": "0644"}]
    return etc, files, Store(str(tmp_path / "releases"))


def keep(store, release_id, files, **extra):
    record = extra.pop("record", {"image": {"content_id": "sha256:c", "local_id": "sha256:l"}, "model": None})
    return store.keep(release_id, record, files, extra.pop("digests", {}), "node-1", **extra)


def test_a_kept_release_holds_its_record_the_copies_and_the_secret(node, tmp_path):
    etc, files, store = node
    result = keep(store, "r1", files, secret="k1", digests={"network_env": str(etc / "cluster.env"), "ray_token": str(etc / "none")})
    assert result["changed"] and result["index"] == {"schema": release.INDEX_SCHEMA, "current": "r1", "last_good": "r1", "previous": None}
    root = tmp_path / "releases"
    assert mode(root) == 0o700 and mode(root / "index.json") == 0o600 and mode(root / "r1" / "release.json") == 0o600
    assert json.loads((root / "index.json").read_text()) == result["index"]
    record = json.loads((root / "r1" / "release.json").read_text())
    created = record.pop("created")
    assert created.endswith("+00:00") and "T" in created
    assert record == {
        "schema": "vllmops.release/1", "id": "r1", "node": "node-1",
        "image": {"content_id": "sha256:c", "local_id": "sha256:l"}, "model": None,
        "files": [{"path": f["path"], "mode": f["mode"], "sha256": sha(f["path"]), "name": os.path.basename(f["path"])} for f in files],
        "digests": {"network_env": sha(etc / "cluster.env"), "ray_token": None},
    }
    for entry in record["files"]:
        copy = root / "r1" / "files" / entry["name"]
        assert copy.read_bytes() == content(entry["path"]) and f"{mode(copy):04o}" == entry["mode"]
    assert (root / "r1" / "secret").read_text() == "k1" and mode(root / "r1" / "secret") == 0o600
    assert store.read_secret("r1") == "k1"
    assert [name for name in os.listdir(root) if name.startswith(".")] == []  # nothing of the build left


def test_files_of_the_same_name_get_a_numbered_copy(node, tmp_path):
    _, files, store = node
    other = tmp_path / "other" / "vllm.env"
    other.parent.mkdir()
    other.write_text("OTHER=1\n")
    keep(store, "r1", [*files, {"path": str(other), "mode": 0o640}])
    names = [entry["name"] for entry in store.read("r1")["files"]]
    assert names == ["vllmops-vllm.service", "vllm.env", "cluster.env", "vllm.env.2"]
    assert (tmp_path / "releases" / "r1" / "files" / "vllm.env.2").read_text() == "OTHER=1\n"
    assert store.read("r1")["files"][3]["mode"] == "0640"  # YAML's unquoted 0640 arrives as the number


def test_the_index_moves_as_releases_are_kept(node, tmp_path):
    etc, files, store = node
    keep(store, "A", files)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k2\n")
    second = keep(store, "B", files)
    assert second["changed"] and second["index"]["previous"] == "A" and second["index"]["last_good"] == "B"
    before = (tmp_path / "releases" / "B" / "release.json").read_text()
    again = keep(store, "B", files)
    assert not again["changed"] and again["index"] == second["index"] and again["removed"] == []
    assert (tmp_path / "releases" / "B" / "release.json").read_text() == before  # not even its time rewritten
    third = keep(store, "C", files)
    assert third["index"] == {"schema": release.INDEX_SCHEMA, "current": "C", "last_good": "C", "previous": "B"}
    assert third["removed"] == ["A"] and sorted(os.listdir(tmp_path / "releases")) == ["B", "C", "index.json"]


def test_the_same_id_with_other_files_is_kept_anew(node):
    etc, files, store = node
    keep(store, "A", files, secret="k1")
    (etc / "cluster.env").write_text("VLLM_HOST_IP=10.0.0.2\n")
    result = keep(store, "A", files, secret="k1")
    assert result["changed"] and result["index"]["previous"] is None
    assert store.read("A")["files"][2]["sha256"] == sha(etc / "cluster.env")
    assert keep(store, "A", files, secret="k2")["changed"]  # another key alone is another release
    assert store.read_secret("A") == "k2"


def test_a_damaged_copy_is_kept_anew(node, tmp_path):
    _, files, store = node
    keep(store, "A", files)
    (tmp_path / "releases" / "A" / "files" / "cluster.env").write_text("damaged")
    assert keep(store, "A", files)["changed"]
    assert sha(tmp_path / "releases" / "A" / "files" / "cluster.env") == sha(files[2]["path"])


def test_restore_puts_back_only_what_differs_byte_for_byte(node):
    etc, files, store = node
    keep(store, "A", files, secret="k1")
    kept = {f["path"]: content(f["path"]) for f in files}
    # The next release: another unit and key, the same cluster environment.
    (etc / "systemd" / "vllmops-vllm.service").write_text("[Service]\nExecStart=/usr/bin/docker run image-b\n")
    (etc / "vllm.env").write_text("VLLM_API_KEY=k2\n")
    keep(store, "B", files, secret="k2")
    os.chmod(etc / "cluster.env", 0o666)  # a mode changed by hand differs too
    restored = store.restore("previous")
    assert restored["id"] == "A" and restored["changed"] and restored["record"] == store.read("A")
    assert restored["changed_files"] == [files[0]["path"], files[1]["path"], files[2]["path"]]
    assert {f["path"]: content(f["path"]) for f in files} == kept
    assert [mode(f["path"]) for f in files] == [0o644, 0o600, 0o644]
    assert restored["index"] == {"schema": release.INDEX_SCHEMA, "current": "A", "last_good": "B", "previous": "A"}
    again = store.restore("previous")
    assert not again["changed"] and again["changed_files"] == []
    # A file gone is put back; the others are left alone.
    os.unlink(etc / "vllm.env")
    assert store.restore("A")["changed_files"] == [files[1]["path"]]
    assert (etc / "vllm.env").read_bytes() == kept[files[1]["path"]]


def test_restore_refuses_a_damaged_copy_before_touching_anything(node, tmp_path):
    etc, files, store = node
    keep(store, "A", files)
    (etc / "vllm.env").write_text("changed\n")
    (etc / "cluster.env").write_text("changed\n")
    (tmp_path / "releases" / "A" / "files" / "cluster.env").write_text("damaged")
    with pytest.raises(ReleaseError, match="differs from its record; nothing was put back"):
        store.restore("last_good")
    assert (etc / "vllm.env").read_text() == "changed\n"


def test_restore_of_what_is_not_kept_names_what_is(node):
    _, files, store = node
    with pytest.raises(ReleaseError, match=r"no release 'previous' .* \(kept: none\)"):
        store.restore("previous")
    keep(store, "A", files)
    with pytest.raises(ReleaseError, match=r"no release 'previous' .* \(kept: current=A, last_good=A\)"):
        store.restore("previous")
    with pytest.raises(ReleaseError, match="no release 'Z'"):
        store.restore("Z")


def test_promote_makes_the_previous_release_the_last_good_and_back(node):
    etc, files, store = node
    keep(store, "A", files)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k2\n")
    keep(store, "B", files)
    store.restore("previous")
    promoted = store.promote("A")
    assert promoted["changed"] and promoted["index"] == {"schema": release.INDEX_SCHEMA, "current": "A", "last_good": "A", "previous": "B"}
    assert not store.promote("last_good")["changed"]
    # A second rollback goes forward again.
    assert store.restore("previous")["id"] == "B"
    assert store.promote("previous")["index"] == {"schema": release.INDEX_SCHEMA, "current": "B", "last_good": "B", "previous": "A"}
    assert (etc / "vllm.env").read_text() == "VLLM_API_KEY=k2\n"


@pytest.mark.parametrize("bad", ["", ".", "..", "../etc", "a/b", ".hidden", "a b", "é", None])
def test_ids_that_are_not_plain_names_are_refused(node, bad):
    _, files, store = node
    with pytest.raises(ReleaseError, match="refusing the release ID"):
        keep(store, bad, files)


def test_a_record_of_another_schema_or_id_is_refused(node, tmp_path):
    _, files, store = node
    keep(store, "A", files)
    path = tmp_path / "releases" / "A" / "release.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "schema": "vllmops.release/2"}))
    with pytest.raises(ReleaseError, match="not a release record"):
        store.read("A")
    shutil.copytree(tmp_path / "releases" / "A", tmp_path / "releases" / "X")
    (tmp_path / "releases" / "X" / "release.json").write_text(json.dumps(record))
    with pytest.raises(ReleaseError, match="holds the record of 'A', not of 'X'"):
        store.restore("X")


def test_the_caller_cannot_set_what_the_release_sets(node):
    _, files, store = node
    with pytest.raises(ReleaseError, match="may not set files, id"):
        keep(store, "A", files, record={"id": "B", "files": []})


def test_a_missing_file_keeps_nothing(node, tmp_path):
    _, files, store = node
    with pytest.raises(ReleaseError, match="missing on this node, nothing kept"):
        keep(store, "A", [*files, {"path": str(tmp_path / "gone"), "mode": "0644"}])
    assert not (tmp_path / "releases").exists()


def test_info_reports_the_index_records_live_files_and_whether_they_match(node, tmp_path):
    etc, files, store = node
    empty = store.info(files)
    assert empty["matches"] is None and empty["records"] == {"current": None, "last_good": None, "previous": None}
    assert empty["live"] == {f["path"]: sha(f["path"]) for f in files}
    keep(store, "A", files, secret="k1")
    info = store.info([*files, {"path": str(tmp_path / "gone")}], read_secret=True)
    assert info["matches"] is True and info["records"]["current"] == store.read("A") and info["records"]["previous"] is None
    assert info["live"][str(tmp_path / "gone")] is None and info["secret"] == "k1"
    (etc / "vllm.env").write_text("VLLM_API_KEY=other\n")
    assert store.info(files)["matches"] is False
    assert "secret" not in store.info(files)


def test_a_file_of_ours_the_release_does_not_hold_is_another_release(node):
    _etc, files, store = node
    keep(store, "A", files[1:])  # a node that ran no rank: no vLLM unit in its release
    assert store.info(files[1:])["matches"] is True
    assert store.info(files)["matches"] is False  # now it has one: the release that serves is another
    os.unlink(files[2]["path"])
    assert store.info(files[1:])["matches"] is False  # and one gone


def test_check_mode_predicts_and_writes_nothing(node, tmp_path):
    etc, files, store = node
    keep(store, "A", files)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k2\n")
    keep(store, "B", files)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k3\n")
    snapshot = {path: content(path) for path in (str(p) for p in (tmp_path / "releases").rglob("*") if p.is_file())}
    check = Store(str(tmp_path / "releases"), check_mode=True)
    predicted = keep(check, "C", files)
    assert predicted["changed"] and predicted["removed"] == ["A"] and predicted["index"]["previous"] == "B"
    assert not keep(Store(str(tmp_path / "releases"), check_mode=True), "B", [*files[:1], files[2]])["removed"]
    restored = Store(str(tmp_path / "releases"), check_mode=True).restore("previous")
    assert restored["changed_files"] == [files[1]["path"]] and restored["index"]["current"] == "A"
    assert (etc / "vllm.env").read_text() == "VLLM_API_KEY=k3\n"
    assert {path: content(path) for path in snapshot} == snapshot and sorted(os.listdir(tmp_path / "releases")) == ["A", "B", "index.json"]
    assert keep(store, "C", files) == predicted


# The model's versions, as model_files keeps them: PARENT/.vllmops-versions/NAME/HEX16, a manifest beside each,
# the served path a relative link to one.

def make_version(parent, name, content: bytes):
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    version = parent / ".vllmops-versions" / name / digest[7:23]
    version.mkdir(parents=True)
    (version / "model.safetensors").write_bytes(content)
    manifest = {"schema": "vllmops.model-manifest/1", "digest": digest, "path": str(version), "bytes": len(content),
                "source": {}, "files": {"model.safetensors": {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}}}
    (parent / ".vllmops-versions" / name / f"{digest[7:23]}.vllmops-manifest.json").write_text(json.dumps(manifest))
    return {"path": str(parent / name), "digest": digest, "version": str(version)}


def serve(model):
    path = model["path"]
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(os.path.relpath(model["version"], os.path.dirname(path)), path)


def test_model_versions_no_kept_release_serves_are_pruned(node, tmp_path):
    etc, files, store = node
    models = tmp_path / "models"
    v1, v2, v3 = (make_version(models, "m", content) for content in (b"one" * 1000, b"two" * 1000, b"three" * 1000))
    serve(v1)
    first = keep(store, "A", files, record={"model": v1}, model_path=v1["path"])
    # v2 and v3 are waiting to serve: a version is pruned only once no kept release serves it and it is not served.
    assert first["pruned_versions"] == sorted([v2["version"], v3["version"]]) and first["freed_bytes"] == 3000 + 5000
    v2, v3 = make_version(models, "m", b"two" * 1000), make_version(models, "m", b"three" * 1000)
    serve(v2)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k2\n")
    second = keep(store, "B", files, record={"model": v2}, model_path=v2["path"])
    assert second["pruned_versions"] == [v3["version"]] and os.path.isdir(v1["version"])  # A is the previous
    v3 = make_version(models, "m", b"three" * 1000)
    serve(v3)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k3\n")
    predicted = keep(Store(store.root, check_mode=True), "C", files, record={"model": v3}, model_path=v3["path"])
    third = keep(store, "C", files, record={"model": v3}, model_path=v3["path"])
    assert third["removed"] == ["A"] and third["pruned_versions"] == [v1["version"]] and third["freed_bytes"] == 3000
    assert (predicted["pruned_versions"], predicted["freed_bytes"]) == (third["pruned_versions"], third["freed_bytes"])
    assert not os.path.exists(v1["version"]) and os.path.isdir(v2["version"]) and os.path.isdir(v3["version"])
    assert not keep(store, "C", files, record={"model": v3}, model_path=v3["path"])["changed"]


def test_restore_serves_the_release_s_model_version_again(node, tmp_path):
    etc, files, store = node
    models = tmp_path / "models"
    v1 = make_version(models, "m", b"one")
    serve(v1)
    keep(store, "A", files, record={"model": v1}, model_path=v1["path"])
    v2 = make_version(models, "m", b"two")  # the next release's version, staged beside the one served
    serve(v2)
    (etc / "vllm.env").write_text("VLLM_API_KEY=k2\n")
    keep(store, "B", files, record={"model": v2}, model_path=v2["path"])
    assert Store(store.root, check_mode=True).restore("previous", model_path=v1["path"])["model_changed"]
    assert os.path.realpath(v1["path"]) == v2["version"]
    restored = store.restore("previous", model_path=v1["path"])
    assert restored["model_changed"] and os.path.realpath(v1["path"]) == v1["version"]
    assert not os.path.isabs(os.readlink(v1["path"]))  # relative: it resolves inside a container mounting the parent
    assert not store.restore("previous", model_path=v1["path"])["model_changed"]
    assert store.link(v1["path"], v2["version"]) and not store.link(v1["path"], v2["version"])


# The layout before releases: /etc/vllmops/last-good and /etc/vllmops/previous.

@pytest.fixture()
def legacy(tmp_path):
    live = tmp_path / "live"
    files = {"vllmops-vllm.service": {"path": str(live / "vllmops-vllm.service"), "mode": "0644"},
             "vllm.env": {"path": str(live / "vllm.env"), "mode": "0600"},
             "cluster.env": {"path": str(live / "cluster.env"), "mode": "0644"},
             "vllmops-ray-head.service": {"path": str(live / "vllmops-ray-head.service"), "mode": "0644"},
             "vllmops-ray-worker.service": {"path": str(live / "vllmops-ray-worker.service"), "mode": "0644"}}
    dirs = {"last_good": tmp_path / "last-good", "previous": tmp_path / "previous"}
    return {"last_good": str(dirs["last_good"]), "previous": str(dirs["previous"]), "files": files, "api_port": 8000}, dirs


def fill(directory, files):
    directory.mkdir()
    for name, content in files.items():
        (directory / name).write_text(content)


def test_migration_with_member_json(legacy, tmp_path):
    options, dirs = legacy
    member = {"rank": 1, "runs_vllm": True, "serves_http": False, "ray_unit": "vllmops-ray-worker", "address": "10.0.0.2",
              "gpus": 1, "api_port": 8000, "image_id": "sha256:local", "image_content_id": "sha256:content"}
    fill(dirs["last_good"], {"vllmops-vllm.service": "unit-b\n", "vllm.env": "KEY=b\n", "cluster.env": "IP=2\n", "vllmops-ray-worker.service": "ray\n",
         "member.json": json.dumps(member), "plan.json": '{"head": "n1"}'})
    (dirs["last_good"] / "stray.txt").write_text("not named: left out")
    fill(dirs["previous"], {"vllmops-vllm.service": "unit-a\n", "vllm.env": "KEY=a\n", "member.json": json.dumps({**member, "image_id": "sha256:old"})})
    store = Store(str(tmp_path / "releases"))
    result = store.migrate(options, "node-2")
    assert result == {"migrated": ["legacy-last-good", "legacy-previous"], "removed": [options["last_good"], options["previous"]],
                      "warnings": [], "changed": True}
    assert not dirs["last_good"].exists() and not dirs["previous"].exists()
    assert store.index() == {"schema": release.INDEX_SCHEMA, "current": "legacy-last-good", "last_good": "legacy-last-good",
                             "previous": "legacy-previous"}
    record = store.read("legacy-last-good")
    assert record["member"] == member and record["plan"] == {"head": "n1"} and record["model"] is None and record["node"] == "node-2"
    assert record["image"] == {"content_id": "sha256:content", "local_id": "sha256:local"}
    assert [(f["name"], f["path"], f["mode"]) for f in record["files"]] == [
        (name, options["files"][name]["path"], options["files"][name]["mode"])
        for name in ("cluster.env", "vllm.env", "vllmops-ray-worker.service", "vllmops-vllm.service")]
    assert store.read("legacy-previous")["image"]["local_id"] == "sha256:old" and store.read("legacy-previous")["plan"] is None
    # What was kept goes back where it served from.
    restored = store.restore("last_good")
    assert sorted(restored["changed_files"]) == sorted(f["path"] for f in record["files"])
    assert content(options["files"]["vllm.env"]["path"]) == b"KEY=b\n" and mode(options["files"]["vllm.env"]["path"]) == 0o600
    assert store.migrate(options, "node-2") == {"migrated": [], "removed": [], "warnings": [], "changed": False}


def test_migration_without_member_json_a_vllm_unit_was_rank_0(legacy, tmp_path):
    options, dirs = legacy
    fill(dirs["last_good"], {"vllmops-vllm.service": "unit\n", "vllm.env": "KEY=a\n"})
    store = Store(str(tmp_path / "releases"))
    assert store.migrate(options, "head")["migrated"] == ["legacy-last-good"]
    record = store.read("legacy-last-good")
    assert record["member"] == {"rank": 0, "runs_vllm": True, "serves_http": True, "api_port": 8000}
    assert record["image"] == {"content_id": None, "local_id": None}
    assert store.index()["previous"] is None and store.index()["current"] == "legacy-last-good"


def test_migration_of_a_node_that_ran_no_rank(legacy, tmp_path):
    options, dirs = legacy
    fill(dirs["last_good"], {"cluster.env": "IP=3\n"})
    dirs["previous"].mkdir()  # a swap left an empty directory where the node was not a member
    store = Store(str(tmp_path / "releases"))
    store.migrate(options, "node-3")
    assert store.read("legacy-last-good")["member"] == {"runs_vllm": False, "serves_http": False}
    assert [f["name"] for f in store.read("legacy-last-good")["files"]] == ["cluster.env"]
    assert store.read("legacy-previous")["files"] == [] and store.index()["previous"] == "legacy-previous"


def test_migration_in_check_mode_writes_nothing_and_what_follows_sees_it(legacy, tmp_path):
    options, dirs = legacy
    fill(dirs["last_good"], {"vllmops-vllm.service": "unit\n", "vllm.env": "KEY=a\n"})
    check = Store(str(tmp_path / "releases"), check_mode=True)
    assert check.migrate(options, "head")["changed"]
    assert check.info()["records"]["last_good"]["id"] == "legacy-last-good"
    assert check.restore("last_good")["changed_files"] == [options["files"]["vllm.env"]["path"], options["files"]["vllmops-vllm.service"]["path"]]
    assert not (tmp_path / "releases").exists() and dirs["last_good"].is_dir()


def test_an_interrupted_migration_is_finished(legacy, tmp_path):
    options, dirs = legacy
    fill(dirs["last_good"], {"vllmops-vllm.service": "unit\n", "vllm.env": "KEY=a\n"})
    copy = tmp_path / "copy"
    shutil.copytree(dirs["last_good"], copy)
    store = Store(str(tmp_path / "releases"))
    store.migrate(options, "head")
    shutil.copytree(copy, dirs["last_good"])  # as if the run stopped before the legacy directory was removed
    result = store.migrate(options, "head")
    assert result["migrated"] == [] and result["removed"] == [options["last_good"]] and result["warnings"] == []
    assert not dirs["last_good"].exists()


def test_an_index_naming_other_releases_is_never_overwritten_by_a_migration(legacy, node, tmp_path):
    options, dirs = legacy
    _, files, store = node
    keep(store, "r1", files)
    fill(dirs["last_good"], {"vllmops-vllm.service": "unit\n"})
    result = store.migrate(options, "head")
    assert not result["changed"] and "remain beside the release index" in result["warnings"][0]
    assert store.index()["last_good"] == "r1" and dirs["last_good"].is_dir() and not store.exists("legacy-last-good")


def test_nothing_to_migrate_changes_nothing(legacy, tmp_path):
    options, _ = legacy
    assert release.migrate(str(tmp_path / "releases"), options, "head") == {"migrated": [], "removed": [], "warnings": [], "changed": False}
    assert not (tmp_path / "releases").exists()


def test_the_migrated_last_working_release_serves_the_model_version_its_path_points_at(legacy, tmp_path):
    """The model role made the served directory a version in the same run, before the migration: the last working
    configuration served it, so a rollback to it flips the served path back to it."""
    options, dirs = legacy
    model = make_version(tmp_path / "models", "m", b"old" * 1000)
    serve(model)
    fill(dirs["last_good"], {"vllmops-vllm.service": "unit\n", "member.json": json.dumps({"rank": 0, "runs_vllm": True, "serves_http": True}),
                             "plan.json": json.dumps({"model_path": model["path"]})})
    store = Store(str(tmp_path / "releases"))
    store.migrate(options, "node-1")
    assert store.read("legacy-last-good")["model"] == model
    newer = make_version(tmp_path / "models", "m", b"new" * 1000)
    serve(newer)
    assert store.restore("last_good")["model_changed"] is True
    assert os.path.realpath(model["path"]) == model["version"]
