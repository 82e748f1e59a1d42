"""GPU compute processes: nvidia-smi's --query-compute-apps CSV, /proc/PID/cgroup, and which processes are ours."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.gpu import (
    GpuProbeError,
    cgroup_owner,
    classify_processes,
    parse_compute_apps_csv,
)

OURS_ID = "8c1f" + "0" * 56 + "beef"
FOREIGN_ID = "3f2a9c1d7e60" + "ab" * 26
LABEL = "io.vllmops.unit"
UNITS = ["vllmops-ray-head", "vllmops-ray-worker", "vllmops-vllm"]
ENGINE = [  # GET /containers/json?all=1, as the engine summarises containers
    {"Id": OURS_ID, "Names": ["/vllmops-vllm"], "Labels": {LABEL: "vllmops-vllm", "io.vllmops.rank": "0"}},
    {"Id": FOREIGN_ID, "Names": ["/comfyui"], "Labels": {"com.docker.compose.project": "comfy"}},
]


# `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits`
@pytest.mark.parametrize(("output", "expected"), [
    pytest.param("", [], id="no process: nothing at all"),
    pytest.param("No running processes found\n", [], id="older drivers' sentence"),
    pytest.param("114687, /usr/local/bin/python, 19135\n",
                 [{"pid": 114687, "name": "/usr/local/bin/python", "used_memory_mib": 19135}], id="GB10 vLLM"),
    pytest.param("4242, python3, [N/A]\n4343, VLLM::Worker_TP0, [Not Supported]\n4444, x, [Insufficient Permissions]\n",
                 [{"pid": 4242, "name": "python3", "used_memory_mib": None},
                  {"pid": 4343, "name": "VLLM::Worker_TP0", "used_memory_mib": None},
                  {"pid": 4444, "name": "x", "used_memory_mib": None}], id="no figure"),
    pytest.param("77, /opt/app, name with, comma, 512\n",
                 [{"pid": 77, "name": "/opt/app, name with, comma", "used_memory_mib": 512}], id="comma in the name"),
    pytest.param("900, ray::RayWorkerWrapper, 40000\n900, ray::RayWorkerWrapper, 41000\n",
                 [{"pid": 900, "name": "ray::RayWorkerWrapper", "used_memory_mib": 81000}],
                 id="one process on two GPUs: one entry, memory added"),
    pytest.param("12, python3, 2048 MiB\n", [{"pid": 12, "name": "python3", "used_memory_mib": 2048}],
                 id="with units after all"),
])
def test_compute_apps_csv(output, expected):
    assert parse_compute_apps_csv(output) == expected


@pytest.mark.parametrize("output", [
    "pid, process_name, used_gpu_memory [MiB]\n1, a, 2\n",  # a header: the query's format is not what we asked
    "Failed to initialize NVML: Unknown Error\n",
    "12, python3, lots\n",
])
def test_compute_apps_csv_refuses_what_it_does_not_understand(output):
    with pytest.raises(GpuProbeError, match="nvidia-smi"):
        parse_compute_apps_csv(output)


# /proc/PID/cgroup: (text, container ID, unit)
@pytest.mark.parametrize(("text", "container", "unit"), [
    pytest.param(f"0::/system.slice/docker-{FOREIGN_ID}.scope\n", FOREIGN_ID, None, id="v2, systemd driver"),
    pytest.param(f"0::/docker/{FOREIGN_ID}\n", FOREIGN_ID, None, id="v2, cgroupfs driver"),
    pytest.param("".join(f"{n}:{c}:/docker/{FOREIGN_ID}\n" for n, c in
                         [(12, "memory"), (1, "name=systemd"), (0, "")]), FOREIGN_ID, None, id="v1 cgroupfs"),
    pytest.param(f"1:name=systemd:/system.slice/docker-{FOREIGN_ID}.scope\n0::/\n", FOREIGN_ID, None,
                 id="v1 hybrid: the unified hierarchy says nothing"),
    pytest.param(f"0::/docker/{'e' * 64}/docker/{OURS_ID}\n", OURS_ID, None, id="Docker in a container: innermost"),
    pytest.param(f"0::/docker/{'e' * 64}/system.slice/docker-{OURS_ID}.scope\n", OURS_ID, None,
                 id="Docker (systemd driver) in a container"),
    pytest.param("0::/system.slice/vllmops-vllm.service\n", None, "vllmops-vllm", id="a unit runs it itself"),
    pytest.param("0::/user.slice/user-1000.slice/session-4.scope\n", None, None, id="a login session"),
    pytest.param("0::/system.slice/docker.service\n", None, "docker", id="dockerd itself is no container"),
    pytest.param(None, None, None, id="not readable"),
])
def test_cgroup_owner(text, container, unit):
    owner = cgroup_owner(text)
    assert (owner["container_id"], owner["unit"]) == (container, unit)


def _classify(lines, cgroups, containers=ENGINE):
    return classify_processes(parse_compute_apps_csv(lines), cgroups, containers, LABEL, UNITS)


def test_our_containers_and_units_are_ours_and_the_rest_is_named():
    processes = _classify(
        "101, VLLM::EngineCore, [N/A]\n202, python3, 19135\n303, ray::IDLE, 800\n404, /usr/bin/python3, 512\n"
        "505, stress, 64\n",
        {101: f"0::/system.slice/docker-{OURS_ID}.scope\n",
         202: f"0::/system.slice/docker-{FOREIGN_ID}.scope\n",
         303: "0::/system.slice/vllmops-ray-worker@2.service\n",
         404: "0::/user.slice/user-1000.slice/session-4.scope\n",
         505: None})
    assert [(p["pid"], p["ours"]) for p in processes] == [(101, True), (202, False), (303, True), (404, False),
                                                          (505, False)]
    assert [p["description"] for p in processes if not p["ours"]] == [
        "PID 202 (python3) in container comfyui (3f2a9c1d7e60) holds 19135 MiB of GPU memory",
        "PID 404 (/usr/bin/python3) holds 512 MiB of GPU memory",
        "PID 505 (stress) (not in /proc: it ended, or runs in another PID namespace) holds 64 MiB of GPU memory",
    ]
    assert processes[0]["container_name"] == "vllmops-vllm"
    assert processes[0]["description"] == (f"PID 101 (VLLM::EngineCore) in container vllmops-vllm ({OURS_ID[:12]}) "
                                           "holds GPU memory (nvidia-smi gives no figure)")


@pytest.mark.parametrize(("cgroup", "ours"), [
    pytest.param("0::/system.slice/vllmops-vllm.service\n", True, id="our unit"),
    pytest.param("0::/system.slice/vllmops-vllm-test.service\n", False, id="a unit that only starts like ours"),
    pytest.param("0::/system.slice/ollama.service\n", False, id="another unit"),
])
def test_a_unit_is_ours_by_its_exact_name(cgroup, ours):
    [process] = _classify("7, python3, 100\n", {7: cgroup})
    assert process["ours"] is ours
    assert process["description"].startswith(f"PID 7 (python3) in {cgroup.split('/')[-1].strip()}")


def test_a_container_without_our_label_is_foreign_even_when_named_like_ours():
    engine = [{"Id": OURS_ID, "Names": ["/vllmops-vllm"], "Labels": {}}]
    [process] = _classify("7, python3, 100\n", {7: f"0::/docker/{OURS_ID}\n"}, engine)
    assert not process["ours"]


def test_without_the_engine_a_container_is_named_by_its_id_and_not_ours():
    [unknown] = _classify("7, python3, 100\n", {7: f"0::/docker/{OURS_ID}\n"}, containers=[])
    [unasked] = _classify("7, python3, 100\n", {7: f"0::/docker/{OURS_ID}\n"}, containers=None)
    assert not unknown["ours"] and not unasked["ours"]
    assert "in container 8c1f00000000 (unknown to this host's Docker Engine)" in unknown["description"]
    assert "in container 8c1f00000000 (the Docker Engine did not answer)" in unasked["description"]


def test_without_a_label_or_units_nothing_is_ours():
    processes = classify_processes(parse_compute_apps_csv("7, a, 1\n8, b, 2\n"),
                                   {7: f"0::/docker/{OURS_ID}\n", 8: "0::/system.slice/vllmops-vllm.service\n"},
                                   ENGINE, None)
    assert [p["ours"] for p in processes] == [False, False]
