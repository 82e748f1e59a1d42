"""The Ray units' command line (roles/ray_cluster/templates/vllmops-ray.service.j2, on the shared unit template):
every port Ray listens on is one the firewall knows. Ray's client server opens whenever the image has grpcio and
cannot be turned off: the head's unit pins it where the plan says it opens; Ray's agents, which pick random ports
up to 65535 otherwise, are pinned on every node."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule

ROOT = Path(__file__).resolve().parents[3]
DEFAULTS = yaml.safe_load((ROOT / "roles/vllmops/defaults/main.yml").read_text())
# the ray_cluster role's own defaults, those that are plain values
RAY = {name: value for name, value in yaml.safe_load((ROOT / "roles/ray_cluster/defaults/main.yml").read_text()).items()
       if "{{" not in str(value)}


def render(role: str, client_server: bool) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([ROOT / "roles/ray_cluster/templates",
                                                             ROOT / "roles/vllmops/templates"]),
                             undefined=jinja2.ChainableUndefined)  # what the test leaves out renders empty
    env.filters.update(FilterModule().filters())  # ansible-core's own: bool, b64decode, from_json, ...
    ports = {name: value for name, value in DEFAULTS.items() if name.startswith("vllmops_ray_") and name.endswith("port")}
    text = env.get_template("vllmops-ray.service.j2").render(
        **RAY, **ports, _ray_cluster_role=role, _ray_cluster_image_id="sha256:abc", _ray_cluster_gpus=1, _ray_cluster_node_ip="10.66.0.2",
        vllmops_unit={"name": "vllmops-ray-head", "image_id": "sha256:abc", "entrypoint": "ray", "env_files": []},
        vllmops_plan={"ports": {"ray": 6379}, "ray": {"address": "10.66.0.2:6379", "token_auth": True,
                                                      "client_server": client_server},
                      "members": {}}, inventory_hostname="node1", vllmops_cluster_env_file="/etc/vllmops/cluster.env")
    return text.replace("\\\n", " ")


def flags(text: str) -> dict[str, str]:
    return dict(re.findall(r"--([a-z-]+)=(\S+)", text.split("ExecStart=", 1)[1].split("ExecStop=", 1)[0]))


@pytest.mark.parametrize("client_server", [True, False], ids=["image with grpcio", "image without"])
def test_the_heads_client_server_is_pinned_where_it_opens(client_server):
    head = flags(render("head", client_server))
    assert head.get("ray-client-server-port") == ("10001" if client_server else None), head
    # without grpcio, Ray refuses the flag ("Ray Client requires pip package ray[client]"), and opens nothing
    assert "ray-client-server-port" not in flags(render("worker", client_server))


@pytest.mark.parametrize("role", ["head", "worker"])
def test_every_port_ray_listens_on_is_pinned_to_one_the_firewall_closes(role):
    pinned = flags(render(role, True))
    assert {name: pinned.get(name) for name in ("node-manager-port", "object-manager-port", "metrics-export-port",
                                                "dashboard-agent-grpc-port", "dashboard-agent-listen-port",
                                                "runtime-env-agent-port")} == {
        "node-manager-port": "6800", "object-manager-port": "6801", "metrics-export-port": "6802",
        "dashboard-agent-grpc-port": "6803", "dashboard-agent-listen-port": "6804", "runtime-env-agent-port": "6805"}
    firewall = yaml.safe_load((ROOT / "roles/firewall/defaults/main.yml").read_text())["firewall_cluster_ports"]
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.filters.update(FilterModule().filters())
    closed = {env.from_string(str(port)).render(**DEFAULTS) for port in firewall}
    for name in ("metrics-export-port", "dashboard-agent-grpc-port", "dashboard-agent-listen-port",
                 "runtime-env-agent-port", *(["ray-client-server-port"] if role == "head" else [])):
        assert pinned[name] in closed, (name, pinned[name], sorted(closed))


def test_a_worker_joins_the_head_at_the_plans_ray_address():
    assert flags(render("worker", False))["address"] == "10.66.0.2:6379"
