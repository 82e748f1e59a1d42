#!/usr/bin/env python3
"""An outsider: a container on the sandbox's networks that is not in the
inventory, for tests of what the cluster lets in (the firewall, the API proxy).

    outsider.py start   --name NAME --network NET [--network NET ...] [--label PREFIX]
    outsider.py connect --name NAME HOST PORT [--timeout S]    prints open | refused | timeout
    outsider.py http    --name NAME URL [--header K:V ...] [--data BODY] [--timeout S]
    outsider.py exec    --name NAME -- COMMAND ...
    outsider.py remove  --name NAME

It runs the node image (tests/sandbox/nodes.py build-image) with `sleep`, no
systemd and no capabilities beyond Docker's defaults; with --label PREFIX it
carries the sandbox's label, so `nodes.py down --prefix PREFIX` removes it
too. From Python: Outsider(name).start(networks), .connect(host, port),
.scan(host, ports) (every port at once), .http(url), .address(network),
.remove().

Test infrastructure only: nothing under roles/ or plugins/ may use it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nodes import LABEL, SandboxError, build_image, run

# Runs inside the outsider: one TCP connection attempt, the outcome as a word.
_CONNECT = """
import socket, sys
s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print('open')
except socket.timeout:
    print('timeout')
except ConnectionRefusedError:
    print('refused')
except OSError as err:
    print('error ' + str(err))
"""

# Runs inside the outsider: one HTTP request; status and body as JSON (status 0: no answer).
_HTTP = """
import json, ssl, sys, urllib.error, urllib.request
url, method, headers, data, timeout, cafile = json.loads(sys.stdin.read())
req = urllib.request.Request(url, data=data.encode() if data is not None else None, method=method, headers=headers)
context = ssl.create_default_context(cafile=cafile) if cafile else None
try:
    with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
        print(json.dumps([resp.status, resp.read().decode(errors='replace')]))
except urllib.error.HTTPError as err:
    print(json.dumps([err.code, err.read().decode(errors='replace')]))
except (urllib.error.URLError, OSError) as err:
    print(json.dumps([0, str(getattr(err, 'reason', err))]))
"""


# Runs inside the outsider: a TCP connection attempt to each port at once, the outcomes as JSON.
_SCAN = """
import concurrent.futures, json, socket, sys
host, ports, timeout = json.loads(sys.stdin.read())
def attempt(port):
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        return 'open'
    except socket.timeout:
        return 'timeout'
    except ConnectionRefusedError:
        return 'refused'
    except OSError as err:
        return 'error ' + str(err)
    finally:
        s.close()
with concurrent.futures.ThreadPoolExecutor(64) as pool:
    print(json.dumps(dict(zip(map(str, ports), pool.map(attempt, ports)))))
"""


class Outsider:
    def __init__(self, name: str) -> None:
        self.name = name

    def start(self, networks: list[str], label: str | None = None) -> Outsider:
        """Start (or restart) the container on the given networks."""
        image = build_image()
        run(["docker", "rm", "-f", self.name], check=False)
        run(["docker", "run", "-d", "--name", self.name, "--hostname", self.name,
             *(["--label", f"{LABEL}={label}"] if label else []),
             "--network", networks[0], "--entrypoint", "sleep", image, "infinity"])
        for extra in networks[1:]:
            run(["docker", "network", "connect", extra, self.name])
        return self

    def exec(self, *argv: str, input_text: str | None = None, timeout: float = 60) -> str:
        return run(["docker", "exec", "-i", self.name, *argv], input_text=input_text, timeout=timeout).stdout

    def address(self, network: str) -> str:
        fmt = "{{json .NetworkSettings.Networks}}"
        return json.loads(run(["docker", "inspect", "-f", fmt, self.name]).stdout)[network]["IPAddress"]

    def connect(self, host: str, port: int, timeout: float = 3) -> str:
        """open, refused, timeout (dropped on the way) or "error ..." (no route, ...)."""
        return self.exec("python3", "-c", _CONNECT, host, str(port), str(timeout), timeout=timeout + 30).strip()

    def scan(self, host: str, ports: list[int], timeout: float = 3) -> dict[int, str]:
        """connect() to every port at once: port -> open, refused, timeout or "error ..."."""
        found = json.loads(self.exec("python3", "-c", _SCAN, input_text=json.dumps([host, sorted(ports), timeout]),
                                     timeout=timeout * (1 + len(ports) // 64) + 30))
        return {int(port): outcome for port, outcome in found.items()}

    def put(self, source: str, dest: str) -> str:
        """Copy a file of this machine into the outsider; its path there."""
        run(["docker", "cp", source, f"{self.name}:{dest}"])
        return dest

    def http(self, url: str, method: str = "GET", headers: dict | None = None, data: str | None = None,
             timeout: float = 10, cafile: str | None = None) -> tuple[int, str]:
        """(status, body); status 0 when nothing answered (the body says why). Headers travel on
        stdin, never on a command line; cafile: the CA (a path in the outsider) https is checked against."""
        request = json.dumps([url, method, headers or {}, data, timeout, cafile])
        status, body = json.loads(self.exec("python3", "-c", _HTTP, input_text=request, timeout=timeout + 30))
        return status, body

    def remove(self) -> None:
        run(["docker", "rm", "-f", self.name], check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("start", "connect", "http", "exec", "remove"):
        sub.add_parser(command).add_argument("--name", required=True)
    sub.choices["start"].add_argument("--network", action="append", required=True)
    sub.choices["start"].add_argument("--label", help="the sandbox prefix, so that nodes.py down removes it")
    sub.choices["connect"].add_argument("host")
    sub.choices["connect"].add_argument("port", type=int)
    sub.choices["connect"].add_argument("--timeout", type=float, default=3)
    sub.choices["http"].add_argument("url")
    sub.choices["http"].add_argument("--header", action="append", default=[], metavar="KEY:VALUE")
    sub.choices["http"].add_argument("--data")
    sub.choices["http"].add_argument("--timeout", type=float, default=10)
    sub.choices["exec"].add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    outsider = Outsider(args.name)
    try:
        if args.command == "start":
            outsider.start(args.network, args.label)
        elif args.command == "connect":
            print(outsider.connect(args.host, args.port, args.timeout))
        elif args.command == "http":
            headers = dict(h.split(":", 1) for h in args.header)
            status, body = outsider.http(args.url, "POST" if args.data is not None else "GET",
                                         {k.strip(): v.strip() for k, v in headers.items()}, args.data, args.timeout)
            print(status)
            print(body)
            return 0 if 200 <= status < 400 else 1
        elif args.command == "exec":
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            print(outsider.exec(*command), end="")
        else:
            outsider.remove()
    except (SandboxError, subprocess.TimeoutExpired) as err:
        print(f"outsider: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
