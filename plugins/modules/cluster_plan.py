#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_plan
short_description: Decide once how the cluster runs - head, backend, parallel sizes, each node's rank and flags
version_added: 0.1.0
description:
  - Computes the plan every role reads, from the inventory's nodes and the serving image's probe, so that the head,
    the backend, the parallel sizes, the ports and each node's part are decided in one place.
  - Chooses the backend for O(backend=auto) - one node runs vLLM's own multiprocessing executor (C(mp-single));
    several nodes run vLLM's Ray-free multi-node mode (C(mp-multinode), C(--nnodes)/C(--node-rank)/C(--headless))
    when the image's vLLM has it, else Ray (C(ray)) when the image has Ray.
  - Refuses, with one message naming the hosts and the fix, a cluster that cannot work - hosts naming different
    heads, a head outside the play, a node without a GPU or a cluster address, two nodes with one address, an image
    without vLLM or without the backend asked for, parallel sizes that do not multiply to the cluster's GPUs,
    unequal GPUs per node in C(mp-multinode), a local model outside O(model_dir), a node holding another image
    than O(image) (by content ID).
  - With backend C(ray), decides whether Ray runs with token authentication (the image's Ray is 2.52 or later) and
    warns, naming the image's Ray version, when it cannot.
  - Changes nothing and reads nothing from the host; run it once per play with C(run_once) and share the result.
options:
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
      address:
        description: The node's address on the cluster network (C(VLLM_HOST_IP) from the nccl role). Required with more than one node.
        type: str
        default: ""
      gpus:
        description: GPUs the node serves with (gpu_probe's count).
        type: int
        required: true
      head:
        description: The head host this host's own variables name (C(vllmops_head_host)); every node must name the same one.
        type: str
        required: true
      image_id:
        description:
          - The serving image's ID on this node (its image_probe's C(image.id)), what its units start; empty for
            O(image.id). Docker's classic and containerd image stores give the same image different IDs.
        type: str
        default: ""
      image_content_id:
        description:
          - The content ID of the image this node holds (its image_probe's C(image.content_id)); must equal
            O(image.content_id) when both are given. Empty to skip the check.
        type: str
        default: ""
      cluster_env:
        description:
          - The node's cluster environment (the nccl role's C(cluster.env), parsed), to decide which of the network
            settings the image bakes (O(image.network_env)) its serving containers get replaced or removed.
        type: dict
        default: {}
  image:
    description: The serving image, from image_probe.
    type: dict
    required: true
    suboptions:
      id:
        description: Image ID (C(sha256:...)) on the node whose probe this is (the head's).
        type: str
        required: true
      content_id:
        description: The image's content ID (image_probe's C(image.content_id)), the same on every image store.
        type: str
        default: ""
      name:
        description: The image reference.
        type: str
        required: true
      vllm_version:
        description: The image's vLLM version; null or empty when the image holds no vLLM.
        type: str
      has_ray:
        description: Whether the image has Ray installed (implied by O(image.ray_version)).
        type: bool
        default: false
      ray_version:
        description:
          - The image's Ray version (image_probe's C(packages.ray)); empty when it has none. Ray 2.52 and later have
            token authentication, which the plan turns on with backend C(ray).
        type: str
        default: ""
      ray_client:
        description:
          - Whether the image has Ray Client's dependency (grpcio, image_probe's C(packages.grpcio)). C(ray start --head)
            then opens Ray's client server, which cannot be turned off; the plan's C(ray.client_server) says so and the
            Ray units pin its port.
        type: bool
        default: false
      multinode_modes:
        description: image_probe's C(vllm.multinode_modes) - C(ray), C(native), C(data_parallel).
        type: list
        elements: str
        default: []
      network_env:
        description:
          - The network settings the image's ENV bakes (image_probe's C(image.network_env)). Those the nccl role pins
            per node (C(VLLM_HOST_IP), C(NCCL_SOCKET_IFNAME), C(GLOO_SOCKET_IFNAME), C(TP_SOCKET_IFNAME),
            C(UCX_NET_DEVICES), C(NCCL_IB_DISABLE), C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX)) are replaced or removed per
            node, with a warning (RV(plan.members), RV(plan.image_env_warnings)).
        type: dict
        default: {}
  backend:
    description:
      - C(auto) chooses as described above; C(ray) always uses Ray, even on one node; C(mp) uses vLLM's own
        executor and, on several nodes, its Ray-free multi-node mode.
    type: str
    choices: [auto, ray, mp]
    default: auto
  tensor_parallel_size:
    description: Tensor parallel size; 0 derives it as the cluster's GPUs divided by the pipeline parallel size.
    type: int
    default: 0
  pipeline_parallel_size:
    description: Pipeline parallel size; 0 means 1.
    type: int
    default: 0
  master_port:
    description: The port rank 0 listens on for the other nodes in C(mp-multinode) (C(--master-port)).
    type: int
    default: 29501
  api_port:
    description: The port clients reach the API on, on the head (the API proxy's, or vLLM's own without a proxy).
    type: int
    default: 8000
  vllm_port:
    description: The port vLLM's rank 0 listens on, behind the API proxy; default O(api_port) (no proxy).
    type: int
  ray_port:
    description: The Ray head's GCS port.
    type: int
    default: 6379
  ray_units:
    description:
      - The names of the Ray units, for each member's C(ray_unit) (the vllmops role's C(vllmops_units)).
    type: dict
    default: {head: vllmops-ray-head, worker: vllmops-ray-worker}
    suboptions:
      head:
        description: The Ray head's unit.
        type: str
        default: vllmops-ray-head
      worker:
        description: The Ray workers' unit.
        type: str
        default: vllmops-ray-worker
  address_source:
    description: Where the nodes' cluster addresses come from, for the message when one is missing.
    type: str
    default: VLLM_HOST_IP in /etc/vllmops/cluster.env, written by the nccl role
  model_path:
    description: The model vLLM serves - a path (which must be O(model_dir) or under it) or a hub id such as C(org/name).
    type: str
    required: true
  model_dir:
    description: The directory holding the models, the only one the containers mount.
    type: str
    default: /srv/models
