# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: preflight_problems
short_description: The problems that must be fixed before the cluster is deployed
version_added: 0.1.0
description:
  - Checks what every node reported (the preflight role gathers it) against the cluster's settings and returns one
    sentence per problem, naming the host, the value found and the fix. An empty list means the cluster may be
    deployed.
  - Checks that the nodes share one CPU architecture, that every node shows a GPU, that the parallel sizes use the
    cluster's GPUs (0 means derived, as the plan derives it), that no other process listens on a port the cluster
    needs (a port held while our own containers run is a re-run, not a problem) and that there is room for the image.
positional: _input
options:
  _input:
    description:
      - Host name to what the host reported, a mapping with the keys below. A missing key means "not measured".
      - C(architecture) (str), the CPU architecture (C(ansible_facts.architecture)).
      - C(gpus) (int), the GPUs M(vllmops.cluster.gpu_probe) saw; C(gpu_diagnosis) (list of str), its diagnosis.
      - C(listeners) (list of dict), the TCP listeners as M(community.general.listen_ports_facts) lists them
        (C(port), C(name), C(pid)), or null when they could not be listed.
      - C(own_containers) (bool), true when containers of this collection run on the host.
      - C(own_processes) (list of str), names of processes of units of ours running on the host (C(nginx) of the
        API proxy); ports they hold are a re-run, not a problem.
      - C(docker_root) (str), the directory measured for free space; C(df) (str), the output of C(df -Pk) for it.
    type: dict
    required: true
  tensor_parallel_size:
    description: The tensor parallel size the vLLM role will use; 0 derives it from the GPUs.
    type: int
    default: 0
  pipeline_parallel_size:
    description: The pipeline parallel size the vLLM role will use; 0 means 1.
    type: int
    default: 0
  ports:
    description: TCP ports the cluster's services listen on, on every node.
    type: list
    elements: int
    default: []
  head:
    description: The head's inventory name, where O(head_ports) are checked too.
    type: str
  head_ports:
    description: TCP ports the cluster's services listen on, on the head only.
    type: list
    elements: int
    default: []
  min_free_gb:
    description: GB that must be free under C(docker_root) for the serving image.
    type: float
    default: 40
"""

EXAMPLES = r"""
- name: Check the nodes, all at once
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems }}"
  vars:
    problems: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'node_report')))
         | vllmops.cluster.preflight_problems(tensor_parallel_size=2, ports=[6800, 6801], head='gpu1',
                                              head_ports=[8000, 6379, 29501], min_free_gb=40) }}
    # ["spark-2 shows no GPU (gpu_probe: nvidia-smi was not found ...): ...", ...]
"""

RETURN = r"""
_value:
  description: One sentence per problem, naming the host, the value found and what to change; empty when none.
  type: list
  elements: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PlanError, parallel_sizes

KIB_PER_GB = 1024 * 1024


def _architectures(nodes: dict) -> list[str]:
    arches = {host: node.get("architecture") or "unknown" for host, node in nodes.items()}
    if len(set(arches.values())) <= 1:
        return []
    found = ", ".join(f"{host}={arch}" for host, arch in arches.items())
    return [f"The nodes differ in CPU architecture ({found}): one serving image cannot run on all of them; "
            "keep the nodes of one architecture in the inventory group."]


def _gpus(nodes: dict) -> list[str]:
    problems = []
    for host, node in nodes.items():
        if not node.get("gpus"):
            diagnosis = "; ".join(node.get("gpu_diagnosis") or []) or "no diagnosis"
            problems.append(f"{host} shows no GPU (gpu_probe: {diagnosis}): fix its NVIDIA driver, "
                            f"or take {host} out of the inventory.")
    return problems


def _parallel_sizes(nodes: dict, tensor_parallel_size: int, pipeline_parallel_size: int) -> list[str]:
    """The plan's own rule (TP x PP is every GPU of the cluster; 0 derives TP), checked before anything changes."""
    if not tensor_parallel_size and not pipeline_parallel_size:
        return []
    if any(not node.get("gpus") for node in nodes.values()):
        return []  # the GPU problem is reported; a sum without that node's GPUs would mislead
    try:
        parallel_sizes([{"name": host, "gpus": int(node["gpus"])} for host, node in nodes.items()],
                       tensor_parallel_size, pipeline_parallel_size)
    except PlanError as err:
        return [f"{err}."]
    return []


def _listener_label(listener: dict) -> str:
    name, pid = listener.get("name"), listener.get("pid")
    who = f"{name} (pid {pid})" if name and pid else name or (f"pid {pid}" if pid else "a process")
    return f"{listener.get('port')} by {who}"


def _ports(nodes: dict, ports: list[int], head: str | None, head_ports: list[int]) -> list[str]:
    problems = []
    for host, node in nodes.items():
        wanted = {int(port) for port in ports} | ({int(port) for port in head_ports} if host == head else set())
        listeners = node.get("listeners")
        if listeners is None:
            problems.append(f"The listening ports of {host} could not be read (community.general.listen_ports_facts "
                            "needs ss or netstat): install iproute2 on it.")
            continue
        if node.get("own_containers"):
            continue  # our services from an earlier run hold them; the roles replace them
        ours = set(node.get("own_processes") or [])
        held = sorted({_listener_label(item) for item in listeners
                       if int(item.get("port", -1)) in wanted and item.get("name") not in ours})
        if held:
            problems.append(f"Something else listens on {host} on a port the cluster needs (held: {', '.join(held)}): "
                            "stop it, or move the port (vllmops_api_port, vllm_serve_port, vllmops_ray_*, "
                            "vllmops_master_port).")
    return problems


def _free_kib(df_output: str) -> int | None:
    """Available KiB from `df -Pk DIR` (POSIX format: a header, then one line whose 4th field is Available)."""
    lines = [line for line in (df_output or "").splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    fields = lines[-1].split()
    if len(fields) < 6 or not fields[3].isdigit():
        return None
    return int(fields[3])


def _disk(nodes: dict, min_free_gb: float) -> list[str]:
    problems = []
    for host, node in nodes.items():
        where = node.get("docker_root") or "Docker's data directory"
        free = _free_kib(node.get("df", ""))
        if free is None:
            problems.append(f"The free space under {where} on {host} could not be measured (df -Pk gave no usable "
                            f"line): check that {where} exists and df works there.")
        elif free < min_free_gb * KIB_PER_GB:
            problems.append(f"{host} has {free / KIB_PER_GB:.1f} GB free under {where}, less than the {min_free_gb:g} GB "
                            "the image needs (preflight_min_free_gb): free space or move Docker's data-root.")
    return problems


def preflight_problems(nodes, tensor_parallel_size=0, pipeline_parallel_size=0, ports=(), min_free_gb=40,
                       head=None, head_ports=()):
    nodes = {host: node or {} for host, node in (nodes or {}).items()}
    return (_architectures(nodes)
            + _gpus(nodes)
            + _parallel_sizes(nodes, int(tensor_parallel_size or 0), int(pipeline_parallel_size or 0))
            + _ports(nodes, list(ports or []), head, list(head_ports or []))
            + _disk(nodes, float(min_free_gb)))


class FilterModule:
    def filters(self):
        return {"preflight_problems": preflight_problems}
