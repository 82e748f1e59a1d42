# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stream a Docker image from one source down a chain of nodes: the engine's
save (GET /images/NAME/get) into each receiver engine's load (POST
/images/load) over HTTP, with no temporary file of the whole image anywhere.
The model's files travel down the same chain (model_files: serve() and
receive_stream() with a model's file stream and writer).

The source (a node that has the image, or a `docker save` archive on the
controller) serves the first receiver, on a path that is that receiver's
one-time token. Each receiver pipes what it reads into `docker load` and, as
the bytes arrive, relays them to the next receiver (its own listener, one
address, the next receiver's one-time token): every uplink carries one copy,
so the time stays about flat in the number of nodes when the network is the
bottleneck.

The relay holds at most `RELAY_BUFFER` bytes in memory (a bounded queue):
a next node that reads slower than this one receives makes this node read
its upstream slower too (backpressure), which costs no disk on the nodes
(where `docker load` already needs the room) and no more time, since the
last node of a chain can never finish before its slowest link anyway.

The stream is framed (`_frame`): data, an end mark with the byte count, or
an error message, so a receiver tells a complete stream from a broken one
and the error of an upstream hop reaches every node below it by name. A
frame holds at most `MAX_FRAME` bytes: a receiver refuses a bigger one
before it allocates anything for it.

A receiver trusts only a sender that proves it holds the hop's token, and
never sends the token itself: it asks for the token's ticket (`ticket()`, an
HMAC-SHA256 keyed by the token) with a fresh random challenge, and the
sender answers with `proof()` (an HMAC-SHA256 keyed by the token over that
challenge) before any frame. A program that took the port first (any local
user can bind an unused port) learns neither the token nor a proof it could
replay, and its stream is refused before anything reads, loads or relays
it. What arrives is checked afterwards as well: the image's content ID, the
sha256 of every model file.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import re
import secrets
import socket
import struct
import tarfile
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

from ansible.module_utils.urls import open_url
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import config_content_id, content_id
from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import write_json

CHUNK = 1 << 20
RELAY_BUFFER = 64 << 20
# The largest frame a receiver accepts (a sender splits bigger chunks): without a cap, one header could make it
# allocate 4 GiB.
MAX_FRAME = 16 << 20
CONTENT_TYPE = "application/vnd.vllmops.image-stream.v2"
CHALLENGE_HEADER = "X-Vllmops-Challenge"
PROOF_HEADER = "X-Vllmops-Proof"
_CHALLENGE = re.compile(r"[0-9a-f]{32}")
_HEADER = struct.Struct(">cI")
_DATA, _END, _ERROR = b"D", b"E", b"X"


class TransferError(Exception):
    pass


class UpstreamError(TransferError):
    """The stream this node reads broke or carried an upstream hop's error."""


class FoundImage(NamedTuple):
    """An image at a source or on a node: its Docker ID there, its content ID (image_identity: the same on every
    image store), tags and size in bytes."""

    image_id: str
    content_id: str | None
    repo_tags: list
    size: int


def archive_image(path):
    """The FoundImage of a `docker save` archive, from its manifest and the config it names (the classic
    store's `<digest>.json` or, from the containerd store, an OCI layout's `blobs/sha256/<digest>`)."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            manifest = json.load(tar.extractfile("manifest.json"))
            if len(manifest) != 1:
                raise TransferError(f"{path} holds {len(manifest)} images; the image role copies archives of exactly one")
            config_name = manifest[0]["Config"]
            config = json.load(tar.extractfile(config_name))
    except (OSError, KeyError, tarfile.TarError, ValueError) as err:
        raise TransferError(f"{path} is not a `docker save` archive ({err})") from err
    digest = config_name.split("/")[-1].split(".")[0]
    return FoundImage("sha256:" + digest, config_content_id(config), manifest[0].get("RepoTags") or [],
                      os.path.getsize(path))


def local_image(docker, image):
    """The FoundImage of an image on the engine of `docker` (a DockerClient), None when it is absent."""
    try:
        info = docker.image_inspect(image)
    except DockerError as err:
        raise TransferError(f"inspecting {image} on this host's Docker Engine failed: {err}") from err
    if info is None:
        return None
    return FoundImage(info["Id"], content_id(info), info.get("RepoTags") or [], info.get("Size", 0))


_LOADED = ("Loaded image: ", "Loaded image ID: ")


def _familiar(name):
    """An image reference as the engine prints it: without docker.io/library/, with :latest where no tag is given."""
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if name.startswith("sha256:") or "@" in name or ":" in name.rsplit("/", 1)[-1]:
        return name
    return name + ":latest"


def loaded_images(said):
    """The images the engine's load says it loaded (`Loaded image: NAME`, `Loaded image ID: ID` when untagged)."""
    return [line[len(prefix):].strip() for line in said.splitlines() for prefix in _LOADED if line.startswith(prefix)]


