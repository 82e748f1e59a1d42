#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_plan
short_description: Plan several services and their replicas on the cluster's nodes - GPUs, ports, units and flags
version_added: 0.5.0
description:
  - Assigns every service of O(services) (the inventory's C(vllmops_services)) and every replica of it its nodes, its
    GPUs on each node, its API port and units, and the C(vllm serve) flags of each unit - tensor, pipeline and data
    parallel (C(--data-parallel-size), C(--data-parallel-size-local), C(--data-parallel-address),
    C(--data-parallel-rpc-port), C(--data-parallel-start-rank), C(--headless), C(--enable-expert-parallel)), and
    vLLM's Ray-free multi-node flags for a replica spanning nodes.
  - Replicas of one service are spread over the nodes that hold none of it yet; a replica needing more GPUs than one
    node has spans whole nodes with the same GPUs each.
  - Refuses, with one sentence naming the service, the hosts and the fix, before anything changes - a GPU given to two
    services, a GPU index a host does not have, more GPUs asked than the service's nodes have free (naming what the
    others took), two units of one host on one port, a port the cluster already uses (O(reserved_ports)), a flag in a
    service's C(args) that the plan sets, a local model outside O(model_dir), an unknown key, host or group, and a
    model whose rank does not fit its GPU's memory (O(memory)).
  - Changes nothing and reads nothing from the host; run it once per play with C(run_once).
options:
  services:
    description:
      - The services, as the inventory's C(vllmops_services) lists them with their recipes written in
        (P(vllmops.cluster.fleet_recipes#filter)) - C(name) (the served model name), C(model), and optionally C(image),
        C(recipe) (its name), C(min_vllm_version), C(args), C(nodes) or C(group), C(gpus) (host to GPU indices),
        C(tensor_parallel_size), C(pipeline_parallel_size), C(data_parallel_size), C(data_parallel_size_local),
        C(enable_expert_parallel), C(replicas) and C(port). docs/operations.md ("Several services and replicas")
        describes each.
    type: list
    elements: dict
    required: true
  nodes:
    description: The serving nodes, in inventory order.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Inventory hostname.
        type: str
        required: true
      gpus:
        description: The node's GPU count (its GPUs are the indices 0 to count - 1).
        type: int
        required: true
      address:
        description: The node's cluster address; empty before the nccl role wrote it (the flags then name none).
        type: str
        default: ""
      gpu_memory_bytes:
        description: One GPU's memory in bytes, for the memory check (O(memory)); 0 when not known.
        type: int
        default: 0
  groups:
    description: The inventory's groups (group name to host names), for a service's C(group).
    type: dict
    default: {}
  model_dir:
    description: The directory holding the models, the only one the containers mount.
    type: str
    default: /srv/models
  base_port:
    description: The first API port given to a replica whose service names none.
    type: int
    default: 8100
  reserved_ports:
    description: Ports the cluster already uses (port to what uses it); no replica is given one.
    type: dict
    default: {}
  memory:
    description:
      - Per service name, what the memory check needs - C(shape) (the model's shape, as the model role reads it),
        C(weight_bytes) and C(settings) (C(max_model_len), C(gpu_memory_utilization), C(kv_cache_memory_bytes)).
        A service left out is not checked.
    type: dict
    default: {}
extends_documentation_fragment:
  - vllmops.cluster.info_module
seealso:
  - module: vllmops.cluster.cluster_plan
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Plan the services, before anything changes
  vllmops.cluster.fleet_plan:
    services: "{{ vllmops_services }}"
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, '_node') | list }}"
    groups: "{{ groups }}"
    reserved_ports:
      "8000": the API proxy
  run_once: true
  register: __fleet
"""

RETURN = r"""
fleet:
  description: Where every service and replica runs.
  returned: success
  type: dict
  contains:
    services:
      description:
        - Per service - C(name), C(unit_suffix), C(model), C(image), C(recipe), C(min_vllm_version), C(args), C(layout) (the parallel
          sizes), C(gpus_per_replica) and C(replicas), each with C(index), C(id), C(port), C(head), C(head_address),
          C(nodes) and C(units) (C(host), C(unit), C(node_rank), C(gpus), C(port), C(serves_http), C(flags)).
      type: list
      elements: dict
    hosts:
      description: Per host, the units it runs, in order.
      type: dict
    upstreams:
      description: Per served model name, the C(address:port) of each replica's API server.
      type: dict
    summary:
      description: One line per service.
      type: str
msg:
  description: The summary.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.fleet import FleetError, make_fleet

NODE_SPEC = dict(
    name=dict(type="str", required=True),
    gpus=dict(type="int", required=True),
    address=dict(type="str", default=""),
    gpu_memory_bytes=dict(type="int", default=0),
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            services=dict(type="list", elements="dict", required=True),
            nodes=dict(type="list", elements="dict", required=True, options=NODE_SPEC),
            groups=dict(type="dict", default={}),
            model_dir=dict(type="str", default="/srv/models"),
            base_port=dict(type="int", default=8100),
            reserved_ports=dict(type="dict", default={}),
            memory=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        reserved = {int(port): str(owner) for port, owner in params["reserved_ports"].items()}
        fleet = make_fleet(params["services"], params["nodes"], groups=params["groups"], model_dir=params["model_dir"],
                           base_port=params["base_port"], reserved_ports=reserved, memory=params["memory"] or None)
    except (FleetError, ValueError) as err:
        module.fail_json(msg=f"Nothing was changed. {err}")
    module.exit_json(changed=False, fleet=fleet, msg=fleet["summary"])


if __name__ == "__main__":
    main()
