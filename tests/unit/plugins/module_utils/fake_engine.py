"""A fake Docker Engine for unit tests: an HTTP server on a unix socket in a
temp dir, answering from a table of handlers the test fills in.

    engine.route("GET", "/images/demo:1/json", lambda req: req.json(200, {...}))

A handler gets the request (method, path, query, body already read, and the
reply helpers) and answers with one of them. Requests are recorded in
``engine.requests`` as (method, path, query, body)."""

from __future__ import annotations

import json
import socketserver
import struct
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler


def frame(stream: int, data: bytes) -> bytes:
    """One frame of Docker's multiplexed stream (1 = stdout, 2 = stderr)."""
    return struct.pack(">BxxxL", stream, len(data)) + data


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up (a timeout test) is not the fake engine's problem


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _handle(self):
        parsed = urllib.parse.urlsplit(self.path)
        self.route_path = urllib.parse.unquote(parsed.path)
        self.query = dict(urllib.parse.parse_qsl(parsed.query))
        self.body = self._read_body()
        engine = self.server.engine
        engine.requests.append((self.command, self.route_path, self.query, self.body))
        handler = engine.routes.get((self.command, self.route_path))
        if handler is None:
            self.json(404, {"message": f"page not found: {self.command} {self.route_path}"})
        else:
            handler(self)

    do_GET = do_POST = do_DELETE = _handle

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.chunked_request = True
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        self.chunked_request = False
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    # -- replies -------------------------------------------------------------

    def raw(self, status: int, body: bytes, content_type: str = "application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def json(self, status: int, value):
        self.raw(status, json.dumps(value).encode())

    def chunked(self, status: int, chunks, content_type: str = "application/x-tar"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def hijacked(self, data: bytes):
        """What the engine does for an attached exec: a 200 without length, the stream, then it closes."""
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\n\r\n" + data)
        self.wfile.flush()
        self.close_connection = True


class FakeEngine:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.host = "unix://" + socket_path
        self.routes: dict = {}
        self.requests: list = []
        self._server = _Server(socket_path, _Handler)
        self._server.engine = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def route(self, method: str, path: str, handler) -> None:
        self.routes[(method, path)] = handler

    def __enter__(self) -> FakeEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
