# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one Docker Engine client of this collection: the Engine API over its
unix socket, with the standard library only (nodes may lack `requests` and
the docker SDK). Every failure is a DockerError carrying the engine's own
message; a missing image, container or path is None, not an error, where
callers ask "is it there".

Paths are unversioned: the engine answers in its own API version, which
every engine this collection supports (Docker 20.10 and newer) understands.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import urllib.parse
from collections.abc import Iterable, Iterator

DEFAULT_HOST = "unix:///var/run/docker.sock"
CHUNK = 1 << 20

# Docker's multiplexed stream: 1 byte stream type, 3 zero bytes, 4 bytes big-endian length.
_FRAME_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2


class DockerError(Exception):
    """What the engine said (status is its HTTP status; None when it could not be reached or did not answer
    in time, timed_out telling which)."""

    def __init__(self, message: str, status: int | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out

    @property
    def unreachable(self) -> bool:
        return self.status is None


class ContainerRun:
    """The outcome of DockerClient.run: exit status, output, and whether it was killed at its timeout."""

    def __init__(self, status: int | None, stdout: bytes, stderr: bytes, timed_out: bool) -> None:
        self.status, self.stdout, self.stderr, self.timed_out = status, stdout, stderr, timed_out


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._socket_path)


def socket_path(host: str | None = None) -> str:
    """The socket path of a unix:// DOCKER_HOST (the argument, else the environment, else the default)."""
    host = host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST
    if not host.startswith("unix://"):
        raise DockerError(f"docker_host {host} is not a unix:// socket; this collection talks to the local "
                          "Docker Engine over its unix socket only")
    return host[len("unix://"):]


def demultiplex(data: bytes) -> tuple[bytes, bytes]:
    """Split Docker's multiplexed stream (exec and logs of a container without a TTY) into (stdout, stderr)."""
    out, err = bytearray(), bytearray()
    offset = 0
    while offset + _FRAME_HEADER.size <= len(data):
        kind, size = _FRAME_HEADER.unpack_from(data, offset)
        offset += _FRAME_HEADER.size
        (err if kind == _STDERR else out).extend(data[offset:offset + size])
        offset += size
    return bytes(out), bytes(err)


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="/:@")


def _engine_message(status: int, body: bytes) -> str:
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return message or body.decode("utf-8", errors="replace").strip() or f"HTTP {status}"


def _json_messages(body: bytes) -> Iterator[dict]:
    """The JSON objects of a progress stream (docker load), however they are separated."""
    decoder = json.JSONDecoder()
    text = body.decode("utf-8", errors="replace")
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            return
        try:
            message, index = decoder.raw_decode(text, index)
        except ValueError:
            yield {"stream": text[index:]}
            return
        if isinstance(message, dict):
            yield message


