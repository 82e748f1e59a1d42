"""The hub's file listing is data from the network: every name it gives passes model_files.safe_name before a path
is built from it (issue 38: a hostile model_hub_endpoint must not make the download host remove any file)."""

import json

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import ContainerRun
from ansible_collections.vllmops.cluster.plugins.module_utils.model_hub import Hub, HubError

ENDPOINT = "http://hub.invalid"


class ListingEngine:
    """DockerClient.run() of the hub client as a hostile hub would make it end: it says it listed `files`."""

    def __init__(self, files):
        self.files = files

    def run(self, image, entrypoint, cmd, timeout, name=None, labels=None, device_requests=None, env=None,
            host_config=None):
        return ContainerRun(0, json.dumps({"sha": "a" * 40, "files": self.files}).encode() + b"\n", b"", False)


def hostile_names(victim):
    return [str(victim), "../../../victim", "ok/../../../../victim", ""]


@pytest.mark.parametrize("index", range(4))
def test_a_listing_that_names_a_file_outside_the_model_removes_nothing(tmp_path, index):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "models" / "m"  # its staging directory: models/.vllmops-staging/m, three levels below
    name = hostile_names(victim)[index]
    listing = [{"name": "config.json", "size": 2, "sha256": None, "blob_id": None},
               {"name": name, "size": 999, "sha256": None, "blob_id": "0" * 40}]
    hub = Hub(ListingEngine(listing), "image", ENDPOINT)
    with pytest.raises(HubError, match=rf"{ENDPOINT} lists for org/model at r1 a file outside the model's directory, so "
                                       rf"its listing was refused and nothing was removed: refusing the file name"):
        hub.download("org/model", "r1", str(target))
    assert victim.read_text() == "keep"
    assert not target.exists()
    with pytest.raises(HubError, match="a file outside the model's directory"):
        hub.info("org/model", "r1")


def test_a_listing_inside_the_model_is_kept_as_the_hub_gave_it():
    listing = [{"name": "config.json", "size": 2, "sha256": None, "blob_id": "b"},
               {"name": "sub/model.safetensors", "size": 9, "sha256": "c" * 64, "blob_id": "d"}]
    commit, files = Hub(ListingEngine(listing), "image", ENDPOINT).info("org/model", "r1")
    assert commit == "a" * 40
    assert files == {entry["name"]: entry for entry in listing}
    assert list(files) == [model_files.safe_name(name) for name in files]
