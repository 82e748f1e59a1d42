#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_cluster_info
short_description: Read the Ray cluster from its head and wait until the expected nodes and GPUs are alive
version_added: 0.1.0
description:
  - Runs a short Ray driver with the image's own Python inside the head's Ray container (an exec through the
    Docker Engine's API, what C(docker exec) does) and
    reads C(ray.nodes()) - every node's address, liveness and declared GPUs.
  - With O(expected_nodes), polls until each expected node's address is alive with its GPUs, or fails at
    O(timeout) naming the nodes that are missing or short of GPUs.
options:
  container:
    description: The head's Ray container.
    type: str
    default: vllmops-ray-head
  address:
    description:
      - The head's GCS (C(host:port)) the driver joins; C(auto) finds it from the container's files, which on a head
        that was a worker a moment ago may still name the old head.
    type: str
    default: auto
  expected_nodes:
    description:
      - Inventory name -> C(address) (the node's Ray address) and C(gpus) (GPUs it must declare).
      - Empty to read the cluster once without waiting.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the expected nodes.
    type: int
    default: 180
  unit:
    description: The head's systemd unit; its last log lines are added to a failure.
    type: str
    default: vllmops-ray-head
  interval:
    description: Seconds between reads.
    type: int
    default: 3
extends_documentation_fragment:
  - vllmops.cluster.docker_host
  - vllmops.cluster.info_module
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Wait for both Sparks and their GPUs
  vllmops.cluster.ray_cluster_info:
    expected_nodes:
      spark-1: {address: 10.0.0.1, gpus: 1}
      spark-2: {address: 10.0.0.2, gpus: 1}
    timeout: 300
"""

RETURN = r"""
nodes:
  description: Every node Ray knows (alive or dead), with C(node_id), C(address), C(alive), C(gpus), C(cpus), C(head).
  returned: success
  type: list
  elements: dict
alive_nodes:
  description: Alive nodes (one per address).
  returned: success
  type: int
gpus:
  description: GPUs declared by the alive nodes.
  returned: success
  type: float
expected_gpus:
  description: GPUs the expected nodes must declare.
  returned: success
  type: float
present:
  description: Expected nodes that are alive with their GPUs.
  returned: success
  type: list
  elements: str
missing:
  description: Expected nodes with no alive Ray node at their address.
  returned: success
  type: list
  elements: str
short_of_gpus:
  description: Expected nodes alive with fewer GPUs than expected.
  returned: success
  type: list
  elements: str
unexpected:
  description: Addresses of alive Ray nodes the inventory does not name.
  returned: success
  type: list
  elements: str
dead:
  description: Addresses Ray lists only as dead nodes.
  returned: success
  type: list
  elements: str
waited:
  description: Seconds spent waiting.
  returned: success
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.ray_cluster import RayClusterError, compare, describe, nodes_script, parse_nodes


def read_nodes(docker, container, address):
    try:
        rc, out, err = docker.exec_run(container, ["python3", "-c", nodes_script(address)], timeout=120)
    except DockerError as error:
        raise RayClusterError(f"reading Ray on {container} failed: {error}") from error
    out, err = out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
    if rc != 0:
        raise RayClusterError(f"reading Ray on {container} failed (rc={rc}): {(err or out).strip()[-600:]}")
    return parse_nodes(out)


def unit_log(module, unit):
    journalctl = module.get_bin_path("journalctl")
    if not unit or not journalctl:
        return ""
    rc, out, _err = module.run_command([journalctl, "--unit", unit, "--lines", "12", "--no-pager", "--output", "cat"])
    return f"\nLast lines of {unit}:\n{out.rstrip()}" if rc == 0 and out.strip() else ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", default="vllmops-ray-head"),
            address=dict(type="str", default="auto"),
            expected_nodes=dict(type="dict", default={}),
            timeout=dict(type="int", default=180),
            unit=dict(type="str", default="vllmops-ray-head"),
            interval=dict(type="int", default=3),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        docker = DockerClient(params["docker_host"])
    except DockerError as err:
        module.fail_json(msg=str(err))
    expected = {name: {"address": str(want["address"]), "gpus": float(want.get("gpus", 0))}
                for name, want in params["expected_nodes"].items()}
    started = time.monotonic()
    last_error = None
    while True:
        try:
            nodes = read_nodes(docker, params["container"], params["address"])
            ready, summary = compare(nodes, expected)
            last_error = None
        except RayClusterError as err:
            nodes, ready, summary, last_error = [], False, None, str(err)
        waited = round(time.monotonic() - started, 1)
        if ready or time.monotonic() - started >= params["timeout"]:
            break
        time.sleep(params["interval"])
    if summary is None:
        module.fail_json(msg=f"after {params['timeout']} s: {last_error}{unit_log(module, params['unit'])}", waited=waited)
    result = dict(changed=False, nodes=nodes, waited=waited, **summary)
    if not ready:
        module.fail_json(msg=describe(summary, params["timeout"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