class _Producer:
    """An iterable request body that remembers the exception its producer raised."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks, self.failed = chunks, None

    def __iter__(self) -> Iterator[bytes]:
        iterator = iter(self.chunks)
        while True:
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            except BaseException as err:
                self.failed = err
                raise
            yield chunk


def _timed_out(seconds: float | None) -> DockerError:
    return DockerError(f"Docker Engine did not answer within {seconds} s", timed_out=True)


def _read(response: http.client.HTTPResponse, amount: int | None = None, timeout: float | None = None) -> bytes:
    """Read a response body; a connection that breaks or stalls mid-answer is a DockerError."""
    try:
        return response.read(amount)
    except TimeoutError as err:
        raise _timed_out(timeout) from err
    except (OSError, http.client.HTTPException) as err:
        raise DockerError(f"the Docker Engine's answer broke off ({err!r})") from err


class DockerClient:
    """The Docker Engine at `host` (unix://PATH; default: $DOCKER_HOST, else /var/run/docker.sock)."""

    def __init__(self, host: str | None = None, timeout: float = 60) -> None:
        self.socket_path = socket_path(host)
        self.timeout = timeout

    # -- transport -----------------------------------------------------------------

    def _send(self, method: str, path: str, query: dict | None = None, body=None, headers: dict | None = None,
              timeout: float | None = -1) -> tuple[_UnixHTTPConnection, http.client.HTTPResponse]:
        """Send a request; return the open connection and the response when its status is 2xx.

        An exception raised by an iterable body propagates unchanged."""
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        conn = _UnixHTTPConnection(self.socket_path, self.timeout if timeout == -1 else timeout)
        producer = _Producer(body) if body is not None and not isinstance(body, bytes) else None
        try:
            conn.request(method, url, body=producer or body, headers=headers or {})
            response = conn.getresponse()
        except BaseException as err:
            conn.close()
            if producer is not None and producer.failed is err:
                raise
            if isinstance(err, TimeoutError):
                raise _timed_out(conn.timeout) from err
            if isinstance(err, (OSError, http.client.HTTPException)):
                raise DockerError(f"Docker Engine does not answer on {self.socket_path} "
                                  f"({getattr(err, 'strerror', None) or err})") from err
            raise
        if response.status >= 300:
            text = response.read()
            conn.close()
            raise DockerError(_engine_message(response.status, text), response.status)
        return conn, response

    def _call(self, method: str, path: str, query: dict | None = None, payload=None,
              timeout: float | None = -1) -> bytes:
        body, headers = None, {}
        if payload is not None:
            body, headers = json.dumps(payload).encode(), {"Content-Type": "application/json"}
        conn, response = self._send(method, path, query, body, headers, timeout)
        try:
            return _read(response, timeout=conn.timeout)
        finally:
            conn.close()

    def _json(self, method: str, path: str, query: dict | None = None, payload=None, timeout: float | None = -1):
        body = self._call(method, path, query, payload, timeout)
        return json.loads(body) if body.strip() else None

    # -- engine --------------------------------------------------------------------

    def info(self) -> dict:
        """GET /info: what `docker info` shows."""
        return self._json("GET", "/info")

    def version(self) -> dict:
        return self._json("GET", "/version")

    # -- images --------------------------------------------------------------------

    def image_inspect(self, name: str) -> dict | None:
        """What `docker image inspect` shows, None when the engine has no such image."""
        try:
            return self._json("GET", f"/images/{_quote(name)}/json")
        except DockerError as err:
            if err.status == 404:
                return None
            raise

    def image_save(self, name: str, timeout: float | None = 600) -> Iterator[bytes]:
        """`docker save NAME` as a stream of chunks (an archive of one image)."""
        conn, response = self._send("GET", f"/images/{_quote(name)}/get", timeout=timeout)
        try:
            while True:
                chunk = _read(response, CHUNK, timeout)
                if not chunk:
                    return
                yield chunk
        finally:
            conn.close()

    def image_load(self, chunks: Iterable[bytes], timeout: float | None = 3600) -> str:
        """`docker load` of a `docker save` archive sent as chunks; returns what the engine said.

        An exception raised while producing the chunks propagates unchanged (the
        engine sees a broken upload and loads nothing)."""
        conn, response = self._send("POST", "/images/load", {"quiet": "1"}, body=chunks,
                                    headers={"Content-Type": "application/x-tar"},
                                    timeout=timeout)
        try:
            body = _read(response, timeout=timeout)
        finally:
            conn.close()
        said = []
        for message in _json_messages(body):
            if message.get("error") or message.get("errorDetail"):
                raise DockerError(message.get("error") or message["errorDetail"].get("message", "load failed"), 500)
            if message.get("stream"):
                said.append(message["stream"].strip())
        return "\n".join(line for line in said if line)

    # -- containers ----------------------------------------------------------------

    def containers(self, label: str | None = None) -> list[dict]:
        """What `docker ps --all [--filter label=LABEL]` lists (the engine's summaries)."""
        query = {"all": "1"}
        if label:
            query["filters"] = json.dumps({"label": [label]})
        return self._json("GET", "/containers/json", query)

    def container_create(self, image: str, name: str | None = None, entrypoint: list[str] | None = None,
                         cmd: list[str] | None = None, labels: dict | None = None,
                         device_requests: list[dict] | None = None, env: list[str] | None = None,
                         host_config: dict | None = None) -> str:
        """`docker create`; returns the container ID. The container is not started. host_config adds to the
        engine's HostConfig (Binds, NetworkMode...)."""
        config: dict = {"Image": image, "Labels": labels or {}, "HostConfig": dict(host_config or {})}
        if env:
            config["Env"] = env
        if entrypoint is not None:
            config["Entrypoint"] = entrypoint
        if cmd is not None:
            config["Cmd"] = cmd
        if device_requests:
            config["HostConfig"]["DeviceRequests"] = device_requests
        created = self._json("POST", "/containers/create", {"name": name} if name else None, config)
        return created["Id"]

    def container_start(self, container: str) -> None:
        self._call("POST", f"/containers/{_quote(container)}/start")

    def container_wait(self, container: str, timeout: float | None) -> int:
        """The container's exit status; a DockerError with timed_out when it runs longer than timeout."""
        return self._json("POST", f"/containers/{_quote(container)}/wait", timeout=timeout)["StatusCode"]

    def container_kill(self, container: str) -> None:
        try:
            self._call("POST", f"/containers/{_quote(container)}/kill")
        except DockerError as err:
            if err.status not in (404, 409):  # gone, or no longer running
                raise

    def container_logs(self, container: str) -> tuple[bytes, bytes]:
        """(stdout, stderr) of a container created without a TTY."""
        return demultiplex(self._call("GET", f"/containers/{_quote(container)}/logs", {"stdout": "1", "stderr": "1"}))

    def container_remove(self, container: str) -> None:
        """`docker rm -f`; a container that is already gone is fine."""
        try:
            self._call("DELETE", f"/containers/{_quote(container)}", {"force": "1", "v": "1"})
        except DockerError as err:
            if err.status != 404:
                raise

    def container_archive(self, container: str, path: str) -> bytes | None:
        """`docker cp CONTAINER:PATH -`: a tar archive of PATH (a symlink is not followed), None when absent."""
        try:
            return self._call("GET", f"/containers/{_quote(container)}/archive", {"path": path})
        except DockerError as err:
            if err.status == 404:
                return None
            raise

    def run(self, image: str, entrypoint: list[str], cmd: list[str], timeout: float, name: str | None = None,
            labels: dict | None = None, device_requests: list[dict] | None = None, env: list[str] | None = None,
            host_config: dict | None = None) -> ContainerRun:
        """`docker run --rm` bounded by timeout: a container still running then is killed. The container is
        removed in every case, also when creating or starting it fails (a DockerError)."""
        container = self.container_create(image, name, entrypoint, cmd, labels, device_requests, env, host_config)
        try:
            self.container_start(container)
            try:
                status, timed_out = self.container_wait(container, timeout), False
            except DockerError as err:
                if not err.timed_out:
                    raise
                self.container_kill(container)
                status, timed_out = None, True
            out, err = self.container_logs(container)
            return ContainerRun(status, out, err, timed_out)
        finally:
            self.container_remove(container)

    def exec_run(self, container: str, argv: list[str], timeout: float | None = 300) -> tuple[int, bytes, bytes]:
        """`docker exec CONTAINER ARGV...` in a running container: (exit status, stdout, stderr)."""
        created = self._json("POST", f"/containers/{_quote(container)}/exec",
                             payload={"Cmd": argv, "AttachStdout": True, "AttachStderr": True, "Tty": False})
        # The engine takes over the connection and streams the output until the process ends.
        stream = self._call("POST", f"/exec/{created['Id']}/start", payload={"Detach": False, "Tty": False},
                            timeout=timeout)
        out, err = demultiplex(stream)
        status = self._json("GET", f"/exec/{created['Id']}/json")["ExitCode"]
        return status, out, err
