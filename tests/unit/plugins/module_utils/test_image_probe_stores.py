"""The probe on both of Docker's image stores: the containerd store's image is read through a created container
(its GraphDriver names no layer directories), and a result cached on one store is found for the same image on
the other. Inspects recorded from real engines (tests/fixtures/image_identity/inspects.json)."""

import json
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient
from ansible_collections.vllmops.cluster.plugins.module_utils.image_files import ImageFilesError, OverlayLayers
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.cache import write_cache
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.probe import (
    PROBE_VERSION,
    ProbeError,
    open_image_files,
    probe_image,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.summary import summarize_image

RECORDED = json.loads((Path(__file__).parents[3] / "fixtures/image_identity/inspects.json").read_text())
CLASSIC = RECORDED["inspects"]["a"]["docker-20.10"]
CONTAINERD = RECORDED["inspects"]["a"]["docker-26-containerd"]


class _Docker:
    """Just enough of DockerClient for CreatedContainer."""

    def __init__(self):
        self.created = []

    def container_create(self, image, **_kwargs):
        self.created.append(image)
        return "c0ffee"

    def container_remove(self, _container):
        pass


def test_the_containerd_stores_graph_driver_is_refused_by_the_overlay_reader():
    assert CONTAINERD["GraphDriver"] == {"Name": "overlayfs", "Data": None}
    with pytest.raises(ImageFilesError, match=r"'overlayfs' \(the containerd image store\), not overlay2"):
        OverlayLayers.from_graph_driver(CONTAINERD["GraphDriver"])


def test_auto_reads_the_containerd_stores_image_through_a_created_container_of_its_local_id():
    docker = _Docker()
    files, backend = open_image_files(docker, CONTAINERD, "auto")
    assert backend == "container"
    assert docker.created == [CONTAINERD["Id"]]
    files.close()


def test_overlay2_asked_for_on_the_containerd_store_says_why_not():
    with pytest.raises(ProbeError, match="cannot read the image's layers directly: storage driver is 'overlayfs'"):
        open_image_files(_Docker(), CONTAINERD, "overlay2")


def test_a_result_cached_on_the_classic_store_serves_the_same_image_on_the_containerd_store(engine, tmp_path):
    engine.route("GET", "/images/vllmops-ident/img:a/json", lambda req: req.json(200, CONTAINERD))
    classic = summarize_image(CLASSIC)
    write_cache(str(tmp_path), classic["content_id"], PROBE_VERSION, {"vllm": None, "python": None, "notes": ["x"]})
    result = probe_image(DockerClient(engine.host), "vllmops-ident/img:a", cache_directory=str(tmp_path))
    assert result["cached"] is True and result["notes"] == ["x"]
    assert result["image"]["id"] == CONTAINERD["Id"] != CLASSIC["Id"]
    assert result["image"]["content_id"] == classic["content_id"]
    assert [path for _method, path, _query, _body in engine.requests] == ["/images/vllmops-ident/img:a/json"]
