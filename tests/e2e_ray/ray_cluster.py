"""A second sandbox beside the first, as a Ray deployment, for the Ray backend's stories (test_ray_*.py here):
the inference stand-in over Ray (vLLM refuses Ray on CPU) on two nodes, node2 made unlike node1 (its cluster
port renamed clu0, an InfiniBand port with its verbs device), a third node started beside them that joins the
cluster only in a story (a node added to the inventory). Its own prefix, networks and inventory
(.sandbox/vllmops-ray), so that it runs while the first sandbox (real vLLM, tests/e2e) runs its own tests:
tests/run.py runs the two side by side. `up()` starts it, `RayCluster.converge()` deploys it (every play) and
runs deploy.yml again, which must change nothing (the `cluster` fixture, conftest.py); `down()` removes it.

Every run of a playbook here is given ray_vars() (and a story's own settings on top) as extra vars: the
inventory holds the nodes and the sandbox's own settings (inventories/sandbox/group_vars), the Ray deployment
is what those extra vars describe.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
import nodes  # noqa: E402
from api_client import ApiClient, secrets_dir  # noqa: E402

PREFIX = "vllmops-ray"
# The first sandbox has 10.87/10.88 (the Makefile's defaults).
MGMT_CIDR, CLUSTER_CIDR = "10.65.0.0/24", "10.66.0.0/24"
INVENTORY = ROOT / ".sandbox" / PREFIX
# node3's inventory, beside the sandbox's (every file in an inventory directory is read)
NODE3_INVENTORY = ROOT / ".sandbox" / f"{PREFIX}-node3.yml"
BIN = Path(sys.executable).parent
STANDIN = "vllmops-sandbox/vllm-openai:v0.33.0"
# The model the stand-in serves, and its name (the sandbox's recipe for the stand-in, which sets no tool-call parser).
STANDIN_RECIPE = ROOT / "tests/sandbox/recipes/sandbox-standin.yml"
RDMA_SYSFS = "/srv/vllmops-rdma-sysfs"

# node1 runs Ray's head and vLLM, node2 a Ray worker; node3 is started beside them, outside the inventory.
HEAD, WORKER, NODE3 = (f"{PREFIX}-node{n}" for n in (1, 2, 3))
RAY_UNITS = {HEAD: "vllmops-ray-head", WORKER: "vllmops-ray-worker"}


def _tool(*argv: str) -> str:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True).stdout.strip()


def up() -> None:
    """The nodes (a leftover of an earlier run removed first), the inventory of node1 and node2, with the
    sandbox's group_vars; the model on the controller (model_controller_path), as `make sandbox` does for the
    stand-in."""
    down()
    model = _tool(str(ROOT / "tests/sandbox/serving/real_vllm.py"), "model")
    repo = _tool(str(ROOT / "tests/sandbox/gpu/toolkit_repo.py"), "build")
    started = nodes.up(PREFIX, 3, [f"{PREFIX}-mgmt={MGMT_CIDR}", f"{PREFIX}-cluster={CLUSTER_CIDR}"],
                       gpus=["gb10:1"] * 3, copies=[f"{repo}:/srv/vllmops-nvidia-repo"])
    INVENTORY.mkdir(parents=True, exist_ok=True)
    (INVENTORY / "group_vars").symlink_to(ROOT / "inventories/sandbox/group_vars")
    nodes.write_inventory(INVENTORY / "hosts.yml", {**started, "nodes": started["nodes"][:2]}, [
        f"model_controller_path={model}", "model_source=controller", f"nccl_cluster_cidr={CLUSTER_CIDR}",
        f"vllmops_recipe={STANDIN_RECIPE}", f"vllmops_image={STANDIN}",
        "vllmops_backend=ray", f'vllmops_api_allowed_cidrs=["{MGMT_CIDR}"]', f'vllmops_metrics_allowed_cidrs=["{MGMT_CIDR}"]'])
    NODE3_INVENTORY.write_text(yaml.safe_dump(
        {"vllm_nodes": {"hosts": {NODE3: {"ansible_host": started["nodes"][2]["address"]}}}}))


def down() -> None:
    """The nodes, their volumes and networks, the inventory and the secrets the deployment generated."""
    nodes.down(PREFIX)
    shutil.rmtree(INVENTORY, ignore_errors=True)
    NODE3_INVENTORY.unlink(missing_ok=True)
    shutil.rmtree(secrets_dir(INVENTORY), ignore_errors=True)


def standin_archive() -> str:
    """The stand-in image as a `docker save` archive (tests/sandbox/serving/serving_image.py, cached)."""
    return _tool(str(ROOT / "tests/sandbox/serving/serving_image.py"), "archive")


def ray_vars() -> dict:
    """What makes the sandbox a Ray deployment of the stand-in, with the head watchdog acting within seconds (a
    check every 3 s with a 3 s deadline, 2 failures, at most 1 restart in 600 s: test_ray_engine_dead.py) and a
    hang found after 20 s (test_ray_head_and_image.py). node2 reads its RDMA port from the sysfs view made for it.
    The model stays the sandbox's (the stand-in serves any)."""
    return {
        # From node1, which holds it (prepare() loaded it there): the image role copies it to the nodes that
        # lack it, over the cluster network.
        "vllmops_image": STANDIN, "image_archive": "", "vllmops_backend": "ray",
        "nccl_sysfs_root": f"{{{{ '{RDMA_SYSFS}' if inventory_hostname == '{WORKER}' else '/sys' }}}}",
        "ray_cluster_restart_sec": 3,
        # Ray forming again after the head moved (test_ray_grow_and_remove.py) took more than the role's 180 s
        # here while the first sandbox's tests shared the 2 cores (and less than 180 s alone): a bound for this
        # machine, not a figure of Ray's.
        "ray_cluster_wait_timeout": 600,
        "vllm_serve_ready_timeout": 120, "vllm_serve_hang_window": 20,
        "vllm_serve_health_interval": 3, "vllm_serve_health_timeout": 3, "vllm_serve_health_failures": 2,
        "vllm_serve_health_max_restarts": 1, "vllm_serve_health_window": 600,
    }


