# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node looked like when a whole deploy.yml last finished on it, and
whether it still looks so.

A record holds two things: the fingerprint of the deploy's inputs (the
settings and the collection's own files, made on the controller) and an
observation of the node (our files' digests, modes and owners, which of our
units run and are enabled, our containers and the images they run, the
packages we install, our firewall table and the ephemeral port range it
filters, the node's addresses and GPUs, and whether the service answers).
A re-run whose inputs and
observation equal the record has nothing to do; anything else, however
small, sends it down the full path, which removes the record first, so that a
run that fails half way never leaves a record behind. So does a model
revision that names a branch or a tag: only the full path asks the hub what
it names now.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from ansible_collections.vllmops.cluster.plugins.module_utils import firewall
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import write_json

SCHEMA = "vllmops.deploy-state/1"


# The kernel's ephemeral port range: the firewall filters it as read on the node (firewall_ephemeral_ports: auto),
# so a widened range is a node that differs, whose new ports only the full path closes.
PORT_RANGE = firewall.PORT_RANGE
# A revision of the hub that cannot move: a full commit hash (a branch or a tag names whatever it names today).
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


# How commands run: the module's run_command, as (rc, stdout) with LC_ALL=C.
Runner = Callable[[list[str]], tuple[int, str]]


def files(patterns: list[str], excluded: list[str]) -> dict:
    """path -> 'sha256 mode uid:gid' (or '-> target' for a link) of every file the patterns name."""
    skip = {path for pattern in excluded for path in glob.glob(pattern, recursive=True)}
    seen = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern, recursive=True)):
            if path in skip:
                continue
            try:
                info = os.lstat(path)
            except FileNotFoundError:  # gone since the glob: as if never there
                continue
            if stat.S_ISLNK(info.st_mode):
                seen[path] = "-> " + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256()
                with open(path, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
                seen[path] = f"{digest.hexdigest()} {stat.S_IMODE(info.st_mode):04o} {info.st_uid}:{info.st_gid}"
    return seen


def trees(roots: list[str]) -> dict:
    """path -> 'size mtime_ns' of each file, and of every file under each directory: stat only (a model's hundreds of gigabytes)."""
    seen = {}
    for root in roots:
        walk = [(os.path.dirname(root), [], [os.path.basename(root)])] if os.path.isfile(root) else os.walk(root)
        for top, dirs, names in walk:
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(top, name)
                try:
                    info = os.stat(path)
                except FileNotFoundError:
                    continue
                seen[path] = f"{info.st_size} {info.st_mtime_ns}"
    return seen


def units(patterns: list[str], run: Runner) -> dict:
    """unit -> 'active'/'-' and its enablement: the units that run (a oneshot between two timer ticks is '-')."""
    if not patterns:
        return {}
    seen = {}
    _rc, listed = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", *patterns])
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] != "not-found":
            seen[fields[0]] = "active" if fields[2] == "active" else "-"
    _rc, enabled = run(["systemctl", "list-unit-files", "--no-legend", "--no-pager", *patterns])
    for line in enabled.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            seen[fields[0]] = f"{seen.get(fields[0], '-')} {fields[1]}"
    return seen


def containers(label: str, images_: list[str], docker_host: str | None) -> dict:
    """name -> 'STATE IMAGE_ID' for the containers carrying our label, and
    'image NAME' -> its ID (or 'absent') for the images the units run."""
    if not label and not images_:
        return {}
    client = DockerClient(docker_host, timeout=10)
    try:
        seen = {c["Names"][0].lstrip("/"): f"{c['State']} {c['ImageID']}"
                for c in (client.containers(label=label) if label else [])}
        for name in images_:
            found = client.image_inspect(name)
            seen[f"image {name}"] = found["Id"] if found else "absent"
    except (DockerError, OSError) as err:
        return {"(docker)": f"unreachable: {err}"}
    return seen


def packages(patterns: list[str], run: Runner) -> dict:
    """package -> version, for the installed packages the patterns match."""
    if not patterns:
        return {}
    _rc, out = run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n", *patterns])
    return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if len(f) == 3 and f[0] == "ii"}


def nft_tables(names: list[str], run: Runner) -> dict:
    """'inet NAME' -> the digest of the loaded table (absent: '-')."""
    seen = {}
    for name in names:
        rc, out = run(["nft", "list", "table", "inet", name])
        seen[f"inet {name}"] = hashlib.sha256(out.encode()).hexdigest() if rc == 0 else "-"
    return seen


def port_range() -> str:
    """The node's ephemeral port range ('32768-60999'), as the firewall reads it, or why it cannot be read."""
    try:
        return firewall.read_port_range(PORT_RANGE) or "absent"
    except (OSError, ValueError) as err:  # FirewallError is a ValueError
        return f"unreadable: {err}"


