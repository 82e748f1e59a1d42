"""An image's content ID: equal on every image store, different when the content differs.

The inspects are recorded from real engines (tests/fixtures/image_identity/inspects.json says how)."""

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import (
    config_content_id,
    content_id,
    short_id,
)

RECORDED = json.loads((Path(__file__).parents[3] / "fixtures/image_identity/inspects.json").read_text())
INSPECTS = RECORDED["inspects"]
ENGINES = ("docker-20.10", "docker-26-classic", "docker-26-containerd")


@pytest.mark.parametrize("image", sorted(INSPECTS))
def test_the_same_image_has_one_content_id_on_every_store_but_not_one_docker_id(image):
    found = INSPECTS[image]
    assert {content_id(found[engine]) for engine in ENGINES} == {content_id(found["docker-20.10"])}
    # What the issue is about: the containerd store's ID is the manifest's digest, not the config's.
    assert found["docker-26-containerd"]["Id"] != found["docker-20.10"]["Id"]
    assert found["docker-26-classic"]["Id"] == found["docker-20.10"]["Id"]


def test_content_that_differs_has_another_content_id():
    # b: one more layer; env, ep, cmd, label: another Env, Entrypoint, Cmd, Labels than a.
    ids = {name: content_id(INSPECTS[name]["docker-26-containerd"]) for name in ("a", "b", "env", "ep", "cmd", "label")}
    assert len(set(ids.values())) == len(ids)


def test_what_the_stores_show_differently_is_left_out():
    classic, containerd = INSPECTS["a"]["docker-20.10"], INSPECTS["a"]["docker-26-containerd"]
    assert classic["Config"]["Image"].startswith("sha256:") and containerd["Config"]["Image"] == ""
    assert classic["DockerVersion"] != containerd["DockerVersion"]
    assert classic["RepoDigests"] == [] and containerd["RepoDigests"]


def test_the_same_build_on_two_engines_is_the_same_content():
    # full's Dockerfile built on 20.10 and again on the containerd store: other creation time, other Docker IDs.
    built_twice = INSPECTS["full"]["docker-20.10"], INSPECTS["ctrdbuilt"]["docker-26-containerd"]
    assert built_twice[0]["Created"] != built_twice[1]["Created"]
    assert content_id(built_twice[0]) == content_id(built_twice[1])


@pytest.mark.parametrize("image", sorted(RECORDED["configs"]))
def test_an_archives_config_blob_gives_the_loaded_images_content_id(image):
    for blob in RECORDED["configs"][image].values():
        assert config_content_id(blob) == content_id(INSPECTS[image]["docker-26-containerd"])


def _changed(path, value):
    inspect = copy.deepcopy(INSPECTS["full"]["docker-26-classic"])
    target = inspect
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return inspect


@pytest.mark.parametrize(("path", "value"), [
    (("Config", "Env"), ["PATH=/usr/bin:/bin", "A=2"]),
    (("Config", "Env"), ["A=1", "PATH=/usr/bin:/bin"]),  # the order decides which of two equal keys wins
    (("Config", "Entrypoint"), ["/bin/bash", "-c"]),
    (("Config", "Cmd"), ["false"]),
    (("Config", "Labels"), {"a": "b"}),
    (("Config", "User"), "0"),
    (("Config", "WorkingDir"), "/srv"),
    (("Config", "ExposedPorts"), {"8000/tcp": {}}),
    (("Config", "Volumes"), {"/data": {}, "/more": {}}),
    (("Config", "StopSignal"), "SIGTERM"),
    (("Config", "Healthcheck"), {"Test": ["NONE"]}),
    (("Config", "Shell"), ["/bin/sh", "-c"]),
    (("Architecture",), "arm64"),
    (("Variant",), "v8"),
    (("RootFS", "Layers"), ["sha256:" + "0" * 64]),
])
def test_any_change_to_what_runs_changes_the_content_id(path, value):
    assert content_id(_changed(path, value)) != content_id(INSPECTS["full"]["docker-26-classic"])


@pytest.mark.parametrize(("path", "value"), [
    (("Id",), "sha256:" + "1" * 64),
    (("RepoDigests",), ["x@sha256:" + "2" * 64]),
    (("Created",), "2020-01-01T00:00:00Z"),
    (("Size",), 1),
    (("GraphDriver",), {"Name": "overlayfs", "Data": None}),
    (("Config", "Image"), "sha256:" + "3" * 64),
    (("Config", "Hostname"), None),  # container fields an engine may leave out
    (("Config", "Labels"), None),  # full has labels: absent here only to show none == null == {}
])
def test_what_is_the_engines_not_the_images_does_not(path, value):
    found = content_id(_changed(path, value))
    if path == ("Config", "Labels"):
        assert found == content_id(_changed(path, {}))
    else:
        assert found == content_id(INSPECTS["full"]["docker-26-classic"])


def test_without_a_layer_list_there_is_no_content_id():
    assert content_id(None) is None
    assert content_id({"Id": "sha256:abc", "Config": {}}) is None
    assert config_content_id({}) is None
    assert short_id("sha256:" + "a" * 64) == "sha256:aaaaaaaaaaaa"
    assert short_id(None) == ""
