"""The API proxy run for real on this machine, without Docker: Debian 12's
nginx and njs unpacked into a cache (never installed), the role's own
templates rendered by ansible-playbook, nginx in the foreground, and small
Python HTTP servers standing in for vLLM's replicas; the metrics role's
scrape configuration rendered the same way. Shared by
tests/integration/test_api_proxy_router.py and benchmarks/router_latency_bench.py."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from debian_package import free_port, unpack

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROLE = ROOT / "roles/api_proxy"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllmops/nginx-router"
# Debian 12: the package holding /usr/sbin/nginx, and njs 0.7.9 built for it.
PACKAGES = {"nginx": "usr/sbin/nginx", "libnginx-mod-http-js": "usr/lib/nginx/modules/ngx_http_js_module.so"}


def nginx_binaries() -> tuple[Path, Path]:
    """nginx and its njs module from Debian's packages, unpacked once into CACHE."""
    paths = []
    for package, inside in PACKAGES.items():
        path = CACHE / package / inside
        if not path.is_file():
            unpack(package, CACHE / package)
        paths.append(path)
    nginx, module = paths
    proc = subprocess.run([str(nginx), "-v"], capture_output=True, text=True)
    assert proc.returncode == 0, f"{nginx} does not run here: {proc.stderr}"
    return nginx, module


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (clients trust it as their CA), and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vllmops router test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "proxy.crt", directory / "proxy.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


# --- vLLM's stand-in ----------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as nginx's upstream keepalive needs
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait for a delayed ACK
    server: _Server

    def log_message(self, *args) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.replica.connections.add(self.connection)

    def finish(self) -> None:
        self.server.replica.connections.discard(self.connection)
        super().finish()

    def _json(self, status: int, body: dict | None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        replica = self.server.replica
        path = self.path.partition("?")[0]  # as vLLM, which reads no query here (/metrics?model=NAME)
        if path == "/health":
            self._json(200 if replica.healthy else 503, None)
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": replica.model, "object": "model", "owned_by": "vllm"}]})
        elif path == "/metrics":
            self._metrics()
        else:
            self._json(404, {"detail": "Not Found"})

    def _metrics(self) -> None:
        """Prometheus's text format, as vLLM's: a gauge of its model, and one naming this replica."""
        replica = self.server.replica
        data = (f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name="{replica.model}"}} 0.0\n'
                f'# TYPE vllmops_standin_replica gauge\nvllmops_standin_replica{{replica="{replica.name}"}} 1\n').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        replica = self.server.replica
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"detail": "Not Found"})
        replica.count()
        if replica.overloaded:
            return self._json(503, {"object": "error", "message": "overloaded", "code": 503})
        answer = {"id": f"cmpl-{secrets.token_hex(4)}", "model": body.get("model"), "replica": replica.name,
                  "choices": [{"index": 0, "text": "ok"}]}
        if not body.get("stream"):
            return self._json(200, answer)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index in range(replica.chunks):
            self._chunk(f"data: {json.dumps(dict(answer, choices=[{'index': 0, 'text': f'token{index}'}]))}\n\n")
            time.sleep(replica.chunk_gap)
        self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # every nginx worker opening connections at once
    replica: Replica

    def handle_error(self, request, client_address) -> None:
        pass  # a connection nginx (or stop()) cut: what a client sees is what the tests look at


class Replica:
    """One replica's vLLM API server: /health, /v1/models (its model), /metrics (naming the replica: the
    gauge vllmops_standin_replica{replica=NAME}), POST /v1/completions and /v1/chat/completions answering
    which replica served them (server-sent events with "stream": true; 503 while overloaded)."""

    def __init__(self, model: str, name: str, port: int | None = None, chunks: int = 5, chunk_gap: float = 0.1) -> None:
        self.model, self.name, self.port = model, name, port or free_port()
        self.chunks, self.chunk_gap, self.healthy, self.overloaded = chunks, chunk_gap, True, False
        self.served, self.connections = 0, set()
        self._lock = threading.Lock()
        self._server: _Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def count(self) -> None:
        with self._lock:
            self.served += 1

    def start(self) -> Replica:
        self._server = _Server(("127.0.0.1", self.port), _Handler)
        self._server.replica = self
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """As a killed process: the port closed and every open connection (nginx's kept-alive ones) cut."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        for conn in list(self.connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server = None


# --- The proxy ---------------------------------------------------------------------------------------------


def render(directory: Path, configs: dict[str, dict]) -> dict[str, Path]:
    """Each config's nginx.conf (and router script with api_proxy_services) from the role's templates and its
    defaults, by one ansible-playbook run; the configuration is checked by nginx -t after the script is
    written, as configure.yml does. configs: name -> the variables that differ from the role's defaults."""
    nginx, _ = nginx_binaries()
    plays = []
    for name, overrides in configs.items():
        conf = directory / name / "nginx.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        variables = dict(overrides, _api_proxy_router_file=str(conf.parent / "router.js"))
        (conf.parent / "vars.json").write_text(json.dumps(variables))
        router = {"name": "Write the router script", "when": "_api_proxy_router | bool",
                  "ansible.builtin.template": {"src": str(ROLE / "templates/router.js.j2"),
                                               "dest": variables["_api_proxy_router_file"], "mode": "0644"}}
        config = {"name": "Write the configuration, checked with nginx -t first",
                  "ansible.builtin.template": {"src": str(ROLE / "templates/nginx.conf.j2"), "dest": str(conf),
                                               "mode": "0600",
                                               "validate": f"{nginx} -t -q -e stderr -p {conf.parent} -c %s"}}
        plays.append({"name": name, "hosts": "localhost", "connection": "local", "gather_facts": False,
                      "vars_files": [str(ROLE / "defaults/main.yml"), str(conf.parent / "vars.json")],
                      "vars": {"ansible_python_interpreter": sys.executable}, "tasks": [router, config]})
    _play(directory / "render.yml", plays)
    return {name: directory / name / "nginx.conf" for name in configs}