def check_loaded(said, image, image_id=None):
    """Refuse a load that brought any image but `image` (or, loaded untagged, the image ID `image_id`)."""
    wanted = {_familiar(image), image_id}
    others = [name for name in loaded_images(said) if _familiar(name) not in wanted]
    if others:
        raise TransferError(f"docker load also loaded {', '.join(others)}, not only {image}: the stream held images this "
                            "node was not asked for; check them with `docker image ls` and remove them "
                            "(`docker image rm`)")


def receiver_argument_spec(port, deadline, progress_file, upstream):
    """The options every receiver of a chain has (image_receive, model_receive): where it reads, whom it relays to."""
    return dict(
        url=dict(type="str", required=True, no_log=True),
        progress_file=dict(type="str", default=progress_file),
        connect_deadline=dict(type="int", default=60),
        upstream=dict(type="str", default=upstream),
        relay_token=dict(type="str", default="", no_log=True),
        relay_to=dict(type="str", default="the next node"),
        relay_address=dict(type="str"),
        relay_port=dict(type="int", default=port),
        idle_timeout=dict(type="int", default=120),
        deadline=dict(type="int", default=deadline),
    )


def _frame(kind, payload):
    return _HEADER.pack(kind, len(payload)) + payload


def _data_frames(chunk):
    """chunk as data frames of at most MAX_FRAME bytes each."""
    view = memoryview(chunk)
    return [_frame(_DATA, view[start:start + MAX_FRAME]) for start in range(0, len(view), MAX_FRAME)]


def ticket(token):
    """What a receiver asks for instead of its token: a sender matches it, an eavesdropper cannot turn it back."""
    return hmac.new(token.encode(), b"vllmops-chain ticket/1", hashlib.sha256).hexdigest()


def proof(token, challenge):
    """The sender's answer to a receiver's challenge: only a holder of the token can compute it."""
    return hmac.new(token.encode(), b"vllmops-chain proof/1\0" + challenge.encode(), hashlib.sha256).hexdigest()


def _same(left, right):
    """hmac.compare_digest over text that may hold any character (a request path is latin-1)."""
    return hmac.compare_digest(left.encode("latin-1", "replace"), right.encode("latin-1", "replace"))


class ImageStream:
    """What each GET streams: the engine's save of image, or the archive file."""

    def __init__(self, docker, image=None, archive=None):
        self.docker, self.image, self.archive = docker, image, archive

    def stream(self, write):
        """Call write(chunk) with each chunk; return the bytes sent; TransferError when the source fails."""
        if self.archive:
            with open(self.archive, "rb") as data:
                return _pump(data, write)
        sent = 0
        try:
            for chunk in self.docker.image_save(self.image):
                write(chunk)
                sent += len(chunk)
        except DockerError as err:
            raise TransferError(f"docker save {self.image} on {socket.gethostname()} failed after {sent} bytes: {err}") from err
        return sent


def _pump(reader, write):
    sent = 0
    while True:
        chunk = reader.read(CHUNK)
        if not chunk:
            return sent
        write(chunk)
        sent += len(chunk)


