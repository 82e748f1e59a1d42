# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stream a Docker image from one source to several nodes: the engine's save
(GET /images/NAME/get) into the receiver engine's load (POST /images/load)
over HTTP, with no temporary file of the whole image anywhere.

The source (a node that has the image, or a `docker save` archive on the
controller) serves each receiver once, on a path that is the receiver's
one-time token; each receiver pipes what it reads into `docker load` and
checks the image ID it got. Receivers run in parallel; each gets its own
stream.
"""

from __future__ import annotations

import hmac
import http.client
import json
import os
import tarfile
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible.module_utils.urls import open_url
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerError

CHUNK = 1 << 20


class TransferError(Exception):
    pass


def archive_image(path):
    """(image ID, repo tags, size in bytes) of a `docker save` archive, from its manifest."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            manifest = json.load(tar.extractfile("manifest.json"))
    except (OSError, KeyError, tarfile.TarError, ValueError) as err:
        raise TransferError(f"{path} is not a `docker save` archive ({err})") from err
    if len(manifest) != 1:
        raise TransferError(f"{path} holds {len(manifest)} images; the image role copies archives of exactly one")
    config = manifest[0]["Config"]
    digest = config.split("/")[-1].split(".")[0]
    return "sha256:" + digest, manifest[0].get("RepoTags") or [], os.path.getsize(path)


def local_image(docker, image):
    """(image ID, repo tags, size) of an image on the engine of `docker` (a DockerClient), None when it is absent."""
    try:
        info = docker.image_inspect(image)
    except DockerError as err:
        raise TransferError(f"inspecting {image} on this host's Docker Engine failed: {err}") from err
    if info is None:
        return None
    return info["Id"], info.get("RepoTags") or [], info.get("Size", 0)


class ImageStream:
    """What each GET streams: the engine's save of image, or the archive file."""

    def __init__(self, docker, image=None, archive=None):
        self.docker, self.image, self.archive = docker, image, archive

    def stream(self, write):
        if self.archive:
            with open(self.archive, "rb") as data:
                return _pump(data, write)
        sent = 0
        try:
            for chunk in self.docker.image_save(self.image):
                write(chunk)
                sent += len(chunk)
        except DockerError as err:
            raise TransferError(f"docker save {self.image} failed after {sent} bytes: {err}") from err
        return sent


def _pump(reader, write):
    sent = 0
    while True:
        chunk = reader.read(CHUNK)
        if not chunk:
            return sent
        write(chunk)
        sent += len(chunk)


def serve(source, address, port, tokens, deadline_s, idle_s=120):
    """Serve the source once to each token's receiver; return {token: bytes sent or error}.

    Returns when every token was served; at the deadline; or when no copy is
    running and nothing was asked for idle_s seconds (a receiver that failed
    before it connected). Tokens not served are reported as such."""
    pending = set(tokens)
    results = {}
    lock = threading.Lock()
    done = threading.Event()
    activity = {"streams": 0, "last": time.monotonic()}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            token = self.path.lstrip("/")
            with lock:
                match = next((t for t in pending if hmac.compare_digest(t, token)), None)
                if match is not None:
                    pending.discard(match)
            if match is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            if source.archive:
                self.send_header("Content-Length", str(os.path.getsize(source.archive)))
            self.end_headers()
            with lock:
                activity["streams"] += 1
            try:
                results[match] = source.stream(self.wfile.write)
            except (OSError, TransferError) as err:
                results[match] = f"stream broke: {err}"
            with lock:
                activity["streams"] -= 1
                activity["last"] = time.monotonic()
                if not pending and len(results) == len(tokens):
                    done.set()

    try:
        server = ThreadingHTTPServer((address, port), Handler)
    except OSError as err:
        raise TransferError(f"cannot listen on {address}:{port} ({err.strerror}); set image_transfer_port to a free port") from err
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    end = time.monotonic() + deadline_s
    try:
        while not done.wait(1) and time.monotonic() < end:
            with lock:
                if not activity["streams"] and time.monotonic() - activity["last"] > idle_s:
                    break
    finally:
        server.shutdown()
        server.server_close()
    return {token: results.get(token, "never requested before the deadline") for token in tokens}


class _Progress:
    def __init__(self, path, total):
        self.path, self.total, self.started = path, total, time.monotonic()
        self.last = 0.0

    def update(self, received, state="copying", force=False):
        now = time.monotonic()
        if not self.path or (not force and now - self.last < 1):
            return
        self.last = now
        elapsed = now - self.started
        report = {"state": state, "bytes": received, "total_bytes": self.total, "seconds": round(elapsed, 1),
                  "mb_per_s": round(received / 1e6 / elapsed, 1) if elapsed else 0.0}
        partial = self.path + ".part"
        with open(partial, "w") as out:
            json.dump(report, out)
        os.replace(partial, self.path)


def receive(docker, url, connect_deadline_s=60, progress_path=None, total_bytes=None):
    """GET url into the engine's load (`docker`, a DockerClient); return (bytes received, seconds, what it said)."""
    end = time.monotonic() + connect_deadline_s
    while True:
        try:
            response = open_url(url, timeout=60)
            break
        except urllib.error.HTTPError as err:
            raise TransferError(f"the image source refused {url.rsplit('/', 1)[0]}/… (HTTP {err.code})") from err
        except (urllib.error.URLError, OSError) as err:
            if time.monotonic() > end:
                raise TransferError(f"cannot reach the image source at {url.rsplit('/', 1)[0]} ({err}); "
                                    "check that this node reaches that address (image_transfer_address)") from err
            time.sleep(0.5)
    progress = _Progress(progress_path, total_bytes)
    started = time.monotonic()
    received = 0

    def chunks():
        nonlocal received
        while True:
            chunk = response.read(CHUNK)
            if not chunk:
                return
            received += len(chunk)
            progress.update(received)
            yield chunk

    try:
        with response:
            said = docker.image_load(chunks())
    except (OSError, ValueError, http.client.HTTPException) as err:
        progress.update(received, "failed", force=True)
        raise TransferError(f"the copy broke after {received} bytes: {err}") from err
    except DockerError as err:
        progress.update(received, "failed", force=True)
        raise TransferError(f"docker load failed after {received} bytes: {err}") from err
    progress.update(received, "done", force=True)
    return received, time.monotonic() - started, said
