#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: port_listener
short_description: Listen on a node's cluster ports for a moment, so that the other nodes can prove they reach them
version_added: 0.1.0
description:
  - Binds each port in O(ports) on O(address) and accepts (and closes at once) test connections until every port has
    been reached O(connections) times, or O(timeout) seconds passed; then releases the ports.
  - A port that is already in use answers for itself (for example the running Ray on a re-run) and is not waited for;
    binding it is retried for two seconds only (a listener of a moment ago letting go), never later, so that a service
    restarting meanwhile (Ray) finds its port free.
  - Meant to run with C(async) and C(poll=0) on the head while the workers run M(ansible.builtin.wait_for) against
    it; the nccl role does exactly that before Ray or vLLM listen.
options:
  address:
    description: The address to listen on (the node's cluster address).
    type: str
    required: true
  ports:
    description: The TCP ports.
    type: list
    elements: int
    required: true
  connections:
    description: How many connections each port must accept before the listener is done (the number of workers).
    type: int
    required: true
  timeout:
    description: Seconds to listen at the most.
    type: int
    default: 60
extends_documentation_fragment:
  - vllmops.cluster.info_module
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Listen on the head's cluster ports while the workers check them
  vllmops.cluster.port_listener:
    address: 10.0.0.1
    ports: [6379, 29501]
    connections: "{{ ansible_play_hosts | length - 1 }}"
    timeout: 90
  async: 100
  poll: 0
  when: inventory_hostname == vllmops_head_host
"""

RETURN = r"""
accepted:
  description: Connections accepted per port.
  returned: always
  type: dict
never_bound:
  description: Ports that were in use when it started (something else answers on them).
  returned: always
  type: list
  elements: int
complete:
  description: Whether every port it listened on was reached O(connections) times.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.reachability import listen_until_reached


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type="str", required=True),
            ports=dict(type="list", elements="int", required=True),
            connections=dict(type="int", required=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, accepted={}, never_bound=[], complete=False)
    try:
        result = listen_until_reached(params["address"], params["ports"], params["connections"], params["timeout"])
    except OSError as err:
        module.fail_json(msg=f"listening on {params['address']}: {err}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
