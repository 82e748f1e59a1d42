# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: rdma_container_devices
short_description: The RDMA device nodes a serving container needs for the NCCL_IB_HCA it runs with
version_added: 0.1.0
description:
  - From M(vllmops.cluster.nccl_facts)' result, the verbs devices (C(/dev/infiniband/uverbsN)) of the RDMA devices an
    C(NCCL_IB_HCA) value selects, as NCCL reads it (C(=a:1,b:1) exactly those, C(a,b) by name prefix, C(^a) all but
    those), and C(/dev/infiniband/rdma_cm) where the host has it.
  - The value is the cluster environment's, so an C(NCCL_IB_HCA) set by hand (C(nccl_env)) gives the containers its
    devices, not the detected ones. Empty or unset gives none.
options:
  _input:
    description: M(vllmops.cluster.nccl_facts)' result (C(verbs_devices), C(rdma_cm)).
    type: dict
    required: true
  nccl_ib_hca:
    description: The C(NCCL_IB_HCA) value.
    type: str
"""

EXAMPLES = r"""
- name: The devices of the HCAs NCCL uses
  ansible.builtin.debug:
    msg: "{{ nccl_facts_result | vllmops.cluster.rdma_container_devices(cluster_env.NCCL_IB_HCA) }}"
"""

RETURN = r"""
_value:
  description: Device paths.
  type: list
  elements: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import rdma_container_devices


class FilterModule:
    def filters(self):
        return {"rdma_container_devices": rdma_container_devices}
