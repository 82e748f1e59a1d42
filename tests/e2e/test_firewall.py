"""The firewall over the converged sandbox, seen from an outsider (a container
on the sandbox's management and cluster networks that is not in the
inventory): the cluster's ports are dropped for it and open for the members,
the API only from the allowed CIDR (the management network), SSH never
closed, a lockout refused, check mode predicting, removal and re-apply.
Leaves the firewall as deploy.yml put it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from api_client import secrets_dir
from conftest import BIN, INVENTORY, ROOT
from outsider import _CONNECT

# Ports nothing listens on in the Ray-free sandbox get a listener of the test:
# Ray's GCS, node manager, object manager and a worker port, Ray's dashboard,
# the image copy port, the bandwidth check's rendezvous (network_check).
FIXED_PORTS = [6379, 6800, 6801, 10500, 8265, 29700, 29702]
TABLE = ["nft", "list", "table", "inet", "vllmops"]

# Runs on a node: listens on the given ports until killed (its pid in a file).
_LISTENER = """
import os, select, socket, sys
socks = []
for port in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', int(port)))
    s.listen(64)
    socks.append(s)
with open('/run/vllmops-test-listener.pid', 'w') as pid_file:
    pid_file.write(str(os.getpid()))
while True:
    for s in select.select(socks, [], [], 5)[0]:
        s.accept()[0].close()