def check_bind_address(address):
    """Refuse an address that listens on every address of the host (anyone who reaches it could try tokens)."""
    try:
        unspecified = ipaddress.ip_address(address).is_unspecified
    except ValueError:
        unspecified = not address  # a host name: bound to what it resolves to
    if unspecified:
        raise TransferError(f"refusing to listen on {address or 'every address'!r}: give the one address the next "
                            "node connects to (image_transfer_bind_address, image_relay_address)")


def serve(source, address, port, tokens, deadline_s, idle_s=120, on_listening=None):
    """Serve the source once to each token's receiver; return {token: bytes sent or error}.

    Returns when every token was served; at the deadline; or when no copy is
    running and nothing was asked for idle_s seconds (a receiver that failed
    before it connected). Tokens not served are reported as such."""
    check_bind_address(address)
    pending = set(tokens)
    tickets = {token: ticket(token) for token in tokens}
    results = {}
    lock = threading.Lock()
    done = threading.Event()
    activity = {"streams": 0, "last": time.monotonic()}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            asked = self.path.lstrip("/")
            challenge = self.headers.get(CHALLENGE_HEADER, "")
            if not _CHALLENGE.fullmatch(challenge):  # not one of our receivers: its token stays unused
                self.send_error(400)
                return
            with lock:
                match = next((t for t in pending if _same(tickets[t], asked)), None)
                if match is not None:
                    pending.discard(match)
            if match is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header(PROOF_HEADER, proof(match, challenge))
            self.end_headers()
            with lock:
                activity["streams"] += 1

            def write(chunk):
                for frame in _data_frames(chunk):
                    self.wfile.write(frame)
            try:
                sent = source.stream(write)
                self.wfile.write(_frame(_END, str(sent).encode()))
                results[match] = sent
            except TransferError as err:
                results[match] = str(err)
                with contextlib.suppress(OSError):
                    self.wfile.write(_frame(_ERROR, str(err).encode()))
            except OSError as err:
                results[match] = f"the receiver stopped reading ({err})"
            with lock:
                activity["streams"] -= 1
                activity["last"] = time.monotonic()
                if not pending and len(results) == len(tokens):
                    done.set()

    try:
        server = ThreadingHTTPServer((address, port), Handler)
    except OSError as err:
        raise TransferError(f"cannot listen on {address}:{port} ({err.strerror}); set image_transfer_port to a free port"
                            " (or the address to one of this host's)") from err
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    if on_listening:
        on_listening()
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


