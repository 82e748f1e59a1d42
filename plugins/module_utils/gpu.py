# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU passthrough facts and their diagnosis: host GPUs (nvidia-smi's CSV
and XML output), the NVIDIA container toolkit, Docker's runtimes and CDI,
and what a short passthrough container sees; and the GPU compute processes
on the host, each found in its container or unit and told ours or foreign.

Every problem becomes one sentence saying what is wrong and what fixes it.
"""

from __future__ import annotations

import csv
import os
import re
from xml.etree import ElementTree

GPU_QUERY_FIELDS = ("index", "name", "uuid", "memory.total", "compute_cap", "pci.bus_id", "driver_version")
COMPUTE_APP_FIELDS = ("pid", "process_name", "used_memory")
ROLE = "vllmops.cluster.nvidia_container_toolkit"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


class GpuProbeError(Exception):
    """A failure with the message an operator needs."""


def _na(value: str) -> bool:
    return value.strip() in ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported")


def parse_gpu_csv(text: str, unified_memory_mib: int | None = None) -> list[dict]:
    """`nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(GPU_QUERY_FIELDS):
            raise GpuProbeError(f"unexpected nvidia-smi CSV line (want {len(GPU_QUERY_FIELDS)} fields): {line!r}")
        row = dict(zip(GPU_QUERY_FIELDS, cells, strict=True))
        unified = _na(row["memory.total"])
        gpus.append({
            "index": int(row["index"]),
            "name": row["name"],
            "uuid": row["uuid"],
            "memory_total_mib": unified_memory_mib if unified else int(float(row["memory.total"])),
            "unified_memory": unified,
            "compute_capability": None if _na(row["compute_cap"]) else row["compute_cap"],
            "pci_bus_id": None if _na(row["pci.bus_id"]) else row["pci.bus_id"],
            "driver_version": row["driver_version"],
        })
    return gpus


def parse_cuda_version(xml_text: str) -> str | None:
    """The driver's CUDA version from `nvidia-smi -q -x`."""
    try:
        root = ElementTree.fromstring(xml_text)
    except ElementTree.ParseError:
        return None
    node = root.find("cuda_version")
    return node.text.strip() if node is not None and node.text else None


def meminfo_total_mib(text: str) -> int | None:
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.M)
    return int(match.group(1)) // 1024 if match else None


def parse_toolkit_version(text: str) -> str | None:
    match = re.search(r"version\s+v?(\d+\.\d+\.\d+\S*)", text)
    return match.group(1) if match else None


def parse_passthrough_csv(text: str) -> list[dict]:
    """`nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader` inside the passthrough container."""
    gpus = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[0].isdigit():
            gpus.append({"index": int(cells[0]), "name": cells[1], "uuid": cells[2]})
    return gpus


def device_requests(mode: str) -> list[dict]:
    """The engine's HostConfig.DeviceRequests for `docker run --gpus all` (gpus) or `--device nvidia.com/gpu=all` (cdi)."""
    if mode == "cdi":
        return [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}]
    return [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]


def describe_engine_error(err, socket_path: str) -> str:
    """The sentence for a Docker Engine that cannot be asked (a DockerError from docker_api)."""
    if getattr(err, "unreachable", False) and not os.path.exists(socket_path):
        return (f"Docker Engine is not installed or not running (no socket {socket_path}): "
                "apply the role vllmops.cluster.docker")
    return f"Docker Engine does not answer ({str(err)[-200:]}): apply the role vllmops.cluster.docker"


def summarize_docker_info(info: dict) -> dict:
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    return {
        "server_version": info.get("ServerVersion"),
        "runtimes": runtimes,
        "default_runtime": info.get("DefaultRuntime"),
        "cgroup_driver": info.get("CgroupDriver"),
        "cgroup_version": info.get("CgroupVersion"),
        "cdi_spec_dirs": info.get("CDISpecDirs") or [],
        "nvidia_runtime": "nvidia" in runtimes,
    }


def cdi_specs(directories=CDI_DIRS) -> list[dict]:
    """CDI spec files and the device kinds they declare."""
    specs = []
    for directory in directories:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".yaml", ".yml", ".json")):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError:
                continue
            kinds = sorted(set(re.findall(r"""["']?kind["']?\s*:\s*["']?([\w.\-/]+)""", text)))
            specs.append({"path": path, "kinds": kinds})
    return specs


# -- GPU compute processes ---------------------------------------------------------

# What nvidia-smi prints where it has no answer; GB10's driver reports the memory of each process, but
# another driver, vGPU or a non-root caller may not.
_NO_FIGURE = re.compile(r"^\[?(N/A|Not Supported|Insufficient Permissions|Unknown Error)\]?$", re.I)
# A Docker container's cgroup: /docker/<id> (cgroupfs driver) or .../docker-<id>.scope (systemd driver).
_DOCKER_CGROUP = re.compile(r"(?:^|/)docker(?:/|-)([0-9a-f]{64})(?:\.scope)?(?=/|$)")
_SERVICE_CGROUP = re.compile(r"(?:^|/)([^/]+)\.service(?=/|$)")


def parse_compute_apps_csv(text: str) -> list[dict]:
    """`nvidia-smi --query-compute-apps=<COMPUTE_APP_FIELDS> --format=csv,noheader,nounits`, one process a line
    (one line per GPU the process uses: their memory adds up).

    `used_memory` is MiB, or a bracketed word where the driver has no figure (None here)."""
    processes: dict[int, dict] = {}
    for cells in csv.reader(text.splitlines(), skipinitialspace=True):
        if not cells or not "".join(cells).strip() or cells[0].strip().lower().startswith("no running"):
            continue
        if len(cells) < len(COMPUTE_APP_FIELDS) or not cells[0].strip().isdigit():
            raise GpuProbeError(f"unexpected nvidia-smi compute-apps line (want {', '.join(COMPUTE_APP_FIELDS)}): "
                                f"{', '.join(cells)!r}")
        # A process name is not quoted by nvidia-smi and may hold commas: it is everything between pid and memory.
        pid, name, memory = int(cells[0]), ", ".join(c.strip() for c in cells[1:-1]), cells[-1].strip()
        if _NO_FIGURE.match(memory) or not memory:
            used = None
        else:
            try:
                used = int(float(memory.split()[0]))
            except ValueError as err:
                raise GpuProbeError(f"unexpected used_memory {memory!r} in nvidia-smi's line for PID {pid}") from err
        seen = processes.get(pid)
        if seen is None:
            processes[pid] = {"pid": pid, "name": name, "used_memory_mib": used}
        elif used is not None:
            seen["used_memory_mib"] = (seen["used_memory_mib"] or 0) + used
    return list(processes.values())


def cgroup_owner(text: str | None) -> dict:
    """The Docker container (its full ID) and the systemd unit a process runs in, from /proc/PID/cgroup.

    The unified hierarchy (cgroup v2, "0::") is read first, then systemd's v1 hierarchy, then the others; the
    innermost container wins where containers nest (Docker inside a container)."""
    owner = {"cgroup": None, "container_id": None, "unit": None}
    lines = [line.split(":", 2) for line in (text or "").splitlines()]
    paths = [(parts[1], parts[2].strip()) for parts in lines if len(parts) == 3]
    paths.sort(key=lambda entry: 0 if entry[0] == "" else 1 if entry[0] == "name=systemd" else 2)
    for _controllers, path in paths:
        containers = _DOCKER_CGROUP.findall(path)
        units = _SERVICE_CGROUP.findall(path)
        if containers or units:
            return {"cgroup": path, "container_id": containers[-1] if containers else None,
                    "unit": units[-1] if units else None}
        owner["cgroup"] = owner["cgroup"] or path
    return owner


def _unit_is_ours(unit: str | None, own_units) -> bool:
    # Our units' own names, and instances of them (NAME@INSTANCE).
    return bool(unit) and any(unit == name or unit.startswith(name + "@") for name in own_units)


def classify_processes(processes: list[dict], cgroups: dict, containers: list[dict] | None,
                       own_label: str | None, own_units=()) -> list[dict]:
    """Each GPU process with where it runs and whether it is ours.

    cgroups: PID to the text of /proc/PID/cgroup (None: not readable, the process is gone or hidden).
    containers: the Docker Engine's container summaries (GET /containers/json?all=1), None when it could not be
    asked. Ours: in a container labelled own_label, or in one of own_units (a unit that runs the process itself)."""
    by_id = {c.get("Id", ""): c for c in containers or []}
    result = []
    for process in processes:
        text = cgroups.get(process["pid"])
        owner = cgroup_owner(text)
        container = by_id.get(owner["container_id"] or "")
        labels = (container or {}).get("Labels") or {}
        names = (container or {}).get("Names") or []
        entry = dict(process, visible=text is not None, cgroup=owner["cgroup"], container_id=owner["container_id"],
                     container_name=names[0].lstrip("/") if names else None, unit=owner["unit"])
        entry["ours"] = bool(own_label and own_label in labels) or _unit_is_ours(owner["unit"], own_units)
        entry["description"] = describe_process(entry, engine_known=containers is not None)
        result.append(entry)
    return result


def describe_process(process: dict, engine_known: bool = True) -> str:
    """One phrase an operator can act on: PID, name, where it runs, how much GPU memory it holds."""
    where = ""
    if process.get("container_id"):
        short = process["container_id"][:12]
        if process.get("container_name"):
            where = f" in container {process['container_name']} ({short})"
        elif engine_known:
            where = f" in container {short} (unknown to this host's Docker Engine)"
        else:
            where = f" in container {short} (the Docker Engine did not answer)"
    elif process.get("unit"):
        where = f" in {process['unit']}.service"
    elif process.get("visible") is False:
        where = " (not in /proc: it ended, or runs in another PID namespace)"
    memory = process.get("used_memory_mib")
    held = f"{memory} MiB of GPU memory" if memory is not None else "GPU memory (nvidia-smi gives no figure)"
    return f"PID {process['pid']} ({process['name'] or '?'}){where} holds {held}"


# -- diagnosis ---------------------------------------------------------------------

# (pattern in command output, sentence); first match wins.
HOST_FAILURES = [
    (re.compile(r"Driver/library version mismatch", re.I),
     "the NVIDIA kernel driver and its user-space libraries have different versions (a driver upgrade without "
     "a reboot): reboot the host, or unload and reload the nvidia kernel modules"),
    (re.compile(r"couldn't communicate with the NVIDIA driver|No devices were found|NVML: Driver Not Loaded", re.I),
     "nvidia-smi is installed but the NVIDIA driver is not loaded: load it (modprobe nvidia) or reboot; "
     "check `dmesg | grep -i nvrm` for why it did not load"),
    (re.compile(r"Failed to initialize NVML", re.I),
     "nvidia-smi cannot initialise NVML on the host: check the driver installation (dmesg, nvidia-bug-report)"),
]

CONTAINER_FAILURES = [
    (re.compile(r'could not select device driver "" with capabilities: \[\[gpu\]\]'),
     f"Docker cannot pass GPUs to containers (no NVIDIA runtime hook registered): apply the role {ROLE} "
     "(it installs the toolkit and restarts Docker)"),
    (re.compile(r"unknown or invalid runtime name: nvidia|Unknown runtime specified nvidia"),
     f"Docker has no 'nvidia' runtime: apply the role {ROLE} (nvidia_container_toolkit_docker_runtime)"),
    (re.compile(r"Failed to initialize NVML: Unknown Error"),
     "the container lost its GPUs (Failed to initialize NVML: Unknown Error), typically after "
     f"`systemctl daemon-reload` with the systemd cgroup driver: apply the role {ROLE} with "
     "nvidia_container_toolkit_daemon_reload_fix (the default), then restart the affected containers"),
    (re.compile(r"exec format error"),
     "the image is built for another CPU architecture than this host (exec format error): use the image for "
     "this host's architecture"),
    (re.compile(r"Driver/library version mismatch"),
     "the NVIDIA driver and libraries differ (a driver upgrade without a reboot): reboot the host"),
    (re.compile(r"nvidia-container-cli: initialization error|nvidia-container-cli: .*error", re.I),
     "the NVIDIA container runtime could not set up the GPUs (nvidia-container-cli failed): check the driver "
     f"on the host, then the toolkit (role {ROLE})"),
    (re.compile(r'executable file not found in \$PATH|"nvidia-smi": executable file not found|nvidia-smi: not found'),
     "the passthrough container has no nvidia-smi, so the toolkit did not inject the driver utilities: check "
     f"NVIDIA_DRIVER_CAPABILITIES includes utility, and the toolkit (role {ROLE})"),
    (re.compile(r'nvidia\.com/gpu=\S+ is not an absolute path|could not select device driver "cdi"'),
     "this Docker Engine does not understand CDI devices (Docker 25 and newer with CDI enabled do): use "
     "passthrough=gpus, or upgrade Docker"),
    (re.compile(r"unresolvable CDI devices|CDI device injection failed", re.I),
     f"the CDI device is not defined: generate the CDI spec (role {ROLE}, nvidia_container_toolkit_cdi)"),
    (re.compile(r"No such image|pull access denied|manifest unknown", re.I),
     "the passthrough check image is not on this host: set image to one that is (the serving image works)"),
]


def classify(text: str, table) -> str | None:
    for pattern, sentence in table:
        if pattern.search(text or ""):
            return sentence
    return None


def diagnose(facts: dict, require_gpus: int | None) -> list[str]:
    """One sentence per problem found in the gathered facts."""
    problems: list[str] = []
    host = facts["host"]
    if host["error"]:
        problems.append(host["error"])
    toolkit = facts["toolkit"]
    docker = facts["docker"]
    if not toolkit["installed"]:
        problems.append(f"the NVIDIA container toolkit is not installed (no nvidia-ctk, no "
                        f"nvidia-container-runtime-hook): apply the role {ROLE}")
    elif not toolkit["hook"]:
        problems.append("nvidia-container-runtime-hook is not on Docker's PATH, so `docker run --gpus` cannot work: "
                        f"reinstall the toolkit (role {ROLE})")
    if docker.get("error"):
        problems.append(docker["error"])
    elif toolkit["installed"] and not docker["nvidia_runtime"] and not facts["cdi"]:
        problems.append(f"Docker has neither an 'nvidia' runtime nor NVIDIA CDI specs: apply the role {ROLE}")
    passthrough = facts.get("passthrough")
    if passthrough is not None and passthrough["error"]:
        problems.append(passthrough["error"])
    elif passthrough is not None and host["gpus"] and len(passthrough["gpus"]) < len(host["gpus"]):
        problems.append(f"the passthrough container sees {len(passthrough['gpus'])} of the host's "
                        f"{len(host['gpus'])} GPUs: check NVIDIA_VISIBLE_DEVICES in the image and the --gpus value")
    if require_gpus:
        usable = len(passthrough["gpus"]) if passthrough is not None else len(host["gpus"])
        if usable < require_gpus:
            problems.append(f"{usable} usable GPU(s) where {require_gpus} are required"
                            + (" (seen inside a container)" if passthrough is not None else " (seen on the host)"))
    return list(dict.fromkeys(problems))
