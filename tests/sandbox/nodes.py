#!/usr/bin/env python3
"""Simulated hosts for tests and the local sandbox: Docker containers with
systemd as PID 1, sshd, a sudo user and room for their own dockerd.

    nodes.py ensure-docker          Docker Engine reachable (installs/starts it as root)
    nodes.py build-image            node image, rebuilt only when its recipe changes
    nodes.py up   --prefix P --count N [--network NAME ...] [--gpus KIND:COUNT ...] [--copy SRC:DEST ...]
    nodes.py down --prefix P

`up` prints one JSON document describing the nodes (name, addresses, SSH
user and key) for create playbooks and inventories. Everything it creates is
named after the prefix and labelled with it, and `down` removes exactly that.

Test infrastructure only: nothing under roles/ or plugins/ may use it.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPE_DIR = HERE / "node"
CACHE_DIR = Path(os.environ.get("VLLMOPS_CACHE", Path.home() / ".cache" / "vllmops"))
STATE_DIR = CACHE_DIR / "sandbox"
IMAGE_REPO = "vllmops/node"
# The simulated hosts run Debian 13 (trixie): its docker.io (26.x) is a current engine, with the containerd
# image store, as GPU hosts run (Docker 27-29). `up --suite bookworm` gives a node Debian 12's docker.io 20.10,
# an older engine. The images the nodes run (serving, probe, exporter) start from the bookworm rootfs: Python
# 3.11, which the CPU torch wheel in /opt/wheels is built for.
NODE_SUITE = "trixie"
IMAGE_SUITE = "bookworm"
SUITES = (NODE_SUITE, IMAGE_SUITE)
LABEL = "io.vllmops.sandbox"
SSH_USER = "ops"
DOCKERD_LOG = Path("/var/log/vllmops-dockerd.log")

# Flags that let systemd run as PID 1 and a nested dockerd work, without
# --privileged and without the machine's own cgroup tree (notes/infra.md).
NODE_RUN_FLAGS = [
    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--cgroupns=private",
    # A node may be given RDMA verbs devices (mknod /dev/infiniband/uverbsN, major 231) and pass them on.
    "--device-cgroup-rule", "c 231:* rmw",
    "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
]


class SandboxError(Exception):
    """A failure with a message that says what to do next."""


def log(msg: str) -> None:
    print(f"[sandbox] {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], *, check: bool = True, capture: bool = True,
        input_text: str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, text=True, input=input_text, timeout=timeout,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)
    if check and proc.returncode != 0:
        tail = (proc.stderr or "").strip()[-2000:]
        raise SandboxError(f"{' '.join(argv[:4])} ... failed (rc={proc.returncode}): {tail}")
    return proc


# --- Docker Engine -----------------------------------------------------------

def docker_answers() -> bool:
    return subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def ensure_docker() -> None:
    if docker_answers():
        return
    if os.geteuid() != 0:
        raise SandboxError("no Docker Engine answers `docker info`, and installing one needs root: "
                           "start dockerd (or run this as root) and retry")
    missing = [pkg for pkg, tool in (("docker.io", "/usr/sbin/dockerd"), ("mmdebstrap", "mmdebstrap"))
               if shutil.which(tool) is None]
    if missing:
        log(f"installing {' '.join(missing)} from Debian")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    log(f"starting dockerd (log: {DOCKERD_LOG})")
    with open(DOCKERD_LOG, "ab") as out:
        subprocess.Popen(["/usr/sbin/dockerd"], stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    for _ in range(60):
        if docker_answers():
            return
        time.sleep(1)
    raise SandboxError(f"dockerd did not answer within 60 s; see {DOCKERD_LOG}")


# --- Node image --------------------------------------------------------------

def recipe_packages() -> list[str]:
    lines = (RECIPE_DIR / "packages.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def rootfs_hash(suite: str = IMAGE_SUITE) -> str:
    """Hash of what shapes a suite's rootfs (the suite and packages.txt): the images built on it
    (image_base) are named after it, so a change to the node's other files rebuilds none of them."""
    return hashlib.sha256(f"{suite}\0{(RECIPE_DIR / 'packages.txt').read_text()}".encode()).hexdigest()[:16]


