# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: container_memory
short_description: The memory limit of the serving containers, from the host's /proc/meminfo
version_added: 0.1.0
description:
  - Returns the limit in MiB (C(docker run --memory)) for the host whose C(/proc/meminfo) is given; 0 means no limit.
  - C(auto) is the host's C(MemTotal) less a reserve for the operating system, sshd and the host's own services, the
    larger of O(reserve_percent) percent of C(MemTotal) and O(reserve_min).
  - C(none) (or an empty value) sets no limit. Any other value is a size as Docker writes it (C(96g), C(98304m)),
    which must be below C(MemTotal).
  - "On GPUs with unified memory (GB10) CUDA's allocations are made by the NVIDIA driver and are not charged to the
    container's memory cgroup: the limit bounds what the container's processes take as host memory (their own
    memory, C(/dev/shm), the page cache of the files they read), not the GPU's share."
positional: _input
options:
  _input:
    description: The text of the host's C(/proc/meminfo).
    type: str
    required: true
  limit:
    description: C(auto), C(none), or a size (C(96g)).
    type: str
    default: auto
  reserve_percent:
    description: With C(auto), the share of C(MemTotal) left to the host, in percent.
    type: int
    default: 10
  reserve_min:
    description: With C(auto), the least left to the host, a size (C(4g)).
    type: str
    default: 4g
"""

EXAMPLES = r"""
- name: Derive the serving containers' memory limit
  ansible.builtin.set_fact:
    _limit_mib: "{{ __meminfo.content | b64decode | vllmops.cluster.container_memory('auto', 10, '4g') }}"
"""

RETURN = r"""
_value:
  description: The limit in MiB; 0 for none.
  type: int
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.formatters import human_to_bytes
from ansible_collections.vllmops.cluster.plugins.module_utils.gpu import meminfo_total_mib

_MIB = 1024 * 1024


def _size_mib(size, what: str) -> int:
    try:
        return human_to_bytes(str(size).strip()) // _MIB
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"{what}: {size!r} is no size (write it as Docker does: 96g, 98304m): {err}") from err


def container_memory(meminfo, limit="auto", reserve_percent=10, reserve_min="4g") -> int:
    total = meminfo_total_mib(str(meminfo))
    if total is None:
        raise AnsibleFilterError("the serving containers' memory limit: no MemTotal line in the /proc/meminfo given")
    choice = str(limit if limit is not None else "").strip()
    if choice.lower() in ("none", "", "0"):
        return 0
    if choice.lower() != "auto":
        mib = _size_mib(choice, "host_memory_container_limit")
        if not 0 < mib < total:
            raise AnsibleFilterError(
                f"host_memory_container_limit {limit} is {mib} MiB, not between 1 MiB and the host's memory "
                f"({total} MiB): give a size in that range, auto, or none")
        return mib
    if not 0 <= int(reserve_percent) < 100:
        raise AnsibleFilterError(f"host_memory_container_reserve_percent {reserve_percent} is not a percentage below 100")
    reserve = max(total * int(reserve_percent) // 100, _size_mib(reserve_min, "host_memory_container_reserve_min"))
    if reserve >= total:
        raise AnsibleFilterError(
            f"the reserve for the host ({reserve} MiB) leaves nothing of its {total} MiB to the serving containers: "
            "lower host_memory_container_reserve_min / _percent, or set host_memory_container_limit")
    return total - reserve


class FilterModule:
    def filters(self):
        return {"container_memory": container_memory}
