#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_facts
short_description: Find the network a node's cluster traffic takes, and the NCCL/Gloo/UCX/Ray settings that pin it
version_added: 0.1.0
description:
  - Finds the interface that carries the node's cluster address (or its address in the cluster CIDR) from
    C(ip -j addr show), and reads C(/sys/class/net) and C(/sys/class/infiniband) for its MTU, speed, RDMA devices,
    port states, link layers and GID tables.
  - Finds every RDMA device of the cluster link - the cluster interface's own (on its PCI function, or whose GIDs
    name it) and, on RoCE, the others of the same adapter (the same system image GUID) - the twin functions of
    the cluster port (the same PCI slot in another PCI domain, as a DGX Spark's two PCIe x4 links to one QSFP
    port), and the adapter's other port with its twins (a second cable, in a ring of three or four Sparks).
  - Uses the ACTIVE ports among them - the cluster interface's own when its RoCE v2 GID holds the IPv4-mapped
    cluster address, the others when they have a RoCE v2 GID at all (the link-local one of their own netdev - an
    IPv4 address on them is not needed). InfiniBand ports of the cluster interface count as they are.
  - Reports a twin that is not ACTIVE - NCCL then gets half of the port's bandwidth - and how to bring it up.
  - Returns the recommended environment; C(NCCL_IB_GID_INDEX) only when the image's NCCL is older than 2.21
    (newer NCCL chooses the GID itself) or O(force_gid_index) is set.
  - Lists the device nodes (C(/dev/infiniband/uverbsN), C(rdma_cm)) a container needs to use those ports.
  - Warns about an MTU below 9000 on RoCE, about RDMA ports left out or down, and about chosen devices without a
    verbs device node. With one C(NCCL_IB_GID_INDEX) (older NCCL), a half whose GID at that index is not RoCE v2
    is left out, and said so.
options:
  cluster_address:
    description: The node's address on the cluster network. One of O(cluster_address) and O(cluster_cidr) is required.
    type: str
  cluster_cidr:
    description: The cluster network; the node's address in it is used.
    type: str
  nccl_version:
    description: NCCL version in the serving image (image_probe's C(packages.nvidia-nccl)), to decide on NCCL_IB_GID_INDEX.
    type: str
  force_gid_index:
    description: Recommend NCCL_IB_GID_INDEX whatever the NCCL version.
    type: bool
    default: false
  sysfs_root:
    description: Where sysfs is mounted; tests point it at fixture trees.
    type: path
    default: /sys
extends_documentation_fragment:
  - vllmops.cluster.info_module
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Find the cluster network of this node
  vllmops.cluster.nccl_facts:
    cluster_address: "{{ vllm_cluster_address }}"
  register: nccl
"""

RETURN = r"""
interface:
  description: The interface carrying the cluster address.
  returned: success
  type: dict
  contains:
    name:
      description: Interface name.
      type: str
    address:
      description: The cluster address.
      type: str
    prefixlen:
      description: Prefix length.
      type: int
    network:
      description: The network in CIDR notation.
      type: str
    mtu:
      description: MTU.
      type: int
    speed_mbps:
      description: Link speed in Mb/s; null when unknown.
      type: int
    operstate:
      description: Operational state.
      type: str
rdma_devices:
  description:
    - The RDMA devices of the cluster link, each with C(name), C(role) (C(cluster port), C(twin), C(second cable),
      C(second cable twin)), C(pci) (its PCI function), C(sys_image_guid), C(netdevs) and C(ports).
    - Each port has C(port), C(state), C(active), C(link_layer), C(gids), C(roce_v2_ipv4_gid_index),
      C(carries_cluster_address), C(usable) (a GID NCCL can use) and C(used) (in RV(nccl_ib_hca)).
  returned: success
  type: list
  elements: dict
nccl_ib_hca:
  description: The device:port list NCCL should use, empty for sockets.
  returned: success
  type: list
  elements: str
container_devices:
  description: The device nodes a container needs to use the ports of RV(nccl_ib_hca) - each RDMA device's verbs
    device (C(/dev/infiniband/uverbsN)), and C(/dev/infiniband/rdma_cm) - those present on the host; empty for
    sockets.
  returned: success
  type: list
  elements: str
verbs_devices:
  description: Every RDMA device of the host, to its verbs device nodes that exist - what an C(NCCL_IB_HCA) set by
    hand may select (filter C(vllmops.cluster.rdma_container_devices)).
  returned: success
  type: dict
rdma_cm:
  description: C(/dev/infiniband/rdma_cm) where the host has it, else null.
  returned: success
  type: str
roce_v2_ipv4_gid_index:
  description: The RoCE v2 GID index of the cluster address on the first chosen port, null when none.
  returned: success
  type: int
transport:
  description: C(roce), C(ib) or C(socket).
  returned: success
  type: str
ray_node_ip_address:
  description: The address Ray must use for this node (C(ray start --node-ip-address)).
  returned: success
  type: str
recommended_env:
  description: VLLM_HOST_IP, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME, UCX_NET_DEVICES,
    NCCL_IB_DISABLE, and where they apply NCCL_IB_HCA and NCCL_IB_GID_INDEX.
  returned: success
  type: dict
network_warnings:
  description: Problems that do not stop the cluster but slow it (also shown as Ansible warnings).
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import NcclFactsError, nccl_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_address=dict(type="str"),
            cluster_cidr=dict(type="str"),
            nccl_version=dict(type="str"),
            force_gid_index=dict(type="bool", default=False),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        required_one_of=[("cluster_address", "cluster_cidr")],
        supports_check_mode=True,
    )
    params = module.params
    ip = module.get_bin_path("ip", required=True)
    rc, out, err = module.run_command([ip, "-j", "addr", "show"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"reading the host's addresses: `ip -j addr show` failed (rc={rc}): {err.strip()}")
    try:
        facts = nccl_facts(module.from_json(out), params["sysfs_root"], params["cluster_address"],
                           params["cluster_cidr"], params["nccl_version"], params["force_gid_index"])
    except (NcclFactsError, ValueError) as err:
        module.fail_json(msg=f"finding the cluster network: {err}")
    facts["network_warnings"] = facts.pop("warnings")
    for warning in facts["network_warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
