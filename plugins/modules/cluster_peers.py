#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_peers
short_description: Find machines connected to this node's cluster ports that are not members of the cluster
version_added: 0.1.0
description:
  - Reads the node's TCP sockets from C(/proc/net/tcp) and C(/proc/net/tcp6) (the host's network namespace, which
    our containers share) and lists the peers of the established connections to the local O(ports).
  - Leaves out loopback peers, the node's own addresses (any local address of its sockets) and the addresses in
    O(known); what remains is a machine the cluster does not count, typically a node taken out of the inventory
    whose Ray worker or vLLM rank still runs and reconnects to the head.
  - An IPv4-mapped IPv6 peer (C(::ffff:a.b.c.d)) is reported as its IPv4 address. A missing C(/proc/net/tcp6) (IPv6
    disabled) is no error.
options:
  ports:
    description:
      - The local TCP ports to look at, for example Ray's GCS port (V(6379)) and vLLM's master port (V(29501)).
      - Only connections to these ports count (on the head, the members connect to them).
    type: list
    elements: int
    required: true
  known:
    description: The members' addresses; peers with one of these addresses are members.
    type: list
    elements: str
    default: []
  proc_root:
    description: Where to read C(net/tcp) and C(net/tcp6) from.
    type: str
    default: /proc
extends_documentation_fragment:
  - vllmops.cluster.info_module
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Look for machines connected to the cluster ports that are not members
  vllmops.cluster.cluster_peers:
    ports: [6379, 29501]
    known: [10.0.0.1, 10.0.0.2]
  register: peers

- name: Name them
  ansible.builtin.debug:
    msg: "Not members, connected to {{ inventory_hostname }}: {{ peers.unknown | join(', ') }}"
  when: peers.unknown | length > 0
"""

RETURN = r"""
peers:
  description: One entry per peer address and local port it is connected to (C(address), C(local_port)), sorted.
  returned: success
  type: list
  elements: dict
  sample: [{address: 10.0.0.3, local_port: 6379}, {address: 10.0.0.3, local_port: 29501}]
unknown:
  description: The addresses of those peers, sorted, each once.
  returned: success
  type: list
  elements: str
  sample: [10.0.0.3]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.peers import PeersError, cluster_peers


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="int", required=True),
            known=dict(type="list", elements="str", default=[]),
            proc_root=dict(type="str", default="/proc"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = cluster_peers(params["ports"], params["known"], params["proc_root"])
    except PeersError as err:
        module.fail_json(msg=f"reading the connections to ports {', '.join(map(str, params['ports']))}: {err}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
