"""The operator's stories over the cluster the ray scenario converged
(molecule's verify step runs these with its testinfra verifier; its
environment names the inventory and the ephemeral directory).

All tests share that one cluster. A test that changes something puts it back
before it ends (or fails), so any one of them can run alone or in any order:
`molecule converge -s ray && molecule verify -s ray -- -k rejoins`.
What the converge itself did is compared with the snapshot the `cluster`
fixture takes before the first test runs.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]

SCENARIO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEAD, WORKER, NODE3 = (f"vllmops-molecule-ray-node{n}" for n in (1, 2, 3))
RAY_UNITS = {HEAD: "vllmops-ray-head", WORKER: "vllmops-ray-worker"}


class Cluster:
    def __init__(self) -> None:
        self.ephemeral = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
        self.inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
        instances = yaml.safe_load(Path(os.environ["MOLECULE_INSTANCE_CONFIG"]).read_text())
        self.addresses = {item["instance"]: item["address"] for item in instances}
        # The API as a client reaches it: the proxy on the head, https checked against the CA it published.
        self.url = f"https://{self.addresses[HEAD]}:8000"
        self.tls = ssl.create_default_context(cafile=str(self.ephemeral / "secrets" / "api-ca.crt"))
        self.vars = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"]["group_vars"]["vllm_nodes"]
        self.node3_inventory = self.ephemeral / "node3.yml"
        self.node3_inventory.write_text(yaml.safe_dump({"vllm_nodes": {"hosts": {NODE3: {}}}}))

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

    # --- Ansible ----------------------------------------------------------------
    def module(self, name: str, args: dict | None = None, host: str = HEAD) -> dict:
        """One module run on one node (ansible ad hoc, become), its result."""
        env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))
        proc = subprocess.run([str(BIN / "ansible"), host, "-i", str(self.inventory), "--become", "-m", name,
                               *(["-a", json.dumps(args)] if args else [])], capture_output=True, text=True, env=env, timeout=300)
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
        """An operator's run of one of the collection's playbooks on this inventory
        (plus node3 when asked), results as JSON or as the operator reads them."""
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.inventory)]
        if node3:
            argv += ["-i", str(self.node3_inventory)]
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_CALLBACK_RESULT_FORMAT="yaml",
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json" if as_json else "ansible.builtin.default")
        with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
            json.dump(extra or {}, handle)
            handle.flush()
            proc = subprocess.run([*argv, str(ROOT / playbook), "-e", f"@{handle.name}", *args], capture_output=True,
                                  text=True, env=env, timeout=900)
        return Run(proc)

    def deploy(self, *args: str, serve_args: dict | None = None, extra: dict | None = None, node3: bool = False) -> Run:
        extra = dict(extra or {})
        if serve_args:
            extra["vllm_serve_args"] = self.vars["vllm_serve_args"] | serve_args
        return self.playbook("deploy.yml", *args, extra=extra, node3=node3)

    # --- the endpoint -----------------------------------------------------------
    def get(self, path: str, key: str | None = None, body: dict | None = None, timeout: float = 30,
            node: str = HEAD) -> tuple[int, dict]:
        """The API on a node's management address (the head's unless told), as a client."""
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode() if body is not None else None
        url = self.url if node == HEAD else f"https://{self.addresses[node]}:8000"
        request = urllib.request.Request(url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.tls) as resp:
                text = resp.read()
                return resp.status, json.loads(text) if text.strip().startswith(b"{") else {}
        except urllib.error.HTTPError as err:
            return err.code, {}

    def complete(self, prompt: str, tokens: int, node: str = HEAD) -> dict:
        status, answer = self.get("/v1/completions", self.vars["vllm_serve_api_key"],
                                  {"model": self.vars["vllm_serve_served_model_name"], "prompt": prompt, "max_tokens": tokens},
                                  node=node)
        assert status == 200, f"/v1/completions answered {status}"
        return answer

    def healthy(self) -> bool:
        try:
            return self.get("/health")[0] == 200
        except OSError:
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


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    box = Cluster()
    # Before any story changes anything: what the converge (and its re-run) left.
    box.at_start = {"images": {node: box.image_id(node) for node in RAY_UNITS},
                    "ray_started": {node: box.inspect(node, unit)["started"] for node, unit in RAY_UNITS.items()},
                    "vllm_started": box.inspect(HEAD, "vllmops-vllm")["started"]}
    return box


@pytest.fixture(scope="session")
def first_converge(cluster) -> dict:
    """What converge.yml recorded on its first run, per node."""
    return {node: json.loads((cluster.ephemeral / f"first-converge-{node}.json").read_text()) for node in RAY_UNITS}
