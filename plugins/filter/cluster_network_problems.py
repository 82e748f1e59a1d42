# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: cluster_network_problems
short_description: What keeps the cluster link's settings from being applied, on every node at once
version_added: 0.1.0
description:
  - Checks each node's C(cluster_network_interfaces) before the node's network manager gets them (role
    vllmops.cluster.cluster_network) and returns one sentence per problem, naming the host and the fix.
  - An interface the host lacks, or the one its SSH session arrives on, or the one holding its default route, is
    refused (the role never touches the way Ansible reaches the node).
  - An address that is not a host address with its prefix length, is given twice, is another interface's already,
    or has no other node's address in its subnet is refused; so is an MTU outside 1280-9216, and a cluster address
    (C(nccl_cluster_address)) or network (C(nccl_cluster_cidr)) the link's addresses would not hold.
positional: _input
options:
  _input:
    description:
      - Host name to a mapping - C(interfaces) (the host's C(cluster_network_interfaces)), C(facts) (Ansible's
        C(network) and C(env) facts of the host, read without become) and C(cluster_address) (its
        C(nccl_cluster_address), may be empty).
    type: dict
    required: true
  mtu:
    description: The MTU of an interface that gives none.
    type: int
    default: 9000
  cidr:
    description: The cluster network (C(nccl_cluster_cidr)); empty to skip that check.
    type: str
"""

EXAMPLES = r"""
- name: Check every node's cluster link
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' ') }}"
  vars:
    problems: "{{ reports | vllmops.cluster.cluster_network_problems(mtu=9000) }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem; empty when the link may be set up.
  type: list
  elements: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.cluster_network import problems


def cluster_network_problems(nodes, mtu=9000, cidr=None):
    return problems(nodes, mtu=int(mtu), cidr=cidr or None)


class FilterModule:
    def filters(self):
        return {"cluster_network_problems": cluster_network_problems}