def recipe_hash(suite: str = NODE_SUITE) -> str:
    """Hash of every file that shapes the node image: change one, get a new image."""
    digest = hashlib.sha256(suite.encode())
    for path in sorted(RECIPE_DIR.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(RECIPE_DIR).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def image_exists(ref: str) -> bool:
    return run(["docker", "image", "inspect", ref], check=False).returncode == 0


def rootfs(suite: str = IMAGE_SUITE) -> str:
    """The Debian rootfs of a suite with the recipe's packages, imported as an image (mmdebstrap, once)."""
    ensure_docker()
    base = f"{IMAGE_REPO}-rootfs:{rootfs_hash(suite)}"
    if image_exists(base):
        return base
    if shutil.which("mmdebstrap") is None:
        raise SandboxError("mmdebstrap is missing: apt-get install -y mmdebstrap")
    log(f"building {base} with mmdebstrap ({suite}, minbase); about a minute")
    started = time.monotonic()
    debstrap = subprocess.Popen(
        ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(recipe_packages()),
         suite, "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    imported = subprocess.run(["docker", "import", "-", base], stdin=debstrap.stdout,
                              capture_output=True, text=True)
    debstrap.stdout.close()
    err = debstrap.stderr.read().decode(errors="replace")
    if debstrap.wait() != 0 or imported.returncode != 0:
        raise SandboxError(f"building the {suite} rootfs failed: {err[-1500:]} {imported.stderr}")
    log(f"rootfs imported in {time.monotonic() - started:.0f} s")
    return base


def image_base() -> str:
    """The base of the images that run inside the nodes (bookworm: Python 3.11)."""
    return rootfs(IMAGE_SUITE)


def build_image(suite: str = NODE_SUITE) -> str:
    """Return the node image reference of a suite, building it only when missing."""
    if suite not in SUITES:
        raise SandboxError(f"unknown node suite {suite!r}; known: {', '.join(SUITES)}")
    ensure_docker()
    tag = recipe_hash(suite)
    ref = f"{IMAGE_REPO}:{tag}"
    if image_exists(ref):
        return ref
    base = rootfs(suite)
    log(f"building {ref} ({suite})")
    latest = ["-t", f"{IMAGE_REPO}:latest"] if suite == NODE_SUITE else []
    run(["docker", "build", "--quiet", "--build-arg", f"BASE_IMAGE={base}",
         "--label", f"{LABEL}.recipe={tag}", "-t", ref, *latest,
         str(RECIPE_DIR)])
    return ref


def save_archive(image: str, name: str, path: Path) -> Path:
    """The image, tagged name, as a `docker save` archive at path (a vendor's
    "image from the vendor"); written once, never left half-written."""
    if not path.exists():
        run(["docker", "tag", image, name])
        partial = path.with_suffix(".part")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as out:
            subprocess.run(["docker", "save", name], stdout=out, check=True)
        partial.rename(path)
    return path


# --- Nodes -------------------------------------------------------------------

def ssh_key(prefix: str) -> Path:
    key = STATE_DIR / prefix / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vllmops-{prefix}", "-f", str(key)])
    return key


def container_ip(name: str, network: str) -> str:
    fmt = "{{json .NetworkSettings.Networks}}"
    networks = json.loads(run(["docker", "inspect", "-f", fmt, name]).stdout)
    return networks[network]["IPAddress"]


def ensure_network(spec: str, prefix: str) -> str:
    """NAME or NAME=SUBNET; returns the name."""
    name, _, subnet = spec.partition("=")
    if run(["docker", "network", "inspect", name], check=False).returncode != 0:
        if subnet:
            refuse_overlap(name, subnet)
        run(["docker", "network", "create", "--label", f"{LABEL}={prefix}",
             *(["--subnet", subnet] if subnet else []), name])
    return name


def refuse_overlap(name: str, subnet: str) -> None:
    """Docker refuses a subnet another network holds ("Pool overlaps with other one on this address space")
    without saying which: name it, and how to remove it when it is a sandbox's leftover."""
    wanted = ipaddress.ip_network(subnet, strict=False)
    ids = run(["docker", "network", "ls", "--quiet"]).stdout.split()
    for network in json.loads(run(["docker", "network", "inspect", *ids]).stdout) if ids else []:
        for config in (network.get("IPAM") or {}).get("Config") or []:
            held = ipaddress.ip_network(config.get("Subnet") or "::/128", strict=False)
            if held.version == wanted.version and held.overlaps(wanted):
                owner = (network.get("Labels") or {}).get(LABEL)
                how = (f"it is a sandbox's leftover: `{sys.argv[0]} down --prefix {owner}` removes it" if owner
                       else "remove it, or give this network another subnet")
                raise SandboxError(f"network {name} wants {subnet}, which overlaps {held} of network "
                                   f"{network['Name']}; {how}")


def node_running(name: str, image: str) -> bool:
    state = run(["docker", "inspect", "-f", "{{.State.Running}} {{.Config.Image}}", name], check=False)
    return state.returncode == 0 and state.stdout.split() == ["true", image]


def start_node(name: str, prefix: str, image: str, networks: list[str]) -> None:
    run(["docker", "rm", "-f", name], check=False)
    run(["docker", "run", "-d", "--name", name, "--hostname", name,
         "--label", f"{LABEL}={prefix}", *NODE_RUN_FLAGS,
         # The node's engine keeps its data in volumes: overlayfs cannot stack its upper layers on the node's own.
         "--mount", f"type=volume,src={name}-docker,dst=/var/lib/docker",
         "--mount", f"type=volume,src={name}-containerd,dst=/var/lib/containerd",
         "--network", networks[0], image])
    for extra in networks[1:]:
        run(["docker", "network", "connect", extra, name])


def authorize_key(name: str, pubkey: str) -> None:
    run(["docker", "exec", "-i", name, "sh", "-c",
         f"cat > /home/{SSH_USER}/.ssh/authorized_keys && chown {SSH_USER}: /home/{SSH_USER}/.ssh/authorized_keys"
         f" && chmod 0600 /home/{SSH_USER}/.ssh/authorized_keys"], input_text=pubkey)


GPU_DIR = HERE / "gpu"


def simulate_gpus(name: str, spec: str) -> None:
    """Make a node look like a GPU host: the stand-in nvidia-smi and its GPUs.
    spec is KIND:COUNT with KIND from gpu/kinds.json (gb10, rtx-pro-6000, h200)."""
    kind, _, count = spec.partition(":")
    kinds = json.loads((GPU_DIR / "kinds.json").read_text())
    if kind not in kinds:
        raise SandboxError(f"unknown GPU kind {kind!r}; known: {', '.join(kinds)}")
    gpu = kinds[kind]
    rows = ["index,name,uuid,memory.total,compute_cap,pci.bus_id,driver_version"]
    for index in range(int(count or 1)):
        uuid = "GPU-" + hashlib.sha256(f"{name}/{index}".encode()).hexdigest()[:32]
        uuid = f"{uuid[:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:24]}-{uuid[24:36]}"
        bus = gpu["bus"].format(index=0x17 + index * 0x10)
        rows.append(", ".join([str(index), gpu["name"], uuid, gpu["memory"], gpu["compute_cap"], bus, gpu["driver"]]))
    run(["docker", "cp", str(GPU_DIR / "nvidia-smi"), f"{name}:/usr/bin/nvidia-smi"])
    run(["docker", "exec", "-i", name, "sh", "-c",
         f"mkdir -p /etc/vllmops-sim && cat > /etc/vllmops-sim/gpus.csv && echo {gpu['cuda']} > /etc/vllmops-sim/cuda_version"],
        input_text="\n".join(rows) + "\n")


def wait_for_ssh(address: str, key: Path, deadline_s: float = 90) -> None:
    argv = ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3",
            f"{SSH_USER}@{address}", "systemctl is-system-running --wait >/dev/null; true"]
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if run(argv, check=False, timeout=60).returncode == 0:
            return
        time.sleep(1)
    raise SandboxError(f"no SSH login to {address} within {deadline_s:.0f} s "
                       "(docker logs on the node container shows why)")