"""


def _ansible(*argv: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               **(extra_env or {}))
    proc = subprocess.run([str(BIN / argv[0]), *argv[1:], "-i", str(INVENTORY)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    return proc


def _recap_changed(stdout: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", stdout.split("PLAY RECAP", 1)[-1]))


@pytest.fixture(scope="module")
def nodes(sandbox):
    """Each node's management (SSH) and cluster addresses, and the head's ephemeral port range."""
    inventory = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["vllm_nodes"]["hosts"]
    hosts = {}
    for node in sandbox.nodes:
        env = dict(line.split("=", 1) for line in sandbox.on(node, "cat", "/etc/vllmops/cluster.env").splitlines()
                   if "=" in line and not line.startswith("#"))
        hosts[node] = {"mgmt": inventory[node]["ansible_host"], "cluster": env["VLLM_HOST_IP"]}
    low, high = (int(p) for p in sandbox.on(sandbox.head, "cat", "/proc/sys/net/ipv4/ip_local_port_range").split())
    hosts["ephemeral"] = (low, high)
    return hosts


@pytest.fixture(scope="module")
def listener(sandbox, nodes):
    """A listener of the test on the head, on the fixed ports and one ephemeral port."""
    low, high = nodes["ephemeral"]
    ports = [*FIXED_PORTS, (low + high) // 2]
    subprocess.run(["docker", "exec", "-d", sandbox.head, "python3", "-c", _LISTENER, *map(str, ports)], check=True)
    for _ in range(50):
        if sandbox.on(sandbox.head, "cat", "/run/vllmops-test-listener.pid", check=False):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the test's listener did not start on {sandbox.head} (ports {ports} taken?)")
    yield ports
    pid = sandbox.on(sandbox.head, "cat", "/run/vllmops-test-listener.pid")
    sandbox.on(sandbox.head, "kill", pid)
    sandbox.on(sandbox.head, "rm", "-f", "/run/vllmops-test-listener.pid")


def _from_member(sandbox, host: str, port: int) -> str:
    return sandbox.on(sandbox.worker, "python3", "-c", _CONNECT, host, str(port), "3")


def _each(function, items):
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(items, pool.map(function, items), strict=True))


def test_the_table_is_loaded_and_persisted(sandbox):
    for node in sandbox.nodes:
        assert 'comment "vllmops.cluster firewall sha256:' in sandbox.on(node, *TABLE)
        assert sandbox.active(node, "vllmops-firewall")
        assert sandbox.on(node, "systemctl", "is-enabled", "vllmops-firewall") == "enabled"


def test_the_cluster_ports_are_dropped_for_the_outsider_and_open_for_members(sandbox, outsider, nodes, listener):
    head = nodes[sandbox.head]
    # a member reaches every listener, by the head's cluster and management address
    assert _each(lambda port: _from_member(sandbox, head["cluster"], port), listener) == dict.fromkeys(listener, "open")
    assert _each(lambda port: _from_member(sandbox, head["mgmt"], port), listener) == dict.fromkeys(listener, "open")
    # the outsider's connections are dropped (a timeout, not a refusal: something listens)
    for address in (head["cluster"], head["mgmt"]):
        seen = _each(lambda port, address=address: outsider.connect(address, port, timeout=3), listener)
        assert seen == dict.fromkeys(listener, "timeout"), (address, seen)


def test_vllms_own_listeners_are_dropped_for_the_outsider(sandbox, outsider, nodes):
    """What real vLLM listens on in the Ray-free mode: the rendezvous (torch's store) on 29501
    and its ZMQ/NCCL/Gloo sockets on ports from the ephemeral range."""
    low, high = nodes["ephemeral"]
    local = [line.split()[3] for line in sandbox.on(sandbox.head, "ss", "-ltnH").splitlines()]
    listening = {int(a.rsplit(":", 1)[1]) for a in local if not a.startswith(("127.", "[::1]"))}
    ephemeral = sorted(p for p in listening if low <= p <= high)
    assert 29501 in listening and ephemeral, f"vLLM listens on {sorted(listening)}"
    ports = [29501, *ephemeral[:4]]
    seen = _each(lambda port: outsider.connect(nodes[sandbox.head]["cluster"], port, timeout=3), ports)
    assert seen == dict.fromkeys(ports, "timeout"), seen


def test_the_api_is_open_to_the_allowed_cidr_only(sandbox, outsider, nodes):
    head = nodes[sandbox.head]
    # the outsider's management address (10.87.0.0/24) is an allowed client: the API answers it
    # (any HTTP status is an answer: behind a proxy that wants a key, 401)
    status, body = outsider.http(f"http://{head['mgmt']}:8000/v1/models")
    assert status != 0, body
    assert status != 200 or "tiny-sandbox" in body
    # its cluster address is not (nor a member): the same API is dropped there
    assert outsider.connect(head["cluster"], 8000, timeout=3) == "timeout"
    assert sandbox.healthy()  # the controller, on the allowed network


def test_the_node_exporters_answer_the_metrics_cidr_only(sandbox, outsider, nodes):
    # vllmops_metrics_allowed_cidrs is the management network (the outsider's, and this machine's Prometheus)
    for node in sandbox.nodes:
        assert outsider.connect(nodes[node]["mgmt"], 9100, timeout=3) == "open"
        # the same exporter at the node's cluster address: the outsider is neither a member nor a metrics client there
        assert outsider.connect(nodes[node]["cluster"], 9100, timeout=3) == "timeout"
        assert _from_member(sandbox, nodes[node]["cluster"], 9100) == "open"


def test_the_outsider_needs_the_key_on_every_route_and_is_served_with_it(sandbox, outsider, nodes):
    """From the allowed network, through the proxy as any client: no key, no inference - also on
    /invocations, which vLLM's own key leaves open; with the key, a real completion."""
    ca = outsider.put(str(secrets_dir(INVENTORY) / "api-ca.crt"), "/tmp/vllmops-api-ca.crt")
    url = f"https://{nodes[sandbox.head]['mgmt']}:8000"
    completion = json.dumps({"model": "tiny-sandbox", "prompt": "Hello", "max_tokens": 4})
    plain = {"Content-Type": "application/json"}
    for path in ("/v1/completions", "/invocations", "/tokenize", "/metrics"):
        status, body = outsider.http(url + path, "POST", plain, completion, cafile=ca)
        assert status == 401, (path, status, body[:300])
    keyed = dict(plain, Authorization=f"Bearer {sandbox.client.key}")
    status, body = outsider.http(url + "/v1/completions", "POST", keyed, completion, timeout=120, cafile=ca)
    assert status == 200 and json.loads(body)["choices"][0]["text"] is not None, (status, body[:300])


def test_ssh_stays_open_and_a_lockout_is_refused(sandbox):
    before = {node: sandbox.on(node, *TABLE) for node in sandbox.nodes}
    run = _ansible("ansible-playbook", "deploy.yml", "--tags", "firewall",
                   "-e", '{"firewall_cluster_ports": [6379, "20-30"]}')
    assert run.returncode != 0
    assert "include 22, the SSH port: the firewall never filters SSH" in run.stdout
    assert {node: sandbox.on(node, *TABLE) for node in sandbox.nodes} == before
    ping = _ansible("ansible", "vllm_nodes", "-m", "ansible.builtin.ping")
    assert ping.returncode == 0 and ping.stdout.count("SUCCESS") == len(sandbox.nodes)


def test_check_mode_predicts_and_changes_nothing(sandbox):
    before = {node: sandbox.on(node, *TABLE) for node in sandbox.nodes}
    run = _ansible("ansible-playbook", "deploy.yml", "--tags", "firewall", "--check", "--diff",
                   "-e", '{"vllmops_api_allowed_cidrs": ["192.0.2.0/24"]}')
    assert run.returncode == 0, run.stdout[-3000:]
    assert "-\t\telements = { 10.87.0.0/24 }" in run.stdout.replace("\\t", "\t")
    assert "+\t\telements = { 192.0.2.0/24 }" in run.stdout.replace("\\t", "\t")
    assert _recap_changed(run.stdout) == len(sandbox.nodes)  # the table, on each node
    assert {node: sandbox.on(node, *TABLE) for node in sandbox.nodes} == before
    assert sandbox.healthy()


def test_removal_opens_the_ports_and_a_deploy_closes_them_again(sandbox, outsider, nodes, listener, tmp_path):
    head, port = nodes[sandbox.head], listener[0]
    playbook = tmp_path / "remove.yml"  # what playbooks/teardown.yml runs for the firewall
    playbook.write_text("- hosts: vllm_nodes\n  become: true\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.include_role: {name: vllmops.cluster.firewall, tasks_from: remove}\n")
    try:
        run = _ansible("ansible-playbook", str(playbook))
        assert run.returncode == 0, run.stdout[-3000:]
        for node in sandbox.nodes:
            assert sandbox.on(node, *TABLE, check=False) == ""
            assert sandbox.unit(node, "vllmops-firewall") == ""
            assert "firewall.nft" not in sandbox.on(node, "ls", "/etc/vllmops", check=False)
        assert outsider.connect(head["cluster"], port) == "open"  # nothing else stopped it
    finally:
        run = _ansible("ansible-playbook", "deploy.yml", "--tags", "firewall")
    assert run.returncode == 0, run.stdout[-3000:]
    assert _recap_changed(run.stdout) > 0
    assert outsider.connect(head["cluster"], port) == "timeout"
    again = _ansible("ansible-playbook", "deploy.yml", "--tags", "firewall")
    assert again.returncode == 0 and _recap_changed(again.stdout) == 0, again.stdout[-3000:]
