# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_units
short_description: The units of the services' plan that one host runs, each with its service and replica
version_added: 0.5.0
description:
  - Reads the services' plan (M(vllmops.cluster.fleet_plan)'s C(fleet), the fact C(vllmops_fleet)) and lists the
    units O(host) runs, in plan order, each as C(service) (the service, without its replicas), C(replica) (the
    replica, without its units) and C(unit) (the unit).
  - Without O(host), every replica of the plan, each as C(service) and C(replica) (with its units) - the order in
    which a change rolls over them.
positional: host
options:
  _input:
    description: The services' plan.
    type: dict
    required: true
  host:
    description: An inventory hostname; empty for every replica.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: This node's units
  ansible.builtin.debug:
    msg: "{{ vllmops_fleet | vllmops.cluster.fleet_units(inventory_hostname) | map(attribute='unit.unit') | list }}"
"""

RETURN = r"""
_value:
  description: One item per unit of the host (C(service), C(replica), C(unit)), or per replica (C(service), C(replica)).
  type: list
  elements: dict
"""


def fleet_units(fleet, host=""):
    found = []
    for service in (fleet or {}).get("services", []):
        bare = {key: value for key, value in service.items() if key != "replicas"}
        for replica in service["replicas"]:
            if not host:
                found.append({"service": bare, "replica": replica})
                continue
            outer = {key: value for key, value in replica.items() if key != "units"}
            found += [{"service": bare, "replica": outer, "unit": unit} for unit in replica["units"] if unit["host"] == host]
    return found


class FilterModule:
    def filters(self):
        return {"fleet_units": fleet_units}