def addresses(run: Runner) -> list[str]:
    """The node's global addresses with their interfaces (a changed address changes the cluster's environment);
    IPv6 privacy addresses, which rotate by themselves, left out."""
    rc, out = run(["ip", "-o", "address", "show", "scope", "global"])
    if rc != 0:
        return []
    return sorted(f"{f[1]} {f[3]}" for f in (line.split() for line in out.splitlines())
                  if len(f) > 3 and "temporary" not in f and "deprecated" not in f)


def gpus(run: Runner) -> list[str]:
    """The GPUs the driver sees (UUIDs and driver version: one fallen off the bus keeps its /dev node) and their
    device nodes."""
    rc, out = run(["nvidia-smi", "--query-gpu=uuid,driver_version", "--format=csv,noheader"])
    listed = sorted(line.strip() for line in out.splitlines() if line.strip()) if rc == 0 else [f"nvidia-smi rc {rc}"]
    return listed + sorted(glob.glob("/dev/nvidia[0-9]*"))


# The node's own services: never through an http_proxy of its environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def answers(urls: list[str], timeout: float = 5) -> dict:
    """url -> the HTTP status it answered with, or why it did not."""
    seen = {}
    for url in urls:
        try:
            with _DIRECT.open(url, timeout=timeout) as response:
                seen[url] = response.status
        except urllib.error.HTTPError as err:
            seen[url] = err.code
        except (urllib.error.URLError, OSError) as err:
            seen[url] = f"no answer ({getattr(err, 'reason', err)})"
    return seen


def observe(spec: dict, run: Runner) -> dict:
    """Everything a record compares, read in one pass on the node."""
    return {
        "files": files(spec.get("files", []), spec.get("files_excluded", [])),
        "trees": trees(spec.get("trees", [])),
        "units": units(spec.get("units", []), run),
        "containers": containers(spec.get("container_label", ""), spec.get("images", []), spec.get("docker_host")),
        "packages": packages(spec.get("packages", []), run),
        "nft_tables": nft_tables(spec.get("nft_tables", []), run),
        "ephemeral_ports": port_range(),
        "addresses": addresses(run),
        "gpus": gpus(run),
        "answers": answers(spec.get("health_urls", [])),
    }


def differences(recorded: dict, now: dict) -> list[str]:
    """Sentences naming what differs between two observations (empty: the node is as recorded)."""
    found = []
    for part in sorted(set(recorded) | set(now)):
        was, is_ = recorded.get(part), now.get(part)
        if was == is_:
            continue
        if isinstance(was, dict) and isinstance(is_, dict):
            for key in sorted(set(was) | set(is_)):
                if was.get(key) != is_.get(key):
                    found.append(f"{part}: {key}: {_short(was.get(key))} -> {_short(is_.get(key))}")
        else:
            found.append(f"{part}: {_short(was)} -> {_short(is_)}")
    return found


def _short(value) -> str:
    if value is None:
        return "absent"
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("schema") == SCHEMA else None


def unpinned(hub_revision: str) -> list[str]:
    """Why a model revision sends every run down the full path: a branch or a tag (empty: none, or a commit)."""
    if not hub_revision or _COMMIT_RE.fullmatch(hub_revision):
        return []
    return [f"model_hub_revision {hub_revision!r} is not a commit hash (40 hex digits): only a full run asks the hub "
            "what it names now; pin the commit to let re-runs take the fast path"]


def check(path: str, inputs: str, run: Runner, hub_revision: str = "") -> tuple[bool, list[str]]:
    """(converged, reasons): converged when a record exists, its inputs equal these and the node looks the same
    (observed as the record says it was observed), and the model's hub revision (when it comes from the hub)
    is a commit."""
    moving = unpinned(hub_revision)
    if moving:
        return False, moving
    record = read(path)
    if record is None:
        return False, ["no record of a completed deploy on this node"]
    if record.get("inputs") != inputs:
        return False, ["the settings or the collection changed since the last completed deploy"]
    reasons = differences(record.get("observed", {}), observe(record.get("spec", {}), run))
    return not reasons, reasons


def write(path: str, inputs: str, spec: dict, run: Runner) -> dict:
    """Observe the node and keep it (0600, written whole or not at all)."""
    record = {"schema": SCHEMA, "inputs": inputs, "spec": spec, "recorded_at": int(time.time()),
              "observed": observe(spec, run)}
    write_json(path, record, mode=0o600, indent=1, sort_keys=True)
    return record


def forget(path: str) -> bool:
    """Remove the record; True when there was one."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
