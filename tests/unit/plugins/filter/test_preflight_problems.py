"""The preflight role's rules: table of (what the nodes reported, settings) -> the problems the operator reads."""

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.preflight_problems import preflight_problems

DF_HEADER = "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"


def df(free_gb):
    return DF_HEADER + f"/dev/nvme0n1p2  3843514784 1000 {int(free_gb * 1024 * 1024)} 1% /\n"


def node(arch="aarch64", gpus=1, listeners=(), own=False, free_gb=500, diagnosis=(), own_processes=()):
    return {"architecture": arch, "gpus": gpus, "gpu_diagnosis": list(diagnosis), "listeners": listeners,
            "own_containers": own, "own_processes": list(own_processes), "docker_root": "/var/lib/docker",
            "df": df(free_gb)}


SSHD = {"port": 22, "name": "sshd", "pid": 810}
SQUATTER = {"port": 8000, "name": "python3", "pid": 4242}
SETTINGS = {"ports": [6800, 6801], "head": "n1", "head_ports": [8000, 6379, 29501], "min_free_gb": 40}
REDIS = {"port": 6379, "name": "redis-server", "pid": 77}
RAYLET_SQUATTER = {"port": 6800, "name": "nginx", "pid": 91}
PROXY = {"port": 8000, "name": "nginx", "pid": 700}
SQUATTER_8001 = {"port": 8001, "name": "python3", "pid": 4243}

