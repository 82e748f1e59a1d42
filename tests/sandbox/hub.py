#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub, good enough for the real `huggingface_hub` client
(2.4.0, the one in the serving image): `snapshot_download`, `hf_hub_download`, `model_info` and
`list_repo_tree`, and the errors it raises for a missing repo, a gated repo, a missing revision.

    commit = publish(root, "org/name", source_dir)     # root/org/name/<commit>/..., refs/main -> commit
    with HubServer(root, gated={"org/gated": "hf_token"}) as hub:
        snapshot_download("org/name", revision=commit, local_dir=..., endpoint=hub.url)

    hub.py publish --root DIR --repo ORG/NAME --source DIR      # prints the commit
    hub.py serve|start --root DIR [--address A] [--port P] [--gated ORG/NAME=TOKEN ...] [--pidfile F]
    hub.py stop --pidfile F

Plain HTTP only: no X-Xet-* header is ever sent, so the client downloads with GET (and Range).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
LFS_MIN_SIZE = 10 * 1000 * 1000  # larger files are LFS whatever their name, as on the Hub
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_NOT_PUBLISHED = (".git/", ".cache/huggingface/")  # what the client itself never counts as repo content


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _file_entry(path: Path, name: str) -> dict:
    """The file as /api/models/.../tree lists it; an LFS file's `oid` is its pointer's, as in git."""
    size = path.stat().st_size
    sha1, sha256 = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha1.update(chunk)
            sha256.update(chunk)
    if not (name.endswith(LFS_SUFFIXES) or size > LFS_MIN_SIZE):
        return {"type": "file", "path": name, "size": size, "oid": sha1.hexdigest()}
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256.hexdigest()}\nsize {size}\n".encode()
    lfs = {"oid": sha256.hexdigest(), "size": size, "pointerSize": len(pointer)}
    return {"type": "file", "path": name, "size": size, "oid": _git_sha1(pointer), "lfs": lfs}


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    tmp.replace(path)


def publish(root: Path, repo_id: str, source_dir: Path) -> str:
    """Store source_dir's files as repo_id's commit (named by the files' names and contents) and point main at it."""
    org, _, name = repo_id.partition("/")
    if not (_NAME.fullmatch(org) and _NAME.fullmatch(name)):
        raise ValueError(f"repo id must be ORG/NAME: {repo_id!r}")
    source_dir = Path(source_dir)
    names = sorted(p.relative_to(source_dir).as_posix() for p in source_dir.rglob("*") if p.is_file())
    entries = [_file_entry(source_dir / n, n) for n in names if not (n + "/").startswith(_NOT_PUBLISHED)]
    commit = hashlib.sha1("".join(f"{e['path']}\0{e['oid']}\n" for e in entries).encode()).hexdigest()
    repo = Path(root) / org / name
    manifest = repo / f"{commit}.json"  # written last: a commit without one is an interrupted publish
    if not manifest.is_file():
        repo.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(repo / commit, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=".publish-", dir=repo))
        for entry in entries:
            (staging / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source_dir / entry["path"], staging / entry["path"])  # a copy: later edits of the source stay out
        staging.rename(repo / commit)
        _write_atomic(manifest, json.dumps(entries, indent=1))
    _write_atomic(repo / "refs" / "main", commit + "\n")
    return commit


class _HubError(Exception):
    """An answer in the Hub's error shape: the client picks its exception class from X-Error-Code and the status."""

    def __init__(self, status: int, code: str | None, message: str, **headers: str) -> None:
        super().__init__(message)
        self.status, self.headers = status, {"X-Error-Message": message, **({"X-Error-Code": code} if code else {}), **headers}


