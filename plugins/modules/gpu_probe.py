#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_probe
short_description: Check host GPUs, the NVIDIA container runtime and real GPU passthrough, and say what is wrong
version_added: 0.1.0
description:
  - Reads the host's GPUs from C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) (driver version,
    index, name, UUID, memory, compute capability, PCI bus) and the driver's CUDA version from C(nvidia-smi -q -x).
    Unified-memory GPUs (GB10, DGX Spark) report memory as N/A; their memory is taken from C(/proc/meminfo).
  - Reports the NVIDIA container toolkit (version, runtime hook), Docker's runtimes, default runtime and cgroup
    driver, and the CDI specs present.
  - With O(image), runs one short passthrough container (what C(--gpus all) asks for, or the CDI device when
    NVIDIA CDI specs exist and Docker supports CDI) whose entrypoint is replaced by C(nvidia-smi); it never starts
    the image's own entrypoint, never pulls the image, is killed at O(timeout) and is always removed, in check
    mode too.
  - Returns C(ok) and C(diagnosis), one sentence per problem saying what is wrong and which role or variable
    fixes it. With O(require_gpus) the module fails with that diagnosis when fewer GPUs are usable.
  - Lists the GPU compute processes of the host (C(nvidia-smi --query-compute-apps=pid,process_name,used_memory)),
    each with the Docker container it runs in (from C(/proc/PID/cgroup), named by the Docker Engine) or its
    systemd unit, and says which are not ours (O(own_label), O(own_units)). They hold GPU memory, on GB10 the
    memory the GPU shares with the host; they are reported in RV(foreign_processes), not in the diagnosis.
options:
  image:
    description: Image for the passthrough check (the serving image is a good choice); no passthrough check when unset.
    type: str
  passthrough:
    description:
      - How the passthrough container asks for GPUs. C(auto) uses the CDI device when NVIDIA CDI specs exist and
        the engine reads CDI specs (Docker 25 and newer), C(--gpus all) otherwise.
    type: str
    choices: [auto, gpus, cdi]
    default: auto
  require_gpus:
    description: Fail when fewer GPUs than this are usable (inside the container when O(image) is set).
    type: int
  timeout:
    description: Seconds the passthrough container may take.
    type: int
    default: 120
  own_label:
    description:
      - Container label (its key) that marks our containers; a GPU process in a container carrying it is ours.
      - Unset, no container is ours.
    type: str
  own_units:
    description:
      - systemd units (names without C(.service)) whose processes are ours, instances (C(NAME@...)) included; for
        processes a unit runs itself, not in a container.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - vllmops.cluster.docker_host
  - vllmops.cluster.info_module
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Prove GPU passthrough with the serving image, 1 GPU per node required
  vllmops.cluster.gpu_probe:
    image: "{{ vllm_image }}"
    require_gpus: 1

- name: Only look
  vllmops.cluster.gpu_probe:
  register: gpus

- name: Look for GPU processes that are not ours (containers labelled io.vllmops.unit, our units)
  vllmops.cluster.gpu_probe:
    own_label: io.vllmops.unit
    own_units: [vllmops-ray-head, vllmops-ray-worker, vllmops-vllm]
  register: gpus

- name: Name them
  ansible.builtin.debug:
    msg: "{{ gpus.foreign_processes | map(attribute='description') | list }}"
  # ["PID 4242 (python3) in container comfyui (3f2a9c1d7e60) holds 19135 MiB of GPU memory"]
"""

RETURN = r"""
ok:
  description: True when no problem was found.
  returned: always
  type: bool
diagnosis:
  description: One sentence per problem, saying what is wrong and what fixes it.
  returned: always
  type: list
  elements: str
usable_gpus:
  description: GPUs seen inside the passthrough container, or on the host when no image was given.
  returned: always
  type: int
