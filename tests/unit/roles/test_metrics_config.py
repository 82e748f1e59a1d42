"""The metrics role's scrape configuration (roles/metrics/templates/prometheus.yml.j2), rendered as Ansible renders
it (trim_blocks): one service as before, one head target; several services (the plan's vllmops_fleet) one target per
replica - through the API proxy at the replica's own path /metrics/SERVICE/INDEX (roles/api_proxy's nginx.conf),
or at the replica itself without a proxy - labelled with its service, replica and head. promtool (Debian's
prometheus package, tests/sandbox/prometheus.py) checks each when it is here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "metrics"
PROMTOOL_CACHE = Path.home() / ".cache/vllmops/prometheus/root/usr/bin/promtool"
PROXY = ("203.0.113.10", 8443)  # the head's ansible_host and the proxy's port
HOSTS = {"spark1": "203.0.113.10", "spark2": "203.0.113.11", "spark3": "203.0.113.12"}


def _replica(service: str, index: int, head: str, address: str, port: int) -> dict:
    return {"index": index, "id": f"{service}-{index}", "port": port, "head": head, "head_address": address,
            "nodes": [head], "units": []}


# Two services as the plan publishes them: qwen's two replicas on two heads, coder's one spanning two nodes.
FLEET = {"services": [
    {"name": "qwen", "replicas": [_replica("qwen", 0, "spark1", "10.0.0.1", 8100),
                                  _replica("qwen", 1, "spark2", "10.0.0.2", 8100)]},
    {"name": "coder", "replicas": [dict(_replica("coder", 0, "spark3", "fd00::3", 8101), nodes=["spark3", "spark1"])]},
]}


def _render(**variables) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), trim_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(bool=lambda value: str(value).lower() in ("true", "yes", "1"), to_json=json.dumps)
    values = {"vllmops_cluster_name": "spark", "metrics_scrape_interval": "15s", "vllmops_api_proxy": True,
              "_metrics_with_ca": True, "_metrics_api_host": PROXY[0], "_metrics_api_port": PROXY[1],
              "vllmops_head_host": "spark1", "_metrics_exporters": [["node", 9100]], "ansible_play_hosts_all": list(HOSTS),
              "hostvars": {host: {"ansible_host": address} for host, address in HOSTS.items()}, **variables}
    return env.get_template("prometheus.yml.j2").render(**values)


def _vllm_targets(text: str) -> list[tuple[list[str], dict]]:
    (job,) = [job for job in yaml.safe_load(text)["scrape_configs"] if job["job_name"] == "vllm"]
    return [(config["targets"], config["labels"]) for config in job["static_configs"]]


def _promtool() -> str | None:
    return shutil.which("promtool") or (str(PROMTOOL_CACHE) if PROMTOOL_CACHE.is_file() else None)


def test_one_service_keeps_its_one_target_on_the_head():
    text = _render()
    assert _vllm_targets(text) == [(["203.0.113.10:8443"], {"cluster": "spark", "node": "spark1"})]
    assert "__metrics_path__" not in text and "service" not in text


def test_several_services_give_one_target_per_replica_at_its_path_through_the_proxy():
    text = _render(vllmops_fleet=FLEET)
    assert _vllm_targets(text) == [
        (["203.0.113.10:8443"], {"__metrics_path__": "/metrics/qwen/0", "cluster": "spark", "service": "qwen",
                                 "replica": "qwen-0", "node": "spark1", "instance": "10.0.0.1:8100"}),
        (["203.0.113.10:8443"], {"__metrics_path__": "/metrics/qwen/1", "cluster": "spark", "service": "qwen",
                                 "replica": "qwen-1", "node": "spark2", "instance": "10.0.0.2:8100"}),
        (["203.0.113.10:8443"], {"__metrics_path__": "/metrics/coder/0", "cluster": "spark", "service": "coder",
                                 "replica": "coder-0", "node": "spark3", "instance": "[fd00::3]:8101"}),
    ]
    (job,) = [job for job in yaml.safe_load(text)["scrape_configs"] if job["job_name"] == "vllm"]
    assert job["scheme"] == "https" and job["authorization"]["credentials_file"] == "api-key"
    assert job["tls_config"] == {"ca_file": "api-ca.crt"}


def test_without_the_proxy_each_replica_is_scraped_where_it_listens():
    text = _render(vllmops_fleet=FLEET, vllmops_api_proxy=False, _metrics_with_ca=False)
    targets = _vllm_targets(text)
    assert [(target, labels["__metrics_path__"], labels["replica"]) for target, labels in targets] == [
        (["10.0.0.1:8100"], "/metrics", "qwen-0"), (["10.0.0.2:8100"], "/metrics", "qwen-1"),
        (["[fd00::3]:8101"], "/metrics", "coder-0")]
    (job,) = [job for job in yaml.safe_load(text)["scrape_configs"] if job["job_name"] == "vllm"]
    assert job["scheme"] == "http" and "authorization" not in job


def test_the_path_index_is_the_replica_s_place_in_the_proxy_s_upstreams():
    """A replica the plan knows no address of has no upstream (fleet.upstreams leaves it out), so no target; the
    replicas after it are the proxy's INDEX one lower - each path names the replica the proxy sends it to."""
    fleet = {"services": [{"name": "qwen", "replicas": [_replica("qwen", 0, "spark1", "", 8100),
                                                        _replica("qwen", 1, "spark2", "10.0.0.2", 8100)]}]}
    assert [(labels["__metrics_path__"], labels["replica"]) for _, labels in _vllm_targets(_render(vllmops_fleet=fleet))] == [
        ("/metrics/qwen/0", "qwen-1")]


def test_the_exporters_jobs_do_not_change_with_services():
    def exporters(text: str) -> list[dict]:
        return [job for job in yaml.safe_load(text)["scrape_configs"] if job["job_name"] != "vllm"]

    assert exporters(_render(vllmops_fleet=FLEET)) == exporters(_render()) == [
        {"job_name": "node", "static_configs": [{"targets": [f"{address}:9100"], "labels": {"cluster": "spark", "node": host}}
                                                for host, address in HOSTS.items()]}]


@pytest.mark.parametrize("variables", [
    pytest.param({}, id="one service"),
    pytest.param({"vllmops_fleet": FLEET}, id="services through the proxy"),
    pytest.param({"vllmops_fleet": FLEET, "vllmops_api_proxy": False, "_metrics_with_ca": False}, id="services, no proxy"),
])
def test_promtool_accepts_it(tmp_path, variables):
    promtool = _promtool()
    if promtool is None:
        pytest.skip("no promtool here (python3 tests/sandbox/prometheus.py bin fetches Debian's)")
    (tmp_path / "prometheus.yml").write_text(_render(**variables))
    (tmp_path / "api-key").write_text("vllmops-metrics-test-0123456789")
    (tmp_path / "api-ca.crt").write_text("")  # promtool checks that the file exists, not what it holds
    proc = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