def scrape_config(directory: Path, variables: dict) -> Path:
    """roles/metrics' prometheus.yml in directory, rendered by ansible-playbook from the role's template over its
    defaults and roles/vllmops' (variables: the rest, the task's _metrics_* included)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vars.json").write_text(json.dumps(variables))
    task = {"name": "Write prometheus.yml",
            "ansible.builtin.template": {"src": str(ROOT / "roles/metrics/templates/prometheus.yml.j2"),
                                         "dest": str(directory / "prometheus.yml"), "mode": "0644"}}
    _play(directory / "render.yml", [{
        "name": "prometheus.yml", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROOT / "roles/vllmops/defaults/main.yml"), str(ROOT / "roles/metrics/defaults/main.yml"),
                       str(directory / "vars.json")],
        "vars": {"ansible_python_interpreter": sys.executable}, "tasks": [task]}])
    return directory / "prometheus.yml"


def _play(playbook: Path, plays: list[dict]) -> None:
    """ansible-playbook on localhost with the collection's ansible.cfg; fails the test when the run fails."""
    playbook.write_text(json.dumps(plays))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def proxy_vars(directory: Path, port: int, key: str, cert: tuple[Path, Path], services: list[dict] | None = None,
               upstream: str = "127.0.0.1:8001") -> dict:
    """The variables a proxy on 127.0.0.1:port needs here (its files under directory), services or one upstream."""
    _, module = nginx_binaries()
    (directory / "temp").mkdir(parents=True, exist_ok=True)
    host, upstream_port = upstream.rsplit(":", 1)
    return {"vllmops_units": {"api_proxy": "vllmops-api-proxy"}, "vllmops_api_port": port, "vllmops_api_key": key,
            "api_proxy_listen_addresses": ["127.0.0.1"], "api_proxy_upstream_host": host,
            "api_proxy_upstream_port": int(upstream_port), "api_proxy_access_log": False,
            "_api_proxy_tls_files": {"cert": str(cert[0]), "key": str(cert[1])},
            "_api_proxy_pid_file": str(directory / "nginx.pid"), "_api_proxy_temp_dir": str(directory / "temp"),
            # Workers as www-data could not reach the temporary files under a test's own 0700 directory.
            "_api_proxy_user": "root" if os.geteuid() == 0 else "www-data",
            "api_proxy_njs_module": str(module), "api_proxy_services": services or []}


class Nginx:
    """nginx in the foreground on a rendered configuration, until stopped; its log beside the configuration."""

    def __init__(self, conf: Path, port: int) -> None:
        self.conf, self.port, self.log = conf, port, conf.parent / "nginx.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Nginx:
        nginx, _ = nginx_binaries()
        # A file, not a pipe: nginx's workers would block writing to a full pipe nobody reads.
        with self.log.open("w") as log:
            self.proc = subprocess.Popen([str(nginx), "-e", "stderr", "-p", str(self.conf.parent), "-c", str(self.conf),
                                          "-g", "daemon off;"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"nginx exited ({self.proc.returncode}): {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"nginx did not listen on {self.port} within 10 s")

    def stop(self) -> str:
        """Stopped (SIGQUIT: graceful); what it wrote to its error log."""
        if self.proc is None:
            return ""
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return self.log.read_text()

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Client:
    """A kept-alive client of one address: https with the certificate checked (cafile) and the key, or plain http."""

    def __init__(self, port: int, key: str | None = None, cafile: Path | None = None, timeout: float = 30) -> None:
        self.port, self.key, self.timeout = port, key, timeout
        self.context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        if self.context is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=self.timeout, context=self.context)

    def send(self, method: str, path: str, body: dict | str | bytes | None = None, key: bool = True):
        """The response, its headers read (read its body with .read(), or line by line)."""
        headers = {}
        if key and self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body) if isinstance(body, dict) else body
        self.conn.request(method, path, body, headers)
        return self.conn.getresponse()

    def request(self, method: str, path: str, body: dict | str | bytes | None = None, key: bool = True) -> tuple[int, bytes]:
        response = self.send(method, path, body, key)
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()