CASES = [
    pytest.param({"n1": node(), "n2": node(listeners=[SSHD])}, {}, [], id="two healthy nodes: nothing to fix"),
    pytest.param({"n1": node(), "n2": node(arch="x86_64")}, {},
                 ["The nodes differ in CPU architecture (n1=aarch64, n2=x86_64): one serving image cannot run on all "
                  "of them; keep the nodes of one architecture in the inventory group."],
                 id="mixed architectures"),
    pytest.param({"n1": node(), "n2": node(gpus=0, diagnosis=["nvidia-smi was not found: install the driver."])}, {},
                 ["n2 shows no GPU (gpu_probe: nvidia-smi was not found: install the driver.): fix its NVIDIA driver, "
                  "or take n2 out of the inventory."],
                 id="a node without a GPU, with gpu_probe's diagnosis"),
    pytest.param({"n1": node(), "n2": node(gpus=0)}, {"tensor_parallel_size": 8},
                 ["n2 shows no GPU (gpu_probe: no diagnosis): fix its NVIDIA driver, or take n2 out of the inventory."],
                 id="no GPU: the parallel sizes are not checked against a partial count"),
    pytest.param({"n1": node(), "n2": node()}, {"tensor_parallel_size": 2}, [], id="TP 2 on 2 GPUs"),
    pytest.param({"n1": node(), "n2": node()}, {"tensor_parallel_size": 1, "pipeline_parallel_size": 2}, [],
                 id="TP 1 x PP 2 on 2 GPUs"),
    pytest.param({"n1": node(), "n2": node()}, {"pipeline_parallel_size": 2}, [], id="PP 2, TP derived"),
    pytest.param({"n1": node(gpus=2), "n2": node()}, {"tensor_parallel_size": 2},
                 ["tensor_parallel_size 2 x pipeline_parallel_size 1 = 2 GPUs, but the cluster has 3 (2 node(s): n1 2, "
                  "n2 1): set vllm_serve_tensor_parallel_size and vllm_serve_pipeline_parallel_size so they multiply "
                  "to 3, or leave both 0 to derive them."],
                 id="TP x PP short of the GPUs"),
    pytest.param({"n1": node(gpus=2), "n2": node()}, {"pipeline_parallel_size": 2},
                 ["pipeline_parallel_size 2 does not divide the cluster's GPUs: the cluster has 3 (2 node(s): n1 2, "
                  "n2 1): set vllm_serve_pipeline_parallel_size to a divisor of 3, or leave it 0."],
                 id="PP that does not divide the GPUs"),
    pytest.param({"n1": node(listeners=[SSHD, SQUATTER]), "n2": node()}, {},
                 ["Something else listens on n1 on a port the cluster needs (held: 8000 by python3 (pid 4242)): stop "
                  "it, or move the port (vllmops_api_port, vllm_serve_port, vllmops_ray_*, vllmops_master_port)."],
                 id="another process on vLLM's port"),
    pytest.param({"n1": node(), "n2": node(listeners=[SSHD, REDIS])}, {}, [],
                 id="a worker may hold a port only the head listens on"),
    pytest.param({"n1": node(), "n2": node(listeners=[RAYLET_SQUATTER])}, {},
                 ["Something else listens on n2 on a port the cluster needs (held: 6800 by nginx (pid 91)): stop "
                  "it, or move the port (vllmops_api_port, vllm_serve_port, vllmops_ray_*, vllmops_master_port)."],
                 id="a port every node needs, held on a worker"),
    pytest.param({"n1": node(listeners=[SQUATTER], own=True)}, {}, [],
                 id="our own containers hold the port: a re-run"),
    pytest.param({"n1": node(listeners=[PROXY], own_processes=["nginx"])}, {}, [],
                 id="our API proxy holds the API port while vLLM is down: a re-run"),
    pytest.param({"n1": node(listeners=[PROXY, SQUATTER_8001], own_processes=["nginx"])}, {"head_ports": [8000, 8001]},
                 ["Something else listens on n1 on a port the cluster needs (held: 8001 by python3 (pid 4243)): stop "
                  "it, or move the port (vllmops_api_port, vllm_serve_port, vllmops_ray_*, vllmops_master_port)."],
                 id="our proxy's port is fine, a stranger on vLLM's port behind it is not"),
    pytest.param({"n1": node(listeners=[PROXY])}, {},
                 ["Something else listens on n1 on a port the cluster needs (held: 8000 by nginx (pid 700)): stop "
                  "it, or move the port (vllmops_api_port, vllm_serve_port, vllmops_ray_*, vllmops_master_port)."],
                 id="an nginx that is not our proxy's on the API port"),
    pytest.param({"n1": node(listeners=None)}, {},
                 ["The listening ports of n1 could not be read (community.general.listen_ports_facts needs ss or "
                  "netstat): install iproute2 on it."],
                 id="listeners unknown"),
    pytest.param({"n1": node(free_gb=12.5)}, {},
                 ["n1 has 12.5 GB free under /var/lib/docker, less than the 40 GB the image needs "
                  "(preflight_min_free_gb): free space or move Docker's data-root."],
                 id="low disk"),
    pytest.param({"n1": node(free_gb=40)}, {}, [], id="exactly the minimum is enough"),
    pytest.param({"n1": {**node(), "df": "", "docker_root": "/var/lib"}}, {},
                 ["The free space under /var/lib on n1 could not be measured (df -Pk gave no usable line): check "
                  "that /var/lib exists and df works there."],
                 id="df failed"),
]


@pytest.mark.parametrize(("nodes", "settings", "problems"), CASES)
def test_problems(nodes, settings, problems):
    assert preflight_problems(nodes, **{**SETTINGS, **settings}) == problems


def test_every_problem_is_reported_at_once_in_a_stable_order():
    nodes = {"n1": node(arch="x86_64", listeners=[SQUATTER], free_gb=1), "n2": node(gpus=0)}
    problems = preflight_problems(nodes, **SETTINGS)
    assert [p.split(" ")[:3] for p in problems] == [
        ["The", "nodes", "differ"], ["n2", "shows", "no"], ["Something", "else", "listens"], ["n1", "has", "1.0"]]


def test_a_host_that_reported_nothing_is_reported_on_every_count():
    problems = preflight_problems({"n1": node(), "n2": None}, **SETTINGS)
    assert any(p.startswith("n2 shows no GPU") for p in problems)
    assert any("listening ports of n2 could not be read" in p for p in problems)
    assert any("free space under Docker's data directory on n2" in p for p in problems)