class Relay:
    """The bytes this node receives, held (at most `capacity`, in memory) until the next node has read them.

    put() blocks while the buffer is full (backpressure); a next node that
    reads nothing for idle_s seconds, never connects, or breaks the connection
    is dropped (`failed` says why) and put() no longer waits for it."""

    def __init__(self, to, address, port, token, deadline_s, idle_s=120, capacity=RELAY_BUFFER):
        self.to, self.address, self.port = to, address, port
        self.idle_s, self.capacity = idle_s, capacity
        self.sent = 0
        self.failed = None
        self._chunks = collections.deque()
        self._held = 0
        self._end = None  # (sent, None) or (None, message)
        self._done = False
        self._cond = threading.Condition()
        check_bind_address(address)
        listening = threading.Event()
        self._outcome = {}
        self._thread = threading.Thread(target=self._serve, args=(token, deadline_s, listening), daemon=True)
        self._thread.start()
        while not listening.wait(0.1):
            if not self._thread.is_alive():
                raise TransferError(self._outcome.get("error", "the relay did not start"))

    def _serve(self, token, deadline_s, listening):
        try:
            outcome = serve(self, self.address, self.port, [token], deadline_s, self.idle_s, listening.set)[token]
        except TransferError as err:
            self._outcome["error"] = str(err)
            return
        with self._cond:
            if not isinstance(outcome, int) and self.failed is None and self._end != (None, outcome):
                self.failed = (f"{self.to} did not connect within {self.idle_s} s" if outcome.startswith("never requested")
                               else f"{self.to}: {outcome}")
            self._done = True
            self._cond.notify_all()

    def put(self, chunk):
        with self._cond:
            last = time.monotonic()
            while self._held >= self.capacity and self.failed is None:
                if time.monotonic() - last > self.idle_s:
                    self.failed = f"{self.to} read nothing for {self.idle_s} s (never connected, or stalled)"
                    break
                self._cond.wait(1)
            if self.failed is None:
                self._chunks.append(chunk)
                self._held += len(chunk)
                self._cond.notify_all()

    def finish(self, total):
        with self._cond:
            self._end = (total, None)
            self._cond.notify_all()

    def fail(self, message):
        with self._cond:
            self._end = (None, message)
            self._cond.notify_all()

    def stream(self, write):
        """serve()'s source: what was put, as it comes; TransferError with the upstream's message when it broke."""
        try:
            while True:
                with self._cond:
                    while not self._chunks and self._end is None:
                        self._cond.wait(1)
                    if self._chunks:
                        chunk = self._chunks.popleft()
                    elif self._end[1] is not None:
                        raise TransferError(self._end[1])
                    else:
                        return self.sent
                write(chunk)
                with self._cond:
                    self.sent += len(chunk)
                    self._held -= len(chunk)
                    self._cond.notify_all()
        except OSError as err:
            with self._cond:
                self.failed = f"{self.to} stopped reading after {self.sent} bytes ({err})"
                self._chunks.clear()
                self._cond.notify_all()
            raise

    def wait(self, timeout_s):
        """Wait until the next node has read everything (or failed, or read nothing for idle_s seconds, or
        timeout_s passed); return why it failed, None when it did not."""
        end = time.monotonic() + timeout_s
        with self._cond:
            sent, moved = self.sent, time.monotonic()
            while not self._done and self.failed is None:
                now = time.monotonic()
                if self.sent != sent:
                    sent, moved = self.sent, now
                if now > end or now - moved > self.idle_s:
                    self.failed = f"{self.to} stopped reading after {self.sent} bytes (waited {now - moved:.0f} s)"
                    break
                self._cond.wait(1)
            return self.failed


class _Progress:
    def __init__(self, path, total, upstream, relay):
        self.path, self.total, self.started = path, total, time.monotonic()
        self.upstream, self.relay = upstream, relay
        self.last = 0.0

    def update(self, received, state="copying", force=False):
        now = time.monotonic()
        if not self.path or (not force and now - self.last < 1):
            return
        self.last = now
        elapsed = now - self.started
        report = {"state": state, "bytes": received, "total_bytes": self.total, "seconds": round(elapsed, 1),
                  "mb_per_s": round(received / 1e6 / elapsed, 1) if elapsed else 0.0, "from": self.upstream,
                  "relay_to": self.relay.to if self.relay else None,
                  "relayed_bytes": self.relay.sent if self.relay else 0}
        write_json(self.path, report)


def _read_exactly(response, amount):
    data = response.read(amount)
    if len(data) != amount:
        raise http.client.IncompleteRead(data, amount - len(data))
    return data


def _connect(url, upstream, connect_deadline_s, idle_s):
    """The upstream's response, once it proved it holds this node's token (the last part of url, never sent)."""
    end = time.monotonic() + connect_deadline_s
    base, _slash, token = url.rpartition("/")
    if not token:
        raise UpstreamError(f"the URL of {upstream} ({base}/) names no token: it must end with this node's token")
    challenge = secrets.token_hex(16)
    while True:
        try:
            response = open_url(f"{base}/{ticket(token)}", headers={CHALLENGE_HEADER: challenge}, timeout=idle_s)
            break
        except urllib.error.HTTPError as err:
            raise UpstreamError(f"{upstream} refused this node's token at {base}/… (HTTP {err.code})") from err
        except (urllib.error.URLError, OSError) as err:
            if time.monotonic() > end:
                raise UpstreamError(f"cannot reach {upstream} at {base} within {connect_deadline_s} s ({err}); check that "
                                    "this node reaches that address and port (firewall, image_transfer_address, "
                                    "image_relay_address)") from err
            time.sleep(0.5)
    if response.headers.get("Content-Type") != CONTENT_TYPE:
        response.close()
        raise UpstreamError(f"{upstream} at {base} does not serve an image stream "
                            f"(Content-Type {response.headers.get('Content-Type')!r}): another program holds the port?")
    if not _same(response.headers.get(PROOF_HEADER) or "", proof(token, challenge)):
        response.close()
        raise UpstreamError(f"{upstream} at {base} did not prove that it holds this node's token, so its stream was "
                            "refused before anything was read, loaded or relayed: another program holds that port "
                            "(find it with `ss -ltnp`), or the two ends run different versions of vllmops.cluster")
    return response


