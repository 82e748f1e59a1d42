"""The rank watchdog (roles/vllm_serve/templates/vllm-watchdog.sh.j2), rendered and run with a `systemctl` that
records restarts, a `docker top` that lists the container's processes and an `ss` that shows the node's sockets;
and the deploy's pause of it (its timer, and a check in flight)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "vllm_serve"
HEAD = "10.88.0.2"
# A headless rank's sockets to rank 0, as `ss -Htnp state established` prints them. The container's processes are
# 4242 (the API server) and 4250 (a worker).
OWN = f'0 0 10.88.0.3:41234 {HEAD}:29501 users:(("vllm",pid=4242,fd=31))'
OWN_WORKER = f'0 0 10.88.0.3:41240 {HEAD}:29501 users:(("VLLM::Worker",pid=4250,fd=12),("vllm",pid=4242,fd=40))'
NFS = f"0 0 10.88.0.3:875 {HEAD}:2049"  # the kernel's NFS client: no process
SCRAPE = f'0 0 10.88.0.3:9100 {HEAD}:51812 users:(("node_exporter",pid=14242,fd=7))'  # keep-alive, another process


@pytest.fixture
def node(tmp_path):
    """Rank 1's node: the watchdog rendered with its state under tmp_path, and fake commands on PATH."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    text = jinja2.Template((ROLE / "templates" / "vllm-watchdog.sh.j2").read_text(), undefined=jinja2.StrictUndefined).render(
        ansible_managed="Ansible managed", _vllm_serve_member={"rank": 1}, vllmops_plan={"summary": "mp multi-node"},
        _vllm_serve_watchdog="vllmops-vllm-watchdog", _vllm_serve_unit="vllmops-vllm", vllm_serve_watchdog_grace=10**9,
        _vllm_serve_peers=[HEAD])
    assert "state_dir=/run/vllmops\n" in text
    script = tmp_path / "vllm-watchdog.sh"
    script.write_text(text.replace("state_dir=/run/vllmops\n", f"state_dir={state}\n"))
    commands = {
        "systemctl": 'case "$1 $2" in\n'
                     '  "is-active "*) echo active ;;\n'
                     '  "show --property=InvocationID") echo run-1 ;;\n'
                     '  "show --property=ActiveEnterTimestampMonotonic") echo 1 ;;\n'
                     f'  "restart "*) echo "$*" >>{tmp_path}/restarts ;;\n'
                     "esac\n",
        # docker top vllmops-vllm -eo pid: the host PIDs of the container's processes, under a header
        "docker": f'[ "$1 $2" = "top vllmops-vllm" ] && [ -f {tmp_path}/pids ] || exit 1\necho PID\ncat {tmp_path}/pids\n',
        "ss": f"cat {tmp_path}/sockets\n",
    }
    for name, body in commands.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "pids").write_text("4242\n4250\n")
    return {"dir": tmp_path, "script": script, "path": f"{bin_dir}:{os.environ['PATH']}"}


def check(node, *sockets, grace=None):
    """One run of the watchdog with these sockets on the node: (stdout, stderr, the restarts it made)."""
    (node["dir"] / "sockets").write_text("".join(f"{line}\n" for line in sockets))
    script = node["script"]
    if grace is not None:
        script = node["dir"] / "vllm-watchdog-grace.sh"
        script.write_text(node["script"].read_text().replace("grace=1000000000\n", f"grace={grace}\n"))
    proc = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=dict(os.environ, PATH=node["path"]),
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    restarts = node["dir"] / "restarts"
    return proc.stdout, proc.stderr, restarts.read_text().splitlines() if restarts.exists() else []


def test_a_rank_whose_connections_stay_is_left_alone(node):
    for _ in range(3):
        _out, _err, restarts = check(node, OWN, OWN_WORKER, NFS, SCRAPE)
    assert restarts == []


def test_a_foreign_connection_to_the_peer_does_not_keep_a_rank_whose_peer_died(node):
    check(node, OWN, OWN_WORKER, NFS, SCRAPE)
    out, _err, restarts = check(node, NFS, SCRAPE)  # rank 0 died: only the NFS mount and the scrape are left
    assert restarts == ["restart vllmops-vllm"]
    assert out.strip() == (f"rank 1: none of its connections to {HEAD} is left (the peer died or restarted): "
                           "restarting vllmops-vllm so that every rank meets again")


def test_foreign_connections_alone_are_no_connection_of_the_rank_past_its_grace(node):
    out, _err, restarts = check(node, NFS, SCRAPE, grace=0)
    assert restarts == ["restart vllmops-vllm"]
    assert f"no connection to {HEAD} within 0 s of its start" in out


def test_without_the_containers_processes_nothing_is_checked(node):
    check(node, OWN, OWN_WORKER)
    (node["dir"] / "pids").unlink()  # docker top fails (the container is gone, or Docker does not answer)
    _out, err, restarts = check(node, NFS, grace=0)
    assert restarts == []
    assert "cannot list the processes of container vllmops-vllm (docker top): not checked this time" in err


# --- the deploy's pause ------------------------------------------------------------------------------
def _stopped_units(tasks):
    """The units the systemd_service tasks of a tasks file stop, their loops expanded."""
    for task in tasks:
        yield from _stopped_units(task.get("block", []))
        args = task.get("ansible.builtin.systemd_service") or {}
        if args.get("state") == "stopped":
            for item in task.get("loop", [None]):
                yield args["name"].replace("{{ item }}", str(item))


@pytest.mark.parametrize("tasks_file", ["unit.yml", "go_back.yml"])
def test_a_pause_of_the_rank_watchdog_stops_a_check_in_flight_too(tasks_file):
    """Stopping the timer alone leaves a run already started free to restart a rank the deploy is restarting."""
    stopped = set(_stopped_units(yaml.safe_load((ROLE / "tasks" / tasks_file).read_text())))
    assert {"{{ _vllm_serve_watchdog }}.timer", "{{ _vllm_serve_watchdog }}.service"} <= stopped, stopped