_ECHO_LOCK = threading.Lock()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    root: Path
    gated: dict[str, str]
    requests: list[tuple[str, str]]
    echo: bool = False  # one line per request on stdout (`serve`: PIDFILE.log, the access log tests read)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up mid-download is no error
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._route()

    do_HEAD = do_GET

    def _send_headers(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _token(self) -> str | None:
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None

    def _route(self) -> None:
        self.server.requests.append((self.command, self.path))
        if self.server.echo:  # one write per line: the handlers run in threads, and print() writes in parts
            with _ECHO_LOCK:
                sys.stdout.write(f"{self.command} {self.path}\n")
                sys.stdout.flush()
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]  # revisions come quoted with safe=""
        flags = {key for key, values in urllib.parse.parse_qs(url.query).items() if values[-1].lower() in ("1", "true")}
        try:
            match parts:
                case ["api", "models", org, name]:
                    answer = self._info(org, name, "main", "blobs" in flags)
                case ["api", "models", org, name, "revision", revision]:
                    answer = self._info(org, name, revision, "blobs" in flags)
                case ["api", "models", org, name, "tree", revision, *folder]:
                    answer = self._tree(org, name, revision, "/".join(folder), "recursive" in flags)
                case [org, name, "resolve", revision, *path] if path:
                    return self._file(org, name, revision, "/".join(path))
                case _:
                    raise _HubError(404, None, "Not Found")
            status, headers, body = 200, {}, json.dumps(answer).encode()
        except _HubError as error:
            status, headers, body = error.status, error.headers, json.dumps({"error": str(error)}).encode()
        self._send_headers(status, {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers})
        if self.command == "GET":
            self.wfile.write(body)

    def _commit(self, org: str, name: str, revision: str) -> tuple[list[dict], str]:
        """The files of the commit that revision names, and its sha."""
        repo = self.server.root / org / name
        if not (_NAME.fullmatch(org) and _NAME.fullmatch(name) and (repo / "refs" / "main").is_file()):
            # The Hub answers 401 to an anonymous caller, so as not to tell whether a private repo exists.
            raise _HubError(404 if self._token() else 401, "RepoNotFound", "Repository not found")
        commit = (repo / "refs" / "main").read_text().strip() if revision == "main" else revision
        if not (_COMMIT.fullmatch(commit) and (repo / f"{commit}.json").is_file()):
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return json.loads((repo / f"{commit}.json").read_text()), commit

    def _info(self, org: str, name: str, revision: str, blobs: bool) -> dict:
        entries, commit = self._commit(org, name, revision)
        siblings = [{"rfilename": e["path"]} for e in entries]
        if blobs:  # files_metadata=True
            for sibling, e in zip(siblings, entries, strict=True):
                sibling.update(size=e["size"], blobId=e["oid"])
                if "lfs" in e:
                    sibling["lfs"] = {"sha256": e["lfs"]["oid"], "size": e["size"], "pointerSize": e["lfs"]["pointerSize"]}
        repo_id = f"{org}/{name}"
        return {"id": repo_id, "modelId": repo_id, "author": org, "sha": commit, "private": False, "disabled": False,
                "gated": "manual" if repo_id in self.server.gated else False, "tags": [], "siblings": siblings}

    def _tree(self, org: str, name: str, revision: str, folder: str, recursive: bool) -> list[dict]:
        entries, _ = self._commit(org, name, revision)
        prefix = f"{folder}/" if folder else ""
        listing: dict[str, dict] = {}
        for entry in (e for e in entries if e["path"].startswith(prefix)):
            steps = entry["path"][len(prefix):].split("/")
            for depth in range(1, len(steps) if recursive else min(len(steps), 2)):  # the folders on its way
                path = prefix + "/".join(steps[:depth])
                listing.setdefault(path, {"type": "directory", "path": path, "oid": _tree_oid(entries, path)})
            if recursive or len(steps) == 1:
                listing[entry["path"]] = entry
        if folder and not listing:
            raise _HubError(404, "EntryNotFound", f"{folder} does not exist on \"{revision}\"")
        return [listing[path] for path in sorted(listing)]

    def _file(self, org: str, name: str, revision: str, path: str) -> None:
        repo_id = f"{org}/{name}"
        if repo_id in self.server.gated and self._token() != self.server.gated[repo_id]:
            # 401 to an anonymous caller, 403 to one whose token has no access: GatedRepo either way.
            why = "Please log in." if self._token() is None else "You are not in the authorized list."
            raise _HubError(401 if self._token() is None else 403, "GatedRepo", f"Access to model {repo_id} is restricted. {why}")
        entries, commit = self._commit(org, name, revision)
        entry = next((e for e in entries if e["path"] == path), None)
        if entry is None:
            raise _HubError(404, "EntryNotFound", "Entry not found", **{"X-Repo-Commit": commit})
        size, etag = entry["size"], f'"{entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]}"'  # sha256 for LFS: the client relies on it
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", "X-Repo-Commit": commit, "ETag": etag}
        if "lfs" in entry:
            headers |= {"X-Linked-Etag": etag, "X-Linked-Size": str(size)}
        start, end, status = 0, size - 1, 200
        wanted = _RANGE.fullmatch(self.headers.get("Range", "").replace(" ", ""))
        if wanted and any(wanted.groups()):
            first, last = wanted.groups()
            start = int(first) if first else max(size - int(last), 0)
            end = min(int(last), size - 1) if first and last else size - 1
            if start > end:
                raise _HubError(416, None, "Requested range not satisfiable", **{"Content-Range": f"bytes */{size}"})
            status, headers["Content-Range"] = 206, f"bytes {start}-{end}/{size}"
        self._send_headers(status, {**headers, "Content-Length": str(end - start + 1)})
        if self.command == "HEAD":
            return
        with (self.server.root / org / name / commit / path).open("rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0 and (chunk := f.read(min(1 << 20, left))):
                self.wfile.write(chunk)
                left -= len(chunk)


def _tree_oid(entries: list[dict], folder: str) -> str:
    inside = "".join(f"{e['path']}\0{e['oid']}\n" for e in entries if e["path"].startswith(folder + "/"))
    return hashlib.sha1(inside.encode()).hexdigest()


class HubServer:
    """The stand-in on a thread; `gated` maps a repo id to the one token that may download its files."""

    def __init__(self, root: Path, address: str = "127.0.0.1", port: int = 0, gated: dict[str, str] | None = None,
                 echo: bool = False) -> None:
        self._httpd = _Server((address, port), _Handler)
        self._httpd.root, self._httpd.gated, self._httpd.requests = Path(root), dict(gated or {}), []
        self._httpd.echo = echo
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)  # quick to stop

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request answered so far, oldest first."""
        return self._httpd.requests

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _is_server(pid: int) -> bool:
    """Whether pid is a live `hub.py serve` (a reused pid is someone else's; a zombie's cmdline is empty)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return Path(__file__).name.encode() in cmdline and b"serve" in cmdline