extends_documentation_fragment:
  - vllmops.cluster.info_module
seealso:
  - module: vllmops.cluster.image_probe
  - module: vllmops.cluster.gpu_probe
  - module: vllmops.cluster.nccl_facts
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
# Every host describes itself (gpu_probe, nccl_facts and image_probe registered before) ...
- name: Describe this node for the plan
  ansible.builtin.set_fact:
    _vllmops_node:
      name: "{{ inventory_hostname }}"
      address: "{{ nccl.interface.address | default('') }}"
      gpus: "{{ gpus.usable_gpus }}"
      head: "{{ vllmops_head_host }}"

# ... and one task plans for all of them; every host reads __cluster_plan.plan.
- name: Plan how the cluster runs
  vllmops.cluster.cluster_plan:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, '_vllmops_node') | list }}"
    image:
      id: "{{ probe.image.id }}"
      content_id: "{{ probe.image.content_id }}"
      name: "{{ vllm_serve_image }}"
      vllm_version: "{{ probe.vllm.version if probe.vllm else '' }}"
      has_ray: "{{ probe.packages.ray is not none }}"
      ray_version: "{{ probe.packages.ray or '' }}"
      multinode_modes: "{{ probe.vllm.multinode_modes if probe.vllm else [] }}"
    backend: "{{ vllmops_backend | default('auto') }}"
    tensor_parallel_size: "{{ vllm_serve_tensor_parallel_size }}"
    pipeline_parallel_size: "{{ vllm_serve_pipeline_parallel_size }}"
    api_port: "{{ vllmops_api_port }}"
    vllm_port: "{{ vllm_serve_port }}"
    model_path: "{{ vllm_serve_model_dir }}/{{ vllm_serve_model }}"
    model_dir: "{{ vllm_serve_model_dir }}"
  run_once: true
  register: __cluster_plan

- name: Say what was planned
  ansible.builtin.debug:
    msg: "{{ __cluster_plan.plan.summary }}"
  run_once: true
