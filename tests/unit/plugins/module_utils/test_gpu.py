"""gpu_probe's parsers and diagnosis, from realistic command outputs."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.gpu import (
    CONTAINER_FAILURES,
    HOST_FAILURES,
    classify,
    describe_engine_error,
    device_requests,
    diagnose,
    meminfo_total_mib,
    parse_cuda_version,
    parse_gpu_csv,
    parse_passthrough_csv,
    parse_toolkit_version,
    summarize_docker_info,
)

GB10 = "0, NVIDIA GB10, GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5, [N/A], 12.1, 0000000F:01:00.0, 580.126.09\n"
RTX8 = "".join(
    f"{i}, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, GPU-5c3f{i}a1e-7f0e-4d2b-9a61-0c7d2e8b{i}f10, "
    f"97887, 12.0, 00000000:{0x17 + i * 0x10:02X}:00.0, 580.95.05\n" for i in range(8))
H200 = "0, NVIDIA H200, GPU-9b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0, 143771, 9.0, 00000000:19:00.0, 570.172.08\n"
MEMINFO_SPARK = "MemTotal:       125483932 kB\nMemFree:         1200000 kB\n"


def test_gb10_unified_memory_comes_from_meminfo():
    [gpu] = parse_gpu_csv(GB10, meminfo_total_mib(MEMINFO_SPARK))
    assert gpu == {"index": 0, "name": "NVIDIA GB10", "uuid": "GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5",
                   "memory_total_mib": 122542, "unified_memory": True, "compute_capability": "12.1",
                   "pci_bus_id": "0000000F:01:00.0", "driver_version": "580.126.09"}


def test_eight_rtx_pro_6000():
    gpus = parse_gpu_csv(RTX8)
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["memory_total_mib"] for g in gpus} == {97887}
    assert {g["compute_capability"] for g in gpus} == {"12.0"}
    assert not any(g["unified_memory"] for g in gpus)


def test_h200():
    [gpu] = parse_gpu_csv(H200)
    assert (gpu["name"], gpu["memory_total_mib"], gpu["compute_capability"]) == ("NVIDIA H200", 143771, "9.0")


def test_cuda_version_from_xml():
    xml = ("<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v12.dtd\">\n<nvidia_smi_log>"
           "<timestamp>Sun Nov 29 10:00:00 2026</timestamp><driver_version>580.126.09</driver_version>"
           "<cuda_version>13.0</cuda_version><attached_gpus>1</attached_gpus></nvidia_smi_log>")
    assert parse_cuda_version(xml) == "13.0"
    assert parse_cuda_version("not xml") is None


def test_toolkit_version():
    assert parse_toolkit_version("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80\n") == "1.17.8"


@pytest.mark.parametrize(("output", "expected"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.\n", "driver is not loaded"),
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n", "reboot the host"),
    ("No devices were found\n", "driver is not loaded"),
])
def test_host_failures(output, expected):
    assert expected in classify(output, HOST_FAILURES)


@pytest.mark.parametrize(("stderr", "expected"), [
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].\n'
     "See 'docker run --help'.", "no NVIDIA runtime hook registered"),
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia.", "no 'nvidia' runtime"),
    ("Failed to initialize NVML: Unknown Error\n", "daemon_reload_fix"),
    ("exec /usr/bin/nvidia-smi: exec format error\n", "another CPU architecture"),
    ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
     "runtime create failed: runc create failed: unable to start container process: error during container init: "
     "error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
     "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.",
     "nvidia-container-cli failed"),
    ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
     'runtime create failed: runc create failed: unable to start container process: exec: "nvidia-smi": '
     "executable file not found in $PATH: unknown.", "has no nvidia-smi"),
    ("docker: nvidia.com/gpu=all is not an absolute path.\nSee 'docker run --help'.", "does not understand CDI"),
    # The engine's own words (the API passes them through) where an engine before Docker 25 gets a CDI request.
    ('could not select device driver "cdi" with capabilities: []', "does not understand CDI"),
    ("No such image: vllm/vllm-openai:v9", "image is not on this host"),
    ("docker: Error response from daemon: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=all.",
     "generate the CDI spec"),
])
def test_container_failures(stderr, expected):
    assert expected in classify(stderr, CONTAINER_FAILURES)


@pytest.mark.parametrize(("mode", "requests"), [
    ("gpus", [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]),  # docker run --gpus all
    ("cdi", [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}]),  # docker run --device nvidia.com/gpu=all
])
def test_device_requests_are_what_the_docker_cli_sends(mode, requests):
    assert device_requests(mode) == requests


def test_passthrough_csv_skips_what_is_not_a_gpu_line():
    out = "0, NVIDIA H200, GPU-9b1c\nWarning: persistence mode is off\n1, NVIDIA H200, GPU-77aa\n"
    assert parse_passthrough_csv(out) == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-9b1c"},
                                          {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-77aa"}]


class _EngineError(Exception):
    def __init__(self, message, unreachable):
        super().__init__(message)
        self.unreachable = unreachable


def test_an_engine_without_a_socket_is_not_installed_and_one_that_fails_does_not_answer(tmp_path):
    missing = describe_engine_error(_EngineError("no such file", True), str(tmp_path / "docker.sock"))
    assert missing.startswith("Docker Engine is not installed or not running (no socket ")
    (tmp_path / "docker.sock").write_text("")
    refusing = describe_engine_error(_EngineError("connection refused", True), str(tmp_path / "docker.sock"))
    assert refusing == "Docker Engine does not answer (connection refused): apply the role vllmops.cluster.docker"


def test_docker_info_summary():
    info = {"ServerVersion": "28.2.2", "Runtimes": {"io.containerd.runc.v2": {}, "nvidia": {"path": "nvidia-container-runtime"},
            "runc": {}}, "DefaultRuntime": "runc", "CgroupDriver": "systemd", "CgroupVersion": "2",
            "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}
    summary = summarize_docker_info(info)
    assert summary["nvidia_runtime"] is True
    assert summary["runtimes"] == ["io.containerd.runc.v2", "nvidia", "runc"]


def _facts(**overrides):
    facts = {"host": {"gpus": [{"index": 0}], "error": None},
             "toolkit": {"installed": True, "hook": "/usr/bin/nvidia-container-runtime-hook"},
             "docker": {"nvidia_runtime": True}, "cdi": [], "passthrough": {"gpus": [{"index": 0}], "error": None}}
    facts.update(overrides)
    return facts


def test_healthy_host_has_no_diagnosis():
    assert diagnose(_facts(), require_gpus=1) == []


def test_missing_toolkit_names_the_role():
    [sentence] = diagnose(_facts(toolkit={"installed": False, "hook": None}, passthrough=None), None)
    assert "vllmops.cluster.nvidia_container_toolkit" in sentence


def test_too_few_gpus_fails_requirement():
    facts = _facts(host={"gpus": [{"index": 0}, {"index": 1}], "error": None})
    problems = diagnose(facts, require_gpus=2)
    assert any("sees 1 of the host's 2 GPUs" in p for p in problems)
    assert any("1 usable GPU(s) where 2 are required" in p for p in problems)