def _running(pidfile: Path) -> int | None:
    """The pid of the server that pidfile names, if it still runs."""
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _is_server(pid) else None


def _stop(pidfile: Path) -> None:
    pid = _running(pidfile)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _is_server(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_server(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


def _serve(args: argparse.Namespace) -> int:
    gated = dict(pair.split("=", 1) for pair in args.gated)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # before any thread: they inherit it
    with HubServer(Path(args.root), args.address, args.port, gated, echo=True) as hub:
        if args.pidfile:
            _write_atomic(Path(args.pidfile), f"{os.getpid()}\n")
        print(hub.url, flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    if args.pidfile and _running(Path(args.pidfile)) == os.getpid():
        Path(args.pidfile).unlink()
    return 0


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:  # any answer will do
        pass
    except OSError:
        return False
    return True


def _start(args: argparse.Namespace) -> int:
    """`serve` detached, its output (the URL, then one line per request) appended to PIDFILE.log; prints the URL
    once it answers. A running one is replaced."""
    pidfile = Path(args.pidfile).resolve()
    _stop(pidfile)
    log = Path(f"{pidfile}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "serve", "--root", str(Path(args.root).resolve()),
               "--address", args.address, "--port", str(args.port), "--pidfile", str(pidfile)]
    command += [f"--gated={pair}" for pair in args.gated]
    with log.open("a") as out:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.poll() is None:
        url = next((line for line in reversed(log.read_text().splitlines()) if line.startswith("http://")), None)
        if url and _answers(url) and _running(pidfile) == server.pid:
            print(url)
            return 0
        time.sleep(0.05)
    if server.poll() is None:
        server.kill()
    print(f"hub.py start: the server did not come up; {log}:\n{log.read_text()}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    publishing = commands.add_parser("publish", help="store a directory as a repo's commit; prints the commit")
    publishing.add_argument("--root", required=True)
    publishing.add_argument("--repo", required=True, metavar="ORG/NAME")
    publishing.add_argument("--source", required=True)
    for name in ("serve", "start"):
        serving = commands.add_parser(name, help="serve the repos under --root" + (" detached" if name == "start" else ""))
        serving.add_argument("--root", required=True)
        serving.add_argument("--address", default="127.0.0.1")
        serving.add_argument("--port", type=int, default=0)
        serving.add_argument("--gated", action="append", default=[], type=_gated_pair, metavar="ORG/NAME=TOKEN")
        serving.add_argument("--pidfile", required=name == "start")
    commands.add_parser("stop", help="stop what `start` started").add_argument("--pidfile", required=True)
    args = parser.parse_args(argv)
    if args.command == "publish":
        print(publish(Path(args.root), args.repo, Path(args.source)))
        return 0
    if args.command == "stop":
        _stop(Path(args.pidfile))
        return 0
    return _serve(args) if args.command == "serve" else _start(args)


def _gated_pair(value: str) -> str:
    repo_id, _, token = value.partition("=")
    if "/" not in repo_id or not token:
        raise argparse.ArgumentTypeError(f"expected ORG/NAME=TOKEN, got {value!r}")
    return value


if __name__ == "__main__":
    sys.exit(main())