"""

RETURN = r"""
plan:
  description: How the cluster runs.
  returned: success
  type: dict
  contains:
    backend:
      description: C(ray) or C(mp), the value of C(--distributed-executor-backend).
      type: str
      sample: mp
    mode:
      description: C(ray), C(mp-multinode) or C(mp-single).
      type: str
      sample: mp-multinode
    reason:
      description: Why this backend, in a line.
      type: str
    head:
      description: The head host (rank 0, serves the API).
      type: str
    head_address:
      description: The head's cluster address; C(127.0.0.1) for a single node without one.
      type: str
    nodes:
      description: Number of nodes.
      type: int
    gpus:
      description: GPUs in the cluster, equal to tensor_parallel_size x pipeline_parallel_size.
      type: int
    tensor_parallel_size:
      description: Tensor parallel size.
      type: int
    pipeline_parallel_size:
      description: Pipeline parallel size.
      type: int
    ports:
      description: C(api) (clients), C(vllm) (vLLM's rank 0, behind the proxy), C(master) and C(ray) ports.
      type: dict
    image_id:
      description: The image ID on the head; each node's own is C(members[host].image_id).
      type: str
    image_content_id:
      description: The image's content ID, the same on every node whatever its image store; null when not given.
      type: str
    image:
      description: The image reference.
      type: str
    vllm_version:
      description: The image's vLLM version.
      type: str
    serve_flags:
      description: Flags for C(vllm serve) on every node running vLLM - C(tensor_parallel_size), C(pipeline_parallel_size),
        C(distributed_executor_backend).
      type: dict
    members:
      description:
        - Per host, by inventory name - C(rank) (0 is the head, the others follow in inventory order), C(address),
          C(gpus), C(role) (C(head) or C(worker)), C(runs_vllm), C(serves_http), C(ray_unit)
          (O(ray_units.head), O(ray_units.worker) or null), C(serve_flags) and C(image_id) (the image's ID on that
          node, which its units start - O(nodes[].image_id), else O(image.id)).
        - In C(mp-multinode) C(serve_flags) holds C(nnodes), C(node_rank), C(master_addr), C(master_port), and
          C(headless) on workers; otherwise it is empty.
        - C(image_env) - the network settings the image bakes (O(image.network_env)) that the node's serving
          containers do not keep - C(replaced) (name to the value of the node's O(nodes[].cluster_env), which
          C(--env-file) sets) and C(removed) (names its cluster environment does not set; the units delete them).
      type: dict
    image_env_warnings:
      description:
        - One sentence per node and baked network setting (also given as warnings), naming the image, the variable,
          the image's value and what the node uses instead.
      type: list
      elements: str
      sample: ["image nvcr.io/nvidia/vllm:25.09-py3 sets NCCL_SOCKET_IFNAME=eth0; on node2 the cluster's setting NCCL_SOCKET_IFNAME==clu0 is used instead"]
    ray:
      description:
        - How Ray is reached and secured - C(address) (the head's GCS, C(head_address:ray_port), an IPv6 address in
          brackets), C(version) (the image's Ray, or null), C(token_auth) (true when the backend is C(ray) and
          the image's Ray has token authentication), C(warning) (why Ray runs without authentication, or null) and
          C(client_server) (true when the backend is C(ray) and the image has grpcio, so Ray's client server opens on the
          head).
      type: dict
      sample: {address: "10.88.0.2:6379", version: 2.60.0, token_auth: true, warning: null, client_server: true}
    summary:
      description: The plan in one line.
      type: str
      sample: "mp multi-node: 2 nodes, TP 2 x PP 1 over 2 GPUs, head node1 (10.88.0.2), rank 0 serves http on :8000; image vllm:0.32 (vLLM 0.32.0)"
msg:
  description: The plan's summary.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import ADDRESS_SOURCE, RAY_UNITS, PlanError, make_plan

NODE_SPEC = dict(
    name=dict(type="str", required=True),
    address=dict(type="str", default=""),
    gpus=dict(type="int", required=True),
    head=dict(type="str", required=True),
    image_id=dict(type="str", default=""),
    image_content_id=dict(type="str", default=""),
    cluster_env=dict(type="dict", default={}),
)
IMAGE_SPEC = dict(
    id=dict(type="str", required=True),
    content_id=dict(type="str", default=""),
    name=dict(type="str", required=True),
    vllm_version=dict(type="str"),
    has_ray=dict(type="bool", default=False),
    ray_version=dict(type="str", default=""),
    ray_client=dict(type="bool", default=False),
    multinode_modes=dict(type="list", elements="str", default=[]),
    network_env=dict(type="dict", default={}),
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="dict", required=True, options=NODE_SPEC),
            image=dict(type="dict", required=True, options=IMAGE_SPEC),
            backend=dict(type="str", choices=["auto", "ray", "mp"], default="auto"),
            tensor_parallel_size=dict(type="int", default=0),
            pipeline_parallel_size=dict(type="int", default=0),
            master_port=dict(type="int", default=29501),
            api_port=dict(type="int", default=8000),
            vllm_port=dict(type="int"),
            ray_port=dict(type="int", default=6379),
            ray_units=dict(type="dict", default=dict(RAY_UNITS),
                           options={role: dict(type="str", default=name) for role, name in RAY_UNITS.items()}),
            address_source=dict(type="str", default=ADDRESS_SOURCE),
            model_path=dict(type="str", required=True),
            model_dir=dict(type="str", default="/srv/models"),
        ),
        supports_check_mode=True,
    )
    try:
        plan = make_plan(**module.params)
    except PlanError as err:
        module.fail_json(msg=f"Planning how the cluster runs: {err}")
    if plan["ray"]["warning"]:
        module.warn(plan["ray"]["warning"])
    for warning in plan["image_env_warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, plan=plan, msg=plan["summary"])


if __name__ == "__main__":
    main()
