"""How fast the served model is and how it is watched, on the converged sandbox
(real vLLM): playbooks/benchmark.yml runs the image's own `vllm bench serve`
through the API proxy and compares with its previous run; playbooks/metrics.yml
writes a scrape configuration that a real Prometheus (Debian's package,
tests/sandbox/prometheus.py) scrapes vLLM, the node exporters and the DCGM
exporters with; the dashboard's series exist; status.yml's JSON matches its
schema."""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import subprocess
import sys
import time

import jsonschema
import yaml
from conftest import BIN, INVENTORY, ROOT
from prometheus import Prometheus, ensure

sys.path.insert(0, str(ROOT / "tests/sandbox/gpu"))
import dcgm_image

SMALL = {"benchmark_input_len": 32, "benchmark_output_len": 16, "benchmark_prompts_per_client": 2}


def _play(playbook: str, extra: dict, *args: str, path: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{path}{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), playbook, "-i", str(INVENTORY), "-e", json.dumps(extra), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(f"{playbook}: rc {proc.returncode} in {time.monotonic() - started:.1f} s")
    print(proc.stdout[-5000:], proc.stderr[-2000:])
    return proc


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_the_benchmark_sweeps_through_the_proxy_and_compares_with_the_last_run(sandbox, tmp_path):
    results = tmp_path / "results"
    first = _play("playbooks/benchmark.yml", {**SMALL, "benchmark_results_dir": str(results)}, "-v")
    assert first.returncode == 0, first.stdout[-3000:]
    assert sandbox.client.key not in first.stdout + first.stderr  # the key reached the client in a 0600 file only

    (report,) = results.glob("*.json")
    document = json.loads(report.read_text())
    rows = document["rows"]
    assert [row["concurrency"] for row in rows] == [1, 4, 16]
    for row in rows:
        assert row["completed"] == row["prompts"] == max(8, 2 * row["concurrency"]) and row["failed"] == 0, row
        assert row["output_tok_s"] > 0 and row["request_s"] > 0, row
        assert 0 < row["ttft_median_ms"] <= row["ttft_p99_ms"], row
        assert row["output_tokens"] == row["completed"] * 16, row  # --ignore-eos: every answer has the length
    stamp = document["stamp"]
    served_image = sandbox.on(sandbox.head, "docker", "inspect", "--format", "{{.Image}}", "vllmops-vllm")
    assert stamp["image_id"] == served_image
    assert stamp["vllm_version"].startswith("0.32.0") and stamp["backend"] == "mp"
    assert stamp["nodes"] == sandbox.nodes and stamp["model"] == "tiny-sandbox"
    assert stamp["url"].startswith("https://")  # through the proxy
    assert stamp["serve_args"][:2] == ["serve", "/srv/models/sandbox-tiny"] and "--max-model-len" in stamp["serve_args"]
    width, height = _png_size(report.with_suffix(".png"))
    assert width >= 600 and height >= 300
    assert "No earlier result" in report.with_suffix(".md").read_text()

    second = _play("playbooks/benchmark.yml", {**SMALL, "benchmark_results_dir": str(results),
                                                "benchmark_concurrency": [1], "benchmark_label": "again"})
    assert second.returncode == 0, second.stdout[-3000:]
    newest = max(results.glob("*.md"), key=lambda path: path.name)
    table = newest.read_text()
    assert f"against {report.name}" in table, table
    row_one = next(line for line in table.splitlines() if line.startswith("| 1 |"))
    assert re.search(r"\([+-]\d+ %\)", row_one), row_one  # the change against the first run
    assert len(list(results.glob("*.png"))) == 2
    assert json.loads(newest.with_suffix(".json").read_text())["stamp"]["label"] == "again"
    # nothing of the client is left on the head
    assert sandbox.on(sandbox.head, "ls", "/run/vllmops/benchmark", check=False) == ""
    assert sandbox.on(sandbox.head, "docker", "ps", "-aq", "--filter", "name=vllmops-benchmark") == ""


def test_a_load_that_does_not_fit_the_context_is_refused_before_it_runs(sandbox, tmp_path):
    results = tmp_path / "results"
    run = _play("playbooks/benchmark.yml", {"benchmark_input_len": 250, "benchmark_output_len": 16,
                                            "benchmark_results_dir": str(results)})
    assert run.returncode != 0
    assert "exceed the 256 tokens tiny-sandbox is served with" in run.stdout
    assert not results.exists()


def test_a_second_run_on_the_same_node_is_refused_and_the_first_keeps_its_files(sandbox, tmp_path):
    sandbox.on(sandbox.head, "mkdir", "-m", "0700", "-p", "/run/vllmops/benchmark")  # a run in progress holds it
    sandbox.on(sandbox.head, "touch", "/run/vllmops/benchmark/c1.json")
    try:
        run = _play("playbooks/benchmark.yml", {**SMALL, "benchmark_results_dir": str(tmp_path / "results")})
        assert run.returncode != 0
        assert f"Another benchmark runs on {sandbox.head}" in run.stdout, run.stdout[-3000:]
        assert sandbox.on(sandbox.head, "ls", "/run/vllmops/benchmark") == "c1.json"  # the other run's files stay
        assert not (tmp_path / "results").exists()
    finally:
        sandbox.on(sandbox.head, "rm", "-rf", "/run/vllmops/benchmark")


def test_a_level_whose_client_fails_is_reported_and_fails_the_run(sandbox, tmp_path):
    results = tmp_path / "results"
    run = _play("playbooks/benchmark.yml", {**SMALL, "benchmark_results_dir": str(results), "benchmark_concurrency": [1],
                                            "benchmark_extra_args": ["--no-such-flag"]})
    assert run.returncode != 0
    assert "The benchmark failed at concurrency 1: vllm bench serve exited 2" in run.stdout
    (report,) = results.glob("*.json")  # written all the same, with what failed
    document = json.loads(report.read_text())
    assert document["rows"] == [] and "unrecognized arguments: --no-such-flag" in document["problems"][0]
    assert sandbox.on(sandbox.head, "ls", "/run/vllmops/benchmark", check=False) == ""  # the lock is released


def _dashboard_metrics() -> set[str]:
    dashboard = json.loads((ROOT / "roles/metrics/files/grafana-dashboard-vllm.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    names = set()
    for expr in exprs:
        names |= set(re.findall(r"\b((?:vllm:|node_)[A-Za-z0-9_:]+)", expr))
    return names


def test_prometheus_scrapes_vllm_and_the_node_exporters_with_the_generated_configuration(sandbox, tmp_path):
    bin_dir = ensure()
    config_dir = tmp_path / "metrics"
    run = _play("playbooks/metrics.yml", {"metrics_config_dir": str(config_dir), "metrics_scrape_interval": "2s"},
                path=f"{bin_dir}:")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "checked with promtool" in run.stdout
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    key_file = config_dir / "api-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and key_file.read_text() == sandbox.client.key
    assert sandbox.client.key not in (config_dir / "prometheus.yml").read_text()

    with Prometheus(config_dir / "prometheus.yml") as prometheus:
        up = prometheus.wait('up{cluster="sandbox"}', count=1 + len(sandbox.nodes))
        assert {(s["metric"]["job"], s["metric"]["node"]) for s in up} == {
            ("vllm", sandbox.head), *(("node", node) for node in sandbox.nodes)}
        assert all(s["value"][1] == "1" for s in up), up
        sandbox.complete()  # a request, so that the latency histograms have counts
        time.sleep(3)
        missing = [name for name in sorted(_dashboard_metrics())
                   if not prometheus.query(f'count({{__name__="{name}", cluster="sandbox"}})')]
        assert not missing, f"the dashboard reads series Prometheus does not have: {missing}"
        served = prometheus.query('vllm:num_requests_running{cluster="sandbox"}')
        assert {s["metric"]["model_name"] for s in served} == {"tiny-sandbox"}


def test_status_json_follows_its_schema(sandbox, tmp_path):
    out = tmp_path / "status.json"
    run = _play("playbooks/status.yml", {"status_format": "json", "status_file": str(out),
                                         "status_fail_on_degraded": True})
    assert run.returncode == 0, run.stdout[-3000:]
    document = json.loads(out.read_text())
    jsonschema.validate(document, json.loads((ROOT / "docs/status.schema.json").read_text()))
    assert document["verdict"] == "OK" and document["problems"] == []
    assert document["api"] == {"answering": True, "status": 200, "models": ["tiny-sandbox"]}
    assert [(node["name"], node["rank"], node["units"]["vllm"]) for node in document["nodes"]] == [
        (sandbox.head, 0, "active"), (sandbox.worker, 1, "active")]
    assert document["head_watchdog"]["timer"] == "active"


def test_status_refuses_an_unknown_format(sandbox):
    run = _play("playbooks/status.yml", {"status_format": "yaml"})
    assert run.returncode != 0 and "status_format is yaml: text or json" in run.stdout


def _recap_changed(stdout: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", stdout.split("PLAY RECAP", 1)[-1]))


def test_the_dcgm_exporter_runs_as_a_unit_behind_the_firewall_and_is_scraped(sandbox, outsider, tmp_path):
    # NGC's image stands in for (tests/sandbox/gpu/dcgm-exporter), pre-loaded as on an air-gapped cluster
    image = dcgm_image.load(sandbox.nodes)
    on = {"vllmops_dcgm_exporter": True, "metrics_exporters_dcgm_image": image}
    clusters = {node: sandbox.on(node, "sh", "-c", ". /etc/vllmops/cluster.env; echo $VLLM_HOST_IP") for node in sandbox.nodes}
    mgmt = {node: address for node, address in zip(sandbox.nodes, _mgmt_addresses(), strict=True)}
    try:
        # the firewall filters 9400 already (whether or not an exporter runs): only the exporters' play
        run = sandbox.deploy(tags="metrics_exporters", extra=on)
        assert run.returncode == 0, run.stdout[-3000:]
        again = sandbox.deploy(tags="metrics_exporters", extra=on, echo=False)
        assert again.returncode == 0 and _recap_changed(again.stdout) == 0, again.stdout[-3000:]
        for node in sandbox.nodes:
            assert sandbox.active(node, "vllmops-dcgm-exporter")
            assert "--gpus" in sandbox.unit(node, "vllmops-dcgm-exporter")
            assert outsider.connect(mgmt[node], 9400, timeout=3) == "open"  # a metrics client (10.87.0.0/24)
            assert outsider.connect(clusters[node], 9400, timeout=3) == "timeout"  # neither member nor client there

        config_dir = tmp_path / "metrics"
        run = _play("playbooks/metrics.yml", {"metrics_config_dir": str(config_dir), "metrics_scrape_interval": "2s",
                                              **on}, path=f"{ensure()}:")
        assert run.returncode == 0 and "dcgm (2 DCGM exporters)" in run.stdout, run.stdout[-3000:]
        with Prometheus(config_dir / "prometheus.yml") as prometheus:
            prometheus.wait('up{job="dcgm"}', count=len(sandbox.nodes))
            series = prometheus.query('DCGM_FI_DEV_GPU_UTIL{cluster="sandbox"}')
            assert sorted((s["metric"]["node"], s["metric"]["modelName"]) for s in series) == [
                (node, "NVIDIA GB10") for node in sandbox.nodes]
    finally:
        # off again (also after a failure: the tests after this one share the sandbox)
        off = sandbox.deploy(tags="metrics_exporters")
    assert off.returncode == 0, off.stdout[-3000:]
    for node in sandbox.nodes:
        assert sandbox.unit(node, "vllmops-dcgm-exporter") == ""
        assert sandbox.on(node, "docker", "ps", "-aq", "--filter", "name=vllmops-dcgm-exporter") == ""
        # the port stays filtered for others while nothing of ours listens on it
        assert outsider.connect(mgmt[node], 9400, timeout=3) == "refused"
        assert outsider.connect(clusters[node], 9400, timeout=3) == "timeout"


def _mgmt_addresses() -> list[str]:
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["vllm_nodes"]["hosts"]
    return [host["ansible_host"] for host in hosts.values()]