def up(prefix: str, count: int, networks: list[str], gpus: list[str] | None = None,
       copies: list[str] | None = None, suites: list[str] | None = None) -> dict:
    """Start the nodes; suites[i] is node i+1's Debian suite (default: NODE_SUITE)."""
    suites = list(suites or []) + [NODE_SUITE] * count
    images = {suite: build_image(suite) for suite in set(suites[:count])}
    networks = [ensure_network(spec, prefix) for spec in networks or [f"{prefix}-mgmt"]]
    key = ssh_key(prefix)
    pubkey = key.with_suffix(".pub").read_text()
    names = [f"{prefix}-node{i}" for i in range(1, count + 1)]
    for position, name in enumerate(names):
        image = images[suites[position]]
        # `up` again keeps running nodes (and what was deployed on them).
        if not node_running(name, image):
            start_node(name, prefix, image, networks)
        authorize_key(name, pubkey)
        if gpus and position < len(gpus) and gpus[position] != "none":
            simulate_gpus(name, gpus[position])
        for copy in copies or []:
            source, _, dest = copy.partition(":")
            run(["docker", "exec", name, "mkdir", "-p", os.path.dirname(dest.rstrip("/")) or "/"])
            run(["docker", "cp", source, f"{name}:{dest}"])
    nodes = []
    for name in names:
        addresses = {net: container_ip(name, net) for net in networks}
        wait_for_ssh(addresses[networks[0]], key)
        nodes.append({"name": name, "address": addresses[networks[0]], "addresses": addresses})
    log(f"{len(nodes)} node(s) up: " + ", ".join(f"{n['name']}={n['address']}" for n in nodes))
    return {"image": images[suites[0]], "images": [images[s] for s in suites[:count]], "user": SSH_USER, "identity_file": str(key), "networks": networks,
            "nodes": nodes}


