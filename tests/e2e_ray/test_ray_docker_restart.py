"""A daemon.json change restarts Docker Engine on every node: deploy.yml stops
our units first (vLLM and the head watchdog, then Ray's worker, then its
head), restarts the engine once per node, says what it stopped and why, and
the ray_cluster and vllm_serve plays start each unit once, in order, with
readiness. The same run again restarts nothing. The change is a key dockerd
reloads (max-concurrent-uploads): the story puts the file back and reloads
the engine, without a restart."""

from __future__ import annotations

import time

from ray_cluster import HEAD, WORKER

EXTRA = {"docker_daemon_json_extra": {"max-concurrent-uploads": 7}}
OURS = {HEAD: ["vllmops-vllm", "vllmops-ray-head"], WORKER: ["vllmops-ray-worker"]}
EVENTS = r"^(Stopping|Stopped|Started) (vllmops-vllm|vllmops-ray-head|vllmops-ray-worker|docker)\.service"


def journal(cluster, node: str, since: float) -> list[tuple[float, str, str]]:
    """systemd's Stopping/Stopped/Started lines for Docker and our serving units since then:
    (time, event, unit), oldest first."""
    out = cluster.on(node, "journalctl", "--since", f"@{int(since)}", "--output", "short-unix", "--quiet",
                     "--no-pager", "--grep", EVENTS, check=False)
    events = []
    for line in out.splitlines():
        stamp, _, rest = line.partition(" ")
        event, unit = rest.split(": ", 1)[1].split()[:2]
        events.append((float(stamp), event, unit.removesuffix(".service")))
    return events


def first(events, event: str, unit: str) -> float:
    return min(stamp for stamp, kind, name in events if kind == event and name == unit)


def notices(run) -> dict[str, str]:
    """The docker role's word on each node's restart: host -> message."""
    return {host: result["msg"] for play in run.doc.get("plays", []) for task in play["tasks"]
            for host, result in task["hosts"].items() if str(result.get("msg", "")).startswith("Docker Engine restarts on")}


def test_a_daemon_json_change_restarts_docker_once_and_our_units_once_in_order(cluster):
    before = {node: cluster.on(node, "cat", "/etc/docker/daemon.json") for node in OURS}
    since = time.time() - 1
    try:
        run = cluster.deploy("--tags", "docker,nvidia_container_toolkit,ray_cluster,vllm_serve", extra=EXTRA)
        assert run.rc == 0, run
        events = {node: journal(cluster, node, since) for node in OURS}

        # Docker once per node; each unit of ours stopped before it and started once after it.
        for node, units in OURS.items():
            started = [name for _, kind, name in events[node] if kind == "Started"]
            assert sorted(started) == sorted(["docker", *units]), (node, events[node])
            for unit in units:
                assert first(events[node], "Stopped", unit) < first(events[node], "Stopping", "docker"), (node, unit)
                assert first(events[node], "Started", unit) > first(events[node], "Started", "docker"), (node, unit)
        starts = {node: sum(kind == "Started" for _, kind, _ in found) for node, found in events.items()}
        print(f"Docker restarted once per node; unit starts (Docker included): {starts}; vLLM down "
              f"{first(events[HEAD], 'Started', 'vllmops-vllm') - first(events[HEAD], 'Stopping', 'vllmops-vllm'):.0f} s"
              " until its unit started again")
        # Stopped in order across the nodes (vLLM, the worker, the head), started the other way round.
        at = {unit: (first(events[node], "Stopping", unit), first(events[node], "Started", unit))
              for node, units in OURS.items() for unit in units}
        assert at["vllmops-vllm"][0] < at["vllmops-ray-worker"][0] < at["vllmops-ray-head"][0], at
        assert at["vllmops-ray-head"][1] < at["vllmops-ray-worker"][1] < at["vllmops-vllm"][1], at

        # The run says what it stopped, in which order, and why.
        said = notices(run)
        assert sorted(said) == sorted(OURS), run.stdout[-3000:]
        for node, units in OURS.items():
            assert "daemon.json changed" in said[node], said[node]
            named = [said[node].index(f"{unit}.service") for unit in units]
            assert named == sorted(named), said[node]
        assert run.fact("vllmops_docker_restarted") == {HEAD: True, WORKER: True}
        assert cluster.complete("After Docker restarted", 3)["usage"]["completion_tokens"] == 3

        # Nothing to change: nothing restarts (the plays that write daemon.json: docker, the toolkit's).
        state, again = cluster.state(), time.time()
        rerun = cluster.deploy("--tags", "docker,nvidia_container_toolkit", extra=EXTRA)
        assert rerun.rc == 0, rerun
        assert notices(rerun) == {} and rerun.fact("vllmops_docker_restarted") == {}, rerun
        assert all(journal(cluster, node, again) == [] for node in OURS)
        assert cluster.state() == state
    finally:
        for node, content in before.items():
            cluster.run(node, "sh", "-c", 'printf "%s\\n" "$1" > /etc/docker/daemon.json && systemctl reload docker',
                        "sh", content)
