# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: network_check_groups
short_description: The groups of nodes the cluster link's bandwidth check measures, in order
version_added: 0.2.0
description:
  - Every pair of nodes (which link is slow), then the whole ring when there are more than two; with O(pairs) false
    only the ring. Each group's first node is its rank 0 (the rendezvous).
positional: _input
options:
  _input:
    description: The nodes, in inventory order.
    type: list
    elements: str
    required: true
  pairs:
    description: Measure each pair on its own too.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: The groups
  ansible.builtin.debug:
    msg: "{{ ['a', 'b', 'c'] | vllmops.cluster.network_check_groups }}"  # [[a, b], [a, c], [b, c], [a, b, c]]
"""

RETURN = r"""
_value:
  description: Lists of node names.
  type: list
  elements: list
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.network_check import groups


def network_check_groups(nodes, pairs=True):
    return groups(list(nodes), pairs=bool(pairs))


class FilterModule:
    def filters(self):
        return {"network_check_groups": network_check_groups}