def receive(docker, url, connect_deadline_s=60, progress_path=None, total_bytes=None, upstream="the image source",
            relay=None, idle_s=120):
    """GET url into the engine's load (`docker`, a DockerClient), relaying every byte to `relay` (a Relay) as it
    arrives; return (bytes received, seconds, what the engine said).

    When this node's load fails, the rest of the stream is still relayed to the
    next node before the error is raised."""
    return receive_stream(docker.image_load, "docker load", url, connect_deadline_s, progress_path, total_bytes, upstream,
                          relay, idle_s)


def receive_stream(consume, what, url, connect_deadline_s=60, progress_path=None, total_bytes=None,
                   upstream="the source", relay=None, idle_s=120):
    """GET url and hand its chunks to consume(iterator of bytes), relaying every byte to `relay` (a Relay) as it
    arrives; return (bytes received, seconds, what consume returned).

    When consume fails (`what` names it in the error), the rest of the stream
    is still relayed to the next node before the error is raised."""
    progress = _Progress(progress_path, total_bytes, upstream, relay)
    received = 0
    try:
        response = _connect(url, upstream, connect_deadline_s, idle_s)
    except UpstreamError as err:
        if relay:
            relay.fail(str(err))
        progress.update(0, "failed", force=True)
        raise
    started = time.monotonic()

    def chunks():
        nonlocal received
        try:
            while True:
                kind, length = _HEADER.unpack(_read_exactly(response, _HEADER.size))
                if length > MAX_FRAME:
                    raise UpstreamError(f"{upstream} sent a frame of {length} bytes, more than the {MAX_FRAME} a frame "
                                        f"may hold, after {received} bytes: the stream was refused")
                payload = _read_exactly(response, length)
                if kind == _ERROR:
                    raise UpstreamError(payload.decode(errors="replace"))
                if kind == _END:
                    if int(payload) != received:
                        raise UpstreamError(f"{upstream} says it sent {int(payload)} bytes, this node got {received}")
                    if relay:
                        relay.finish(received)
                    return
                received += len(payload)
                if relay:
                    relay.put(payload)
                progress.update(received)
                yield payload
        except UpstreamError as err:
            if relay:
                relay.fail(str(err))
            raise
        except (OSError, ValueError, struct.error, http.client.HTTPException) as err:
            why = "stalled" if isinstance(err, TimeoutError) else "broke"
            message = (f"the stream from {upstream} {why} after {received} bytes ({err!r}): "
                       f"see {upstream}'s own result for why")
            if relay:
                relay.fail(message)
            raise UpstreamError(message) from err

    stream = chunks()
    try:
        with response:
            try:
                said = consume(stream)
            except UpstreamError:
                raise
            except (DockerError, TransferError, OSError) as err:
                loaded = received
                if relay:
                    with contextlib.suppress(UpstreamError):
                        for _chunk in stream:  # the next nodes still get their copy
                            pass
                raise TransferError(f"{what} failed after {loaded} bytes: {err}") from err
    except TransferError:
        progress.update(received, "failed", force=True)
        raise
    progress.update(received, "done", force=True)
    return received, time.monotonic() - started, said