def _scalar(text: str):
    """KEY=VALUE's value: JSON when it parses (false, 3, [..]), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def write_inventory(path: Path, cluster: dict, extra_vars: list[str] | None = None) -> None:
    """An Ansible inventory of the nodes, in the shape of inventories/spark."""
    hosts = "".join(f"        {n['name']}:\n          ansible_host: {n['address']}\n" for n in cluster["nodes"])
    extra = "".join(f"        {key}: {json.dumps(_scalar(value))}\n" for key, _, value in (v.partition("=") for v in extra_vars or []))
    path.write_text(
        "---\n# Written by tests/sandbox/nodes.py up; removed by make sandbox-down.\n"
        "all:\n  children:\n    vllm_nodes:\n      hosts:\n" + hosts +
        f"      vars:\n        ansible_user: {cluster['user']}\n"
        f"        ansible_ssh_private_key_file: {cluster['identity_file']}\n"
        "        ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n" + extra)
    log(f"inventory written to {path}")


def down(prefix: str) -> None:
    """Remove the prefix's containers, their volumes and networks, by name."""
    if not docker_answers():
        return
    label = f"label={LABEL}={prefix}"
    names = run(["docker", "ps", "-a", "--filter", label, "--format", "{{.Names}}"]).stdout.split()
    if names:
        run(["docker", "rm", "-f", "-v", *names])
        run(["docker", "volume", "rm", *[f"{n}-{data}" for n in names for data in ("docker", "containerd")]],
            check=False)
    nets = run(["docker", "network", "ls", "--filter", label, "--format", "{{.Name}}"]).stdout.split()
    if nets:
        run(["docker", "network", "rm", *nets])
    log(f"removed {len(names)} node(s) and {len(nets)} network(s) of {prefix}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ensure-docker")
    sub.add_parser("build-image")
    p_up = sub.add_parser("up")
    p_up.add_argument("--prefix", required=True)
    p_up.add_argument("--count", type=int, default=2)
    p_up.add_argument("--network", action="append", default=[],
                      help="NAME or NAME=SUBNET to attach (first = management, the SSH address); repeatable")
    p_up.add_argument("--inventory", type=Path, help="also write an Ansible inventory of the nodes here")
    p_up.add_argument("--gpus", action="append", default=[], metavar="KIND:COUNT",
                      help="simulated GPUs of node1, node2, ... in order (none for a node without); repeatable")
    p_up.add_argument("--suite", action="append", default=[], choices=SUITES,
                      help=f"Debian suite of node1, node2, ... in order (default {NODE_SUITE}: docker.io 26; "
                           "bookworm: docker.io 20.10); repeatable")
    p_up.add_argument("--copy", action="append", default=[], metavar="SRC:DEST",
                      help="copy a file or directory from this machine into every node; repeatable")
    p_up.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                      help="also write this group variable into the inventory; repeatable")
    p_down = sub.add_parser("down")
    p_down.add_argument("--prefix", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "ensure-docker":
            ensure_docker()
        elif args.command == "build-image":
            print(build_image())
        elif args.command == "up":
            cluster = up(args.prefix, args.count, args.network, args.gpus, args.copy, args.suite)
            if args.inventory:
                write_inventory(args.inventory, cluster, args.var)
            print(json.dumps(cluster, indent=2))
        else:
            down(args.prefix)
    except SandboxError as err:
        print(f"sandbox: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