host:
  description: The host's driver and GPUs.
  returned: always
  type: dict
  contains:
    driver_version:
      description: NVIDIA driver version, null without a working driver.
      type: str
    cuda_version:
      description: Highest CUDA version the driver supports.
      type: str
    gpus:
      description:
        - Each GPU as C(index), C(name), C(uuid), C(memory_total_mib), C(unified_memory) (true when the GPU reports
          no memory of its own and the figure is the host's MemTotal), C(compute_capability), C(pci_bus_id),
          C(driver_version).
      type: list
      elements: dict
    error:
      description: The host-side problem, null when nvidia-smi works.
      type: str
toolkit:
  description: The NVIDIA container toolkit.
  returned: always
  type: dict
  contains:
    installed:
      description: True when nvidia-ctk or the runtime hook is installed.
      type: bool
    version:
      description: C(nvidia-ctk --version).
      type: str
    hook:
      description: Path of nvidia-container-runtime-hook (what C(docker run --gpus) needs), or null.
      type: str
    runtime:
      description: Path of nvidia-container-runtime, or null.
      type: str
docker:
  description: Docker Engine as it reports itself.
  returned: always
  type: dict
  contains:
    server_version:
      description: Engine version.
      type: str
    runtimes:
      description: Runtime names.
      type: list
      elements: str
    default_runtime:
      description: Default runtime.
      type: str
    cgroup_driver:
      description: cgroupfs or systemd.
      type: str
    cgroup_version:
      description: 1 or 2.
      type: str
    cdi_spec_dirs:
      description: Where the engine reads CDI specs (Docker 25 and newer).
      type: list
      elements: str
    nvidia_runtime:
      description: True when an C(nvidia) runtime is configured.
      type: bool
    error:
      description: Set when the engine does not answer.
      type: str
processes:
  description: The GPU compute processes of the host, none when nvidia-smi does not work there.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process ID on the host.
      type: int
    name:
      description: The process name nvidia-smi gives (often the executable's path).
      type: str
    used_memory_mib:
      description: GPU memory it holds (MiB, summed over its GPUs); null where nvidia-smi gives no figure.
      type: int
    visible:
      description: False when the process is not in C(/proc) (it ended, or runs in another PID namespace).
      type: bool
    cgroup:
      description: Its cgroup path, from C(/proc/PID/cgroup).
      type: str
    container_id:
      description: Full ID of the Docker container it runs in, null outside one.
      type: str
    container_name:
      description: That container's name, as the Docker Engine knows it; null when the engine does not know it.
      type: str
    unit:
      description: The systemd unit (without C(.service)) its cgroup is in, null outside one.
      type: str
    ours:
      description: True in a container labelled O(own_label) or in one of O(own_units).
      type: bool
    description:
      description: PID, name, container or unit and memory in one phrase, for messages.
      type: str
  sample:
    - pid: 4242
      name: python3
      used_memory_mib: 19135
      visible: true
      cgroup: /system.slice/docker-3f2a9c1d7e60aa55c6f1b0e2d3c4b5a697887766554433221100ffeeddccbbaa.scope
      container_id: 3f2a9c1d7e60aa55c6f1b0e2d3c4b5a697887766554433221100ffeeddccbbaa
      container_name: comfyui
      unit: null
      ours: false
      description: PID 4242 (python3) in container comfyui (3f2a9c1d7e60) holds 19135 MiB of GPU memory
foreign_processes:
  description: The RV(processes) that are not ours, as there.
  returned: always
  type: list
  elements: dict
processes_error:
  description: Why the processes could not be listed (nvidia-smi failed, or printed what is not its CSV); null otherwise.
  returned: always
  type: str
cdi:
  description: CDI spec files as C(path) and the device C(kinds) they declare.
  returned: always
  type: list
  elements: dict
passthrough:
  description: The passthrough check, null without O(image).
  returned: always
  type: dict
  contains:
    mode:
      description: C(gpus) or C(cdi).
      type: str
    image:
      description: The image used.
      type: str
    gpus:
      description: GPUs seen inside, as C(index), C(name), C(uuid).
      type: list
      elements: dict
    error:
      description: The diagnosed problem, null when the container saw GPUs.
      type: str
    output:
      description: The container's output (tail), for the record.
      type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.gpu import (
    COMPUTE_APP_FIELDS,
    CONTAINER_FAILURES,
    GPU_QUERY_FIELDS,
    HOST_FAILURES,
    GpuProbeError,
    cdi_specs,
    classify,
    classify_processes,
    describe_engine_error,
    device_requests,
    diagnose,
    meminfo_total_mib,
    parse_compute_apps_csv,
    parse_cuda_version,
    parse_gpu_csv,
    parse_passthrough_csv,
    parse_toolkit_version,
    summarize_docker_info,
)


def _tail(text: str, size: int = 600) -> str:
    return (text or "").strip()[-size:]


def host_facts(module) -> dict:
    facts = {"driver_version": None, "cuda_version": None, "gpus": [], "error": None}
    smi = module.get_bin_path("nvidia-smi")
    if smi is None:
        facts["error"] = ("no NVIDIA driver on this host (nvidia-smi not found): install the NVIDIA driver for "
                          "this GPU (vendor package or DGX OS); this collection does not install drivers")
        return facts
    rc, out, err = module.run_command([smi, "--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"])
    if rc != 0:
        facts["error"] = classify(out + err, HOST_FAILURES) or f"nvidia-smi failed on the host (rc={rc}): {_tail(out + err)}"
        return facts
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            unified = meminfo_total_mib(handle.read())
    except OSError:
        unified = None
    try:
        facts["gpus"] = parse_gpu_csv(out, unified)
    except GpuProbeError as err:
        facts["error"] = str(err)
        return facts
    if not facts["gpus"]:
        facts["error"] = "nvidia-smi lists no GPU on this host: check that the GPUs are seen (lspci | grep -i nvidia)"
    facts["driver_version"] = facts["gpus"][0]["driver_version"] if facts["gpus"] else None
    rc, out, _err = module.run_command([smi, "-q", "-x"])
    facts["cuda_version"] = parse_cuda_version(out) if rc == 0 else None
    return facts


def _read_cgroup(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            return handle.read()
    except OSError:  # gone since nvidia-smi listed it, or not in this PID namespace
        return None


def process_facts(module, docker: DockerClient | None, own_label: str | None, own_units: list[str]) -> dict:
    """The host's GPU compute processes, each placed in its container or unit and told ours or not."""
    facts = {"processes": [], "foreign_processes": [], "processes_error": None}
    smi = module.get_bin_path("nvidia-smi")
    rc, out, err = module.run_command([smi, "--query-compute-apps=" + ",".join(COMPUTE_APP_FIELDS),
                                       "--format=csv,noheader,nounits"])
    if rc != 0:
        facts["processes_error"] = f"nvidia-smi could not list the GPU processes (rc={rc}): {_tail(out + err, 300)}"
        return facts
    try:
        processes = parse_compute_apps_csv(out)
    except GpuProbeError as error:
        facts["processes_error"] = str(error)
        return facts
    if not processes:
        return facts
    cgroups = {p["pid"]: _read_cgroup(p["pid"]) for p in processes}
    containers = None
    if docker is not None:
        try:
            containers = docker.containers()
        except DockerError:  # no engine (a fresh host): containers stay unnamed, none is ours by its label
            containers = None
    facts["processes"] = classify_processes(processes, cgroups, containers, own_label, own_units)
    facts["foreign_processes"] = [p for p in facts["processes"] if not p["ours"]]
    return facts


def toolkit_facts(module) -> dict:
    ctk = module.get_bin_path("nvidia-ctk")
    hook = module.get_bin_path("nvidia-container-runtime-hook")
    runtime = module.get_bin_path("nvidia-container-runtime")
    version = None
    if ctk:
        rc, out, _err = module.run_command([ctk, "--version"])
        version = parse_toolkit_version(out) if rc == 0 else None
    return {"installed": bool(ctk or hook), "version": version, "hook": hook, "runtime": runtime}


def docker_facts(docker: DockerClient) -> dict:
    try:
        return summarize_docker_info(docker.info())
    except DockerError as err:
        return {"nvidia_runtime": False, "runtimes": [], "error": describe_engine_error(err, docker.socket_path)}


def passthrough_facts(docker: DockerClient, image: str, mode: str, timeout: int, has_cdi: bool) -> dict:
    if mode == "auto":
        mode = "cdi" if has_cdi else "gpus"
    result = {"mode": mode, "image": image, "gpus": [], "error": None, "output": ""}
    try:
        run = docker.run(image, ["nvidia-smi"], ["--query-gpu=index,name,uuid", "--format=csv,noheader"], timeout,
                         name=f"vllmops-gpu-probe-{os.getpid()}", labels={"io.vllmops.probe": "gpu"},
                         device_requests=device_requests(mode))
    except DockerError as err:
        result["output"] = _tail(str(err))
        result["error"] = classify(str(err), CONTAINER_FAILURES) or f"the passthrough container failed to start: {_tail(str(err), 300)}"
        return result
    out = run.stdout.decode("utf-8", errors="replace")
    both = out + run.stderr.decode("utf-8", errors="replace")
    result["output"] = _tail(both)
    if run.timed_out:
        result["error"] = (f"the passthrough container did not finish within {timeout} s: the NVIDIA runtime hangs "
                           "setting up the GPUs; check `dmesg` and the driver")
    elif run.status != 0:
        result["error"] = classify(both, CONTAINER_FAILURES) or (
            f"the passthrough container failed (rc={run.status}): {_tail(both, 300)}")
    else:
        result["gpus"] = parse_passthrough_csv(out)
        if not result["gpus"]:
            result["error"] = "the passthrough container ran but saw no GPU: check NVIDIA_VISIBLE_DEVICES in the image"
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str"),
            passthrough=dict(type="str", default="auto", choices=["auto", "gpus", "cdi"]),
            require_gpus=dict(type="int"),
            timeout=dict(type="int", default=120),
            own_label=dict(type="str"),
            own_units=dict(type="list", elements="str", default=[]),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}
    params = module.params
    try:
        docker = DockerClient(params["docker_host"])
        engine = docker_facts(docker)
    except DockerError as err:  # docker_host is no unix socket
        docker, engine = None, {"nvidia_runtime": False, "runtimes": [], "error": str(err)}
    facts = {"host": host_facts(module), "toolkit": toolkit_facts(module), "docker": engine,
             "cdi": cdi_specs(), "passthrough": None}
    if facts["host"]["error"]:  # no working nvidia-smi: no process to list
        facts.update(processes=[], foreign_processes=[], processes_error=None)
    else:
        facts.update(process_facts(module, docker, params["own_label"], params["own_units"]))
    # CDI only where the engine reads CDI specs (Docker 25+ reports CDISpecDirs); older engines take
    # `--device nvidia.com/gpu=all` for a device path and fail.
    has_cdi = bool(facts["docker"].get("cdi_spec_dirs")) and any(
        any(k.startswith("nvidia.com/") for k in spec["kinds"]) for spec in facts["cdi"])
    if params["image"]:
        if facts["docker"].get("error"):
            facts["passthrough"] = {"mode": None, "image": params["image"], "gpus": [], "output": "",
                                    "error": None}  # the docker problem is already in the diagnosis
        else:
            facts["passthrough"] = passthrough_facts(docker, params["image"], params["passthrough"],
                                                     params["timeout"], has_cdi)
    diagnosis = diagnose(facts, params["require_gpus"])
    usable = len(facts["passthrough"]["gpus"]) if facts["passthrough"] is not None else len(facts["host"]["gpus"])
    result = dict(facts, ok=not diagnosis, diagnosis=diagnosis, usable_gpus=usable, changed=False)
    if params["require_gpus"] and diagnosis:
        module.fail_json(msg=" ".join(diagnosis), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
