"""A client of the cluster's API as a user has it: the URL, the key and the CA
the deployment left on the controller (vllmops_secrets_dir: api-key,
api-ca.crt), the certificate verified. Used by endpoint.py, the e2e tests and
the benchmarks.

    ApiClient.for_inventory(Path("inventories/sandbox")).request("/v1/models")
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import yaml

API_PORT = 8000


def secrets_dir(inventory: Path) -> Path:
    """Where the deployment keeps the secrets it generated (vllmops_secrets_dir's default)."""
    return Path(os.environ["HOME"]) / ".vllmops" / "secrets" / inventory.resolve().name


def head(inventory: Path) -> tuple[str, str]:
    """The head's inventory name and the address this machine reaches it on."""
    data = yaml.safe_load((inventory / "hosts.yml").read_text())
    group = data["all"]["children"]["vllm_nodes"]
    name = group.get("vars", {}).get("vllmops_head_host") or next(iter(group["hosts"]))
    return name, group["hosts"][name]["ansible_host"]


class ApiClient:
    def __init__(self, url: str, key: str | None = None, cafile: Path | None = None) -> None:
        self.url, self.key = url.rstrip("/"), key
        self.context = ssl.create_default_context(cafile=str(cafile)) if url.startswith("https") and cafile else None

    @classmethod
    def for_inventory(cls, inventory: Path, port: int = API_PORT, host: str | None = None) -> ApiClient:
        secrets = secrets_dir(inventory)
        return cls(f"https://{host or head(inventory)[1]}:{port}", key=(secrets / "api-key").read_text().strip(),
                   cafile=secrets / "api-ca.crt")

    def request(self, path: str, body: dict | None = None, key: str | bool | None = True,
                timeout: float = 60, method: str | None = None) -> tuple[int, str]:
        """(HTTP status, body text). key: True - the client's key, a string - that one, None/False - no key."""
        headers = {"Content-Type": "application/json"}
        sent = self.key if key is True else key or None
        if sent:
            headers["Authorization"] = f"Bearer {sent}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.context) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def json(self, path: str, body: dict | None = None, timeout: float = 60) -> dict:
        """The answer of a request with the key, which must succeed."""
        status, text = self.request(path, body, timeout=timeout)
        if status != 200:
            raise urllib.error.HTTPError(self.url + path, status, text[:500], None, None)  # type: ignore[arg-type]
        return json.loads(text)

    def healthy(self, timeout: float = 3) -> bool:
        try:
            return self.request("/health", key=None, timeout=timeout)[0] == 200
        except (urllib.error.URLError, OSError):
            return False
