# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: work_timeout
short_description: A deadline sized by the work, in seconds
version_added: 0.1.0
description:
  - C(ready), the time vLLM gets to answer after its ranks start, 600 s for compilation and graphs and then each
    node's share of the weights at 200 MB/s.
  - C(download), the time a download gets, 600 s and then the bytes at no less than O(count) bytes per second.
  - A size of 0 (not known) gives the fixed deadlines of before - 900 s to become ready, 7200 s to download.
positional: _input, kind, count
options:
  _input:
    description: The bytes (the weights').
    type: int
    required: true
  kind:
    description: Which deadline.
    type: str
    choices: [ready, download]
    required: true
  count:
    description: C(ready) - the nodes that share the weights; C(download) - the minimum rate in bytes per second.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: How long a 125 GB model may take to come up on two nodes
  ansible.builtin.debug:
    msg: "{{ 125000000000 | vllmops.cluster.work_timeout('ready', 2) }}"  # 913
"""

RETURN = r"""
_value:
  description: Seconds.
  type: int
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.module_utils.recipes import download_timeout, ready_timeout


def work_timeout(size, kind, count):
    if kind == "ready":
        return ready_timeout(int(size or 0), int(count))
    if kind == "download":
        return download_timeout(int(size or 0), int(count))
    raise AnsibleFilterError(f"work_timeout: kind is ready or download, not {kind!r}")


class FilterModule:
    def filters(self):
        return {"work_timeout": work_timeout}
