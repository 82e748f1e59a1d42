"""The API behind the proxy on the head, asked from this machine (the
controller: not a member of the cluster) as a client would: https with the
CA and the key the deployment left in ~/.vllmops/secrets/sandbox.

vLLM's own --api-key guards only /v1, /v2 and /inference: the proxy must
refuse the rest (/invocations runs full inference, /tokenize, /metrics...)
without the key, and everything outside its allow list even with it.

From a host outside the cluster (the firewall's outsider container,
tests/sandbox/outsider.py) the same refusals belong in the firewall's tests;
here the controller plays the client."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from api_client import secrets_dir
from conftest import INVENTORY

COMPLETION = {"model": "tiny-sandbox", "prompt": "Hello", "max_tokens": 4}
# The routes vLLM's own key leaves open, and the ones it guards; none is in the default allow list but /v1/*.
OPEN_IN_VLLM = [("/invocations", COMPLETION), ("/tokenize", {"model": "tiny-sandbox", "prompt": "Hello"}),
                ("/pause", {}), ("/version", None)]
ALLOWED = [("/v1/completions", COMPLETION), ("/v1/models", None), ("/metrics", None)]
PROXY_CONF = "/etc/vllmops/api-proxy/nginx.conf"


def vllm_itself(sandbox, path: str, body: dict | None) -> int:
    """The status vLLM gives on the head's loopback, without a key (what the proxy stands in front of)."""
    script = ("import json, sys, urllib.request, urllib.error\n"
              "body = json.loads(sys.argv[2]); data = None if body is None else json.dumps(body).encode()\n"
              "req = urllib.request.Request('http://127.0.0.1:8001' + sys.argv[1], data=data,"
              " headers={'Content-Type': 'application/json'})\n"
              "try:\n    print(urllib.request.urlopen(req, timeout=30).status)\n"
              "except urllib.error.HTTPError as err:\n    print(err.code)\n")
    return int(sandbox.on(sandbox.head, "python3", "-c", script, path, json.dumps(body)))


def test_without_the_key_every_route_but_health_is_refused(sandbox):
    client = sandbox.client
    assert client.request("/health", key=None)[0] == 200
    for path, body in [*ALLOWED, *OPEN_IN_VLLM, ("/v1/no-such-route", None), ("/", None)]:
        for key in (None, "not-the-key-" + "x" * 20, client.key.upper()):
            status, text = client.request(path, body, key=key)
            assert status == 401, f"{path} with key {key!r}: HTTP {status} {text[:200]}"
    # What the proxy is for: vLLM itself serves these without any key.
    assert vllm_itself(sandbox, "/tokenize", OPEN_IN_VLLM[1][1]) == 200
    assert vllm_itself(sandbox, "/invocations", COMPLETION) == 200