# node2 as a host unlike node1: its cluster port has another name (each node must keep its own
# NCCL_SOCKET_IFNAME in vLLM's Ray workers), and it has an InfiniBand port with its verbs device - a device
# node, and the sysfs view nccl_facts reads (nccl_sysfs_root).
NODE2_RDMA = r"""
set -eu
port=$(ip -o -4 addr show to "$1" | awk '{print $2}')
if [ "$port" != clu0 ]; then
  # Down, the port loses its routes; the default route may be one of them (Docker's pick).
  gateway=$(ip -4 route show default dev "$port" | awk '{print $3}')
  ip link set "$port" down; ip link set "$port" name clu0; ip link set clu0 up
  if [ -n "$gateway" ]; then ip route replace default via "$gateway" dev clu0; fi
fi
mkdir -p /dev/infiniband
[ -c /dev/infiniband/uverbs0 ] || mknod -m 0666 /dev/infiniband/uverbs0 c 231 192
sys=RDMA_SYSFS
mkdir -p $sys/class/net/clu0/device/infiniband/mlx5_0
for f in mtu operstate speed; do
  cat /sys/class/net/clu0/$f > $sys/class/net/clu0/$f 2>/dev/null || echo unknown > $sys/class/net/clu0/$f
done
port1=$sys/class/infiniband/mlx5_0/ports/1
mkdir -p $port1/gids $port1/gid_attrs/types $port1/gid_attrs/ndevs
echo "4: ACTIVE" > $port1/state; echo InfiniBand > $port1/link_layer
echo fe80:0000:0000:0000:0c42:a103:0062:9a3c > $port1/gids/0
echo "IB/RoCE v1" > $port1/gid_attrs/types/0; : > $port1/gid_attrs/ndevs/0
mkdir -p $sys/class/infiniband/mlx5_0/device/infiniband_verbs/uverbs0
echo mlx5_0 > $sys/class/infiniband/mlx5_0/device/infiniband_verbs/uverbs0/ibdev
""".replace("RDMA_SYSFS", RDMA_SYSFS)


