"""The Grafana dashboard the metrics role ships (roles/metrics/files/grafana-dashboard-vllm.json): a well-formed
dashboard whose panels query only series vLLM, node_exporter 1.5 and the DCGM exporter really export, each one
scoped to the dashboard's data source and cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DASHBOARD = Path(__file__).resolve().parents[3] / "roles" / "metrics" / "files" / "grafana-dashboard-vllm.json"

# Exactly the vllm: series the dashboard is built on (names as vLLM exports them).
VLLM_METRICS = {
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:request_queue_time_seconds_bucket",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
}
NODE_METRICS = {
    "node_cpu_seconds_total",
    "node_memory_MemAvailable_bytes",
    "node_network_receive_bytes_total",
    "node_network_transmit_bytes_total",
}
DCGM_METRICS = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}

METRIC = re.compile(r"(?<![\w:])(vllm:[A-Za-z0-9_:]+|node_[A-Za-z0-9_]+|DCGM_[A-Za-z0-9_]+)")
# A metric name and the label matchers right after it, if any.
SELECTOR = re.compile(r"(?<![\w:])((?:vllm:|node_|DCGM_)[A-Za-z0-9_:]*)(\{[^}]*\})?")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dashboard():
    return json.loads(DASHBOARD.read_text())


def all_panels(dashboard):
    """Every panel, rows included, and the panels of collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def data_panels(dashboard):
    return [panel for panel in all_panels(dashboard) if panel["type"] != "row"]


def exprs(dashboard):
    return [target["expr"] for panel in data_panels(dashboard) for target in panel["targets"] if target.get("expr")]


def test_dashboard_model(dashboard):
    assert dashboard["schemaVersion"] == 39
    assert dashboard["title"] == "vLLM (vllmops.cluster)"
    assert dashboard["uid"] == "vllmops-vllm"
    assert dashboard["tags"] == ["vllm", "vllmops"]
    assert dashboard["time"] == {"from": "now-1h", "to": "now"}
    assert dashboard["refresh"] == "30s"
    assert dashboard["editable"] is True
    assert "playbooks/metrics.yml" in dashboard["description"]


def test_file_is_indented_with_stable_key_order():
    text = DASHBOARD.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_template_variables(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert set(variables) == {"datasource", "cluster", "model_name"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["cluster"]["type"] == "query"
    assert variables["cluster"]["query"] == "label_values(vllm:num_requests_running, cluster)"
    assert variables["cluster"]["datasource"] == DATASOURCE
    assert variables["model_name"]["type"] == "query"
    assert variables["model_name"]["query"] == 'label_values(vllm:num_requests_running{cluster="$cluster"}, model_name)'
    assert variables["model_name"]["datasource"] == DATASOURCE


def test_panel_ids_are_unique(dashboard):
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), ids


def test_every_panel_uses_the_datasource_variable_and_has_a_query(dashboard):
    panels = data_panels(dashboard)
    assert panels
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert any(target.get("expr") for target in panel["targets"]), panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", DATASOURCE) == DATASOURCE, panel["title"]


def test_panels_fit_the_grid(dashboard):
    for panel in all_panels(dashboard):
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["h"] > 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]


def test_vllm_metrics_are_exactly_the_known_ones(dashboard):
    used = {name for expr in exprs(dashboard) for name in METRIC.findall(expr)}
    vllm = {name for name in used if name.startswith("vllm:")}
    assert vllm <= VLLM_METRICS, vllm - VLLM_METRICS
    assert not VLLM_METRICS - vllm, f"unused: {VLLM_METRICS - vllm}"


def test_exporter_metrics_are_known(dashboard):
    used = {name for expr in exprs(dashboard) for name in METRIC.findall(expr)}
    assert {name for name in used if name.startswith("node_")} <= NODE_METRICS
    assert {name for name in used if name.startswith("DCGM_")} <= DCGM_METRICS


def test_every_selector_is_scoped_to_the_cluster(dashboard):
    selectors = [match.groups() for expr in exprs(dashboard) for match in SELECTOR.finditer(expr)]
    assert selectors
    for name, matchers in selectors:
        assert matchers and 'cluster="$cluster"' in matchers, name
        if name.startswith("vllm:"):
            assert 'model_name=~"$model_name"' in matchers, name
        elif name.startswith("node_"):
            assert 'job="node"' in matchers, name
        else:
            assert 'job="dcgm"' in matchers, name