def test_with_the_key_it_serves_a_real_completion_and_streams(sandbox):
    done = sandbox.client.json("/v1/completions", {**COMPLETION, "max_tokens": 8, "temperature": 0})
    assert done["usage"]["completion_tokens"] == 8 and done["system_fingerprint"].startswith("vllm-0.32.0")
    assert [model["id"] for model in sandbox.client.json("/v1/models")["data"]] == ["tiny-sandbox"]
    status, text = sandbox.client.request("/v1/chat/completions", {
        "model": "tiny-sandbox", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stream": True})
    events = [line for line in text.splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "data: [DONE]" and len(events) >= 3, text[:500]


def test_routes_outside_the_allow_list_are_refused_even_with_the_key(sandbox):
    for path, body in [*OPEN_IN_VLLM, ("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/tmp"}),
                       ("/v1/completions/", COMPLETION), ("/docs", None)]:
        status, text = sandbox.client.request(path, body)
        assert status == 404, f"{path}: HTTP {status} {text[:200]}"
        assert "not an allowed route" in text


def test_limits_refuse_a_request_body_over_the_size_limit(sandbox):
    status, _ = sandbox.client.request("/v1/completions", {**COMPLETION, "prompt": "x" * (17 * 1024 * 1024)})
    assert status == 413


def test_tls_is_verified_and_plain_http_gets_no_api(sandbox):
    host = sandbox.url.split("//")[1].split(":")[0]
    with pytest.raises(urllib.error.URLError) as refused:  # the system's trust store does not know the cluster's CA
        urllib.request.urlopen(sandbox.url + "/health", timeout=10, context=ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    context = ssl.create_default_context(cafile=str(secrets_dir(INVENTORY) / "api-ca.crt"))
    with socket.create_connection((host, 8000), timeout=10) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with socket.create_connection((host, 8000), timeout=10) as raw:  # http to the https port: nginx's 400, no API
        raw.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
        assert raw.recv(200).startswith(b"HTTP/1.1 400")


def test_vllm_listens_on_the_heads_loopback_only(sandbox):
    host = sandbox.url.split("//")[1].split(":")[0]
    # Nothing answers from here: refused (nothing listens on that address) or, with the firewall, dropped.
    with pytest.raises((ConnectionRefusedError, TimeoutError)):
        socket.create_connection((host, 8001), timeout=10)
    listeners = sandbox.on(sandbox.head, "ss", "-Htln", "sport = :8001").split()
    assert "127.0.0.1:8001" in listeners and "0.0.0.0:8001" not in listeners and "*:8001" not in listeners


def test_the_key_is_kept_secret(sandbox):
    secrets = secrets_dir(INVENTORY)
    key = (secrets / "api-key").read_text().strip()
    assert stat.S_IMODE(os.stat(secrets / "api-key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(secrets).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(secrets / "api-ca.key").st_mode) == 0o600
    assert sandbox.on(sandbox.head, "stat", "-c", "%a %U", PROXY_CONF) == "600 root"
    assert sandbox.on(sandbox.head, "stat", "-c", "%a %U", "/etc/vllmops/vllm.env") == "600 root"
    for node in sandbox.nodes:
        units = sandbox.on(node, "sh", "-c", "cat /etc/systemd/system/vllmops-*.service")
        argv = sandbox.on(node, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '", check=False)
        assert key not in units and key not in argv, node


def test_a_bad_setting_is_refused_before_the_running_proxy_changes(sandbox):
    def proxy() -> tuple[str, str]:
        pid = sandbox.on(sandbox.head, "systemctl", "show", "--property=MainPID", "--value", "vllmops-api-proxy")
        return pid, hashlib.sha256(sandbox.on(sandbox.head, "cat", PROXY_CONF).encode()).hexdigest()

    before = proxy()
    # A certificate nginx cannot load: written beside the working one, refused by nginx -t.
    bad_cert = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----"
    bad_key = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----"
    run = sandbox.deploy(tags="api_proxy", extra={"api_proxy_tls_certificate": bad_cert, "api_proxy_tls_private_key": bad_key})
    assert run.returncode != 0 and "nginx -t refused the new API proxy configuration" in run.stdout, run.stdout[-3000:]
    assert "the running proxy keeps its working configuration" in run.stdout
    assert bad_key.splitlines()[1] not in run.stdout + run.stderr
    assert proxy() == before
    assert sandbox.complete()["choices"][0]["text"] is not None
    # A limit nginx would misread: refused by the role's own check, naming the variable.
    run = sandbox.deploy(tags="api_proxy", extra={"api_proxy_max_body_size": "lots"})
    assert run.returncode != 0 and "api_proxy_max_body_size" in run.stdout and "lots" in run.stdout, run.stdout[-3000:]
    assert proxy() == before
    # The inventory's settings again: the stray certificate files go, the proxy is not reloaded.
    run = sandbox.deploy(tags="api_proxy")
    assert run.returncode == 0, run.stdout[-3000:]
    assert proxy() == before
    assert sandbox.on(sandbox.head, "sh", "-c", "ls /etc/vllmops/api-proxy/tls | wc -l") == "2"
    assert Path(secrets_dir(INVENTORY) / "api-ca.crt").exists()