class RayCluster:
    def __init__(self) -> None:
        group = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["vllm_nodes"]
        self.inventory = INVENTORY
        self.secrets = secrets_dir(INVENTORY)
        self.cluster_cidr = ipaddress.ip_network(CLUSTER_CIDR)
        self.addresses = {name: host["ansible_host"] for name, host in group["hosts"].items()}
        self.addresses[NODE3] = yaml.safe_load(NODE3_INVENTORY.read_text())["vllm_nodes"]["hosts"][NODE3]["ansible_host"]
        self.node3_inventory = NODE3_INVENTORY
        serve = yaml.safe_load((INVENTORY / "group_vars" / "vllm_nodes" / "vllm_serve.yml").read_text())
        model = yaml.safe_load(STANDIN_RECIPE.read_text())["model"]  # the model and its name are the recipe's
        self.model_dir = f"/srv/models/{model['dir']}"
        self.vars = {**serve, "vllm_serve_served_model_name": model["served_name"], **ray_vars()}

    @functools.cached_property
    def client(self) -> ApiClient:
        """The API as a client has it: the proxy on the head, the key and CA the deployment generated (read once,
        after the converge wrote them)."""
        return ApiClient.for_inventory(INVENTORY, host=self.addresses[HEAD])

    # --- the nodes --------------------------------------------------------------
    def run(self, node: str, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", node, *argv], capture_output=True, text=True, timeout=180)

    def on(self, node: str, *argv: str, check: bool = True) -> str:
        proc = self.run(node, *argv)
        if check and proc.returncode:
            raise AssertionError(f"{' '.join(argv)} on {node}: rc {proc.returncode}: {proc.stdout[-1000:]} {proc.stderr[-1000:]}")
        return proc.stdout.strip()

    def inspect(self, node: str, container: str) -> dict:
        """A container of ours on a node: start time and arguments ({} when there is none)."""
        found = json.loads(self.on(node, "docker", "inspect", container, check=False) or "[]")
        return {"started": found[0]["State"]["StartedAt"], "args": found[0]["Args"]} if found else {}

    def image_id(self, node: str) -> str:
        return self.on(node, "docker", "image", "inspect", "--format", "{{.Id}}", self.vars["vllmops_image"])

    def vllm_starts(self) -> int:
        """How many times systemd started vllmops-vllm on the head."""
        return len(self.on(HEAD, "journalctl", "--unit", "vllmops-vllm", "--output", "cat", "--grep",
                           "^Started vllmops-vllm", check=False).splitlines())

    def running_images(self) -> dict:
        """Node -> container of ours -> the ID of the image it runs."""
        found = {}
        for node in (HEAD, WORKER):
            out = self.on(node, "sh", "-c", "docker inspect --format '{{.Name}} {{.Image}}'"
                          " $(docker ps --quiet --filter label=io.vllmops.unit)")
            found[node] = dict(line.lstrip("/").split() for line in out.splitlines())
        return found

    def vllm_args(self) -> list[str]:
        return self.inspect(HEAD, "vllmops-vllm")["args"]

    def cluster_ip(self, node: str) -> str:
        env = dict(line.split("=", 1) for line in self.on(node, "cat", "/etc/vllmops/cluster.env").splitlines()
                   if "=" in line and not line.startswith("#"))
        return env["VLLM_HOST_IP"]

    def state(self) -> dict:
        """What an unwanted change would alter: our unit files and when our containers started."""
        return {node: self.on(node, "sh", "-c", "sha256sum /etc/systemd/system/vllmops-*.service /etc/vllmops/*.env;"
                              " docker ps --all --filter label=io.vllmops.unit --format '{{.Names}} {{.State}}'"
                              " | sort; docker inspect --format '{{.Name}} {{.State.StartedAt}}'"
                              " $(docker ps --quiet --filter label=io.vllmops.unit)")
                for node in (HEAD, WORKER)}

    def prepare(self) -> None:
        """node2 made unlike node1 (NODE2_RDMA); Docker Engine on both (the docker play), then the stand-in image
        loaded into node1 only: the state of a cluster where someone loaded it on one machine."""
        self.run(WORKER, "sh", "-c", NODE2_RDMA, "sh", str(self.cluster_cidr)).check_returncode()
        engine = self.deploy("--tags", "docker")
        assert engine.rc == 0, engine
        with open(standin_archive(), "rb") as archive:
            subprocess.run(["docker", "exec", "-i", HEAD, "docker", "load"], stdin=archive, capture_output=True,
                           check=True, timeout=600)

    # --- Ansible ----------------------------------------------------------------
    def _env(self, **more: str) -> dict:
        return dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), **more)

    def module(self, name: str, args: dict | None = None, host: str = HEAD) -> dict:
        """One module run on one node (ansible ad hoc, become), its result."""
        env = self._env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
        proc = subprocess.run([str(BIN / "ansible"), host, "-i", str(self.inventory), "--become", "-m", name,
                               *(["-a", json.dumps(args)] if args else [])], cwd=ROOT, capture_output=True, text=True,
                              env=env, timeout=300)
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]
        assert not result.get("failed"), f"{name}: {result.get('msg')}"
        return result

    def ray(self, expected: int | None = None, timeout: float = 60) -> dict:
        """Ray as the head sees it; with `expected`, once exactly that many nodes are alive."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.module("vllmops.cluster.ray_cluster_info")
            if expected is None or info["alive_nodes"] == expected or time.monotonic() > deadline:
                return info
            time.sleep(2)

    def playbook(self, playbook: str, *args: str, extra: dict | None = None, node3: bool = False,
                 as_json: bool = True) -> Run:
        """An operator's run of one of the collection's playbooks on the sandbox's inventory (plus node3 when
        asked) with RAY_VARS and `extra` on top, results as JSON or as the operator reads them."""
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.inventory)]
        if node3:
            argv += ["-i", str(self.node3_inventory)]
        env = self._env(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml",
                        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json" if as_json else "ansible.builtin.default")
        with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
            json.dump({**ray_vars(), **(extra or {})}, handle)
            handle.flush()
            proc = subprocess.run([*argv, str(ROOT / playbook), "-e", f"@{handle.name}", *args], cwd=ROOT,
                                  capture_output=True, text=True, env=env, timeout=900)
        return Run(proc)

    def deploy(self, *args: str, serve_args: dict | None = None, extra: dict | None = None, node3: bool = False) -> Run:
        extra = dict(extra or {})
        if serve_args:
            extra["vllm_serve_args"] = self.vars["vllm_serve_args"] | serve_args
        return self.playbook("deploy.yml", *args, extra=extra, node3=node3)

    def converge(self) -> dict:
        """Every play to the Ray deployment, then deploy.yml again, which must change nothing (its fast path).
        What the first run did, for test_ray_converged.py: where the image was copied and when Ray and vLLM
        started."""
        first = self.deploy()
        assert first.rc == 0, first
        record = {"image_copied_to": first.fact("image_copied_to"),
                  "ray_started": {node: self.inspect(node, unit)["started"] for node, unit in RAY_UNITS.items()},
                  "vllm_started": self.inspect(HEAD, "vllmops-vllm")["started"]}
        again = self.deploy()
        assert again.rc == 0, again
        record["rerun_changed"] = {host: again.changed(host) for host in (HEAD, WORKER)}
        record["rerun_fast"] = "nothing to do" in again.stdout
        return record

    # --- the endpoint -----------------------------------------------------------
    def get(self, path: str, key: str | None = None, body: dict | None = None, timeout: float = 30,
            node: str = HEAD) -> tuple[int, dict]:
        """The API on a node's management address (the head's unless told), as a client."""
        client = self.client if node == HEAD else ApiClient.for_inventory(INVENTORY, host=self.addresses[node])
        status, text = client.request(path, body, key=key, timeout=timeout)
        return status, json.loads(text) if status == 200 and text.strip().startswith("{") else {}

    def complete(self, prompt: str, tokens: int, node: str = HEAD) -> dict:
        status, answer = self.get("/v1/completions", self.client.key,
                                  {"model": self.vars["vllm_serve_served_model_name"], "prompt": prompt, "max_tokens": tokens},
                                  node=node)
        assert status == 200, f"/v1/completions answered {status}"
        return answer

    def healthy(self) -> bool:
        try:
            return self.get("/health")[0] == 200
        except (urllib.error.URLError, OSError):
            return False


class Run:
    """One ansible-playbook run: rc, the JSON document (or the raw text) and its facts."""

    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.rc, self.stdout = proc.returncode, proc.stdout
        self.stderr = proc.stderr
        try:
            self.doc = json.loads(proc.stdout)
        except ValueError:
            self.doc = {}

    def __str__(self) -> str:
        failed = "\n".join(self.failures())
        return f"rc {self.rc}\n{failed or self.stdout[-4000:]}\n{self.stderr[-2000:]}"

    __repr__ = __str__  # pytest shows an assertion's message object by its repr

    def failures(self) -> list[str]:
        """Each failed or unreachable task's name, host and message (JSON runs)."""
        return [f"{task['task']['name']} [{host}]: {str(result.get('msg', ''))[:1500]}"
                for play in self.doc.get("plays", []) for task in play["tasks"]
                for host, result in task["hosts"].items() if result.get("failed") or result.get("unreachable")]

    def changed(self, host: str) -> int:
        return self.doc["stats"][host]["changed"]

    def fact(self, name: str) -> dict:
        """The last value each host set for a fact in this run."""
        found = {}
        for play in self.doc.get("plays", []):
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    if name in result.get("ansible_facts", {}):
                        found[host] = result["ansible_facts"][name]
        return found

