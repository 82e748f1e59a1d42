"""The converged sandbox as the end-to-end tests drive it (tests/e2e): its nodes (docker exec),
its endpoint as a user reaches it (the proxy, the key and CA the deployment left on this machine), deploy.yml and the
other playbooks on its inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path

import yaml
from api_client import ApiClient

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventories" / "sandbox"
BIN = Path(sys.executable).parent


class Sandbox:
    """A converged sandbox, as its inventory describes it (`make sandbox`'s by default)."""

    def __init__(self, inventory: Path = INVENTORY) -> None:
        self.inventory = inventory
        hosts = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]["vllm_nodes"]["hosts"]
        self.nodes = list(hosts)
        self.head, self.worker = self.nodes[0], self.nodes[1]
        # The API as a user reaches it: the proxy (https, the key and CA the deployment left on this machine).
        self.client = ApiClient.for_inventory(inventory, host=hosts[self.head]["ansible_host"])
        self.url = self.client.url
        self.serve_vars = yaml.safe_load((inventory / "group_vars" / "vllm_nodes" / "vllm_serve.yml").read_text())

    # --- the nodes --------------------------------------------------------------
    def on(self, node: str, *argv: str, check: bool = True) -> str:
        proc = subprocess.run(["docker", "exec", node, *argv], capture_output=True, text=True, timeout=120)
        if check and proc.returncode:
            raise AssertionError(f"{' '.join(argv)} on {node}: rc {proc.returncode}: {proc.stderr[-1000:]}")
        return proc.stdout.strip()

    def container(self, node: str) -> dict:
        """The vLLM container of a node: its id, start time and arguments ({} when there is none)."""
        found = json.loads(self.on(node, "docker", "inspect", "vllmops-vllm", check=False) or "[]")
        if not found:
            return {}
        info = found[0]
        return {"id": info["Id"], "started": info["State"]["StartedAt"], "args": info["Args"],
                "running": info["State"]["Running"]}

    def starts(self, node: str) -> int:
        """How many times systemd started vllmops-vllm on the node."""
        out = self.on(node, "journalctl", "--unit", "vllmops-vllm", "--output", "cat", "--grep", "^Started vllmops-vllm",
                      check=False)
        return len(out.splitlines())

    def unit(self, node: str, name: str = "vllmops-vllm") -> str:
        """The unit file's text ("" when the node has none)."""
        return self.on(node, "cat", f"/etc/systemd/system/{name}.service", check=False)

    def active(self, node: str, name: str) -> bool:
        return self.on(node, "systemctl", "is-active", name, check=False) == "active"

    def networks(self, node: str) -> list[str]:
        """The Docker networks the node container is on."""
        return sorted(json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", node],
                                                capture_output=True, text=True, check=True).stdout))

    # --- the endpoint -----------------------------------------------------------
    def healthy(self, timeout: float = 3) -> bool:
        return self.client.healthy(timeout)

    def complete(self, prompt: str = "Hello", tokens: int = 8) -> dict:
        return self.client.json("/v1/completions", {"model": "tiny-sandbox", "prompt": prompt, "max_tokens": tokens,
                                                    "temperature": 0})

    def wait_serving(self, deadline_s: float) -> float:
        """Seconds until a completion succeeds again; fails past the deadline."""
        started = time.monotonic()
        while time.monotonic() - started < deadline_s:
            try:
                if self.complete()["choices"][0]["text"]:
                    return time.monotonic() - started
            except (urllib.error.URLError, OSError, KeyError, ValueError):
                pass
            time.sleep(2)
        logs = {node: self.on(node, "journalctl", "--no-pager", "--output", "short-precise", "--since", f"-{int(deadline_s) + 60}s",
                              "--unit", "vllmops-vllm", "--unit", "vllmops-vllm-watchdog", check=False)[-6000:]
                for node in self.nodes}
        raise AssertionError(f"the endpoint did not serve a completion again within {deadline_s} s; the units' journals:\n"
                             + "\n".join(f"--- {node}\n{text}" for node, text in logs.items()))

    # --- deploy.yml -------------------------------------------------------------
    def playbook(self, path: str, extra: dict | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
        extras = ["-e", json.dumps(extra)] if extra else []
        return subprocess.run([str(BIN / "ansible-playbook"), path, "-i", str(self.inventory), *extras], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=900)

    def deploy(self, serve_args: dict | None = None, tags: str = "vllm_serve",
               extra: dict | None = None, inventory: Path | None = None, args: tuple[str, ...] = (),
               echo: bool = True) -> subprocess.CompletedProcess:
        extra = dict(extra or {})
        if serve_args is not None:
            extra["vllm_serve_args"] = serve_args
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(extra, handle)
        env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
        try:
            proc = subprocess.run([str(BIN / "ansible-playbook"), "deploy.yml", "-i", str(inventory or self.inventory), "--tags", tags,
                                   "-e", f"@{handle.name}", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=900)
        finally:
            os.unlink(handle.name)
        if echo:
            print(proc.stdout[-6000:], proc.stderr[-2000:])
        return proc
