# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_log_diagnosis
short_description: What a vLLM log says went wrong, its evidence and the fix to try
version_added: 0.1.0
description:
  - The classifier M(vllmops.cluster.vllm_ready) and the head watchdog use, over a log's lines (a rank's journal).
  - C(none) for a log that shows a healthy start with no error after it; C(hang) for one that stops before the server is
    up without an error (unless O(exited)); otherwise the cause (see M(vllmops.cluster.vllm_ready)'s C(failure_class)).
positional: _input, exited
options:
  _input:
    description: The log's lines.
    type: list
    elements: str
    required: true
  exited:
    description: Whether the process is known to have ended (C(true)), to run (C(false)), or neither (C(null)).
    type: bool
"""

EXAMPLES = r"""
- name: What the rank's journal says
  ansible.builtin.debug:
    msg: "{{ journal.stdout_lines | vllmops.cluster.vllm_log_diagnosis }}"
    # {"class": "oom", "evidence": ["torch.OutOfMemoryError: CUDA out of memory..."], "hint": "..."}
"""

RETURN = r"""
_value:
  description: C(class), C(evidence) (the lines that show it) and C(hint) (empty for C(none)).
  type: dict
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_logs import classify


def vllm_log_diagnosis(lines, exited=None):
    found, evidence, hint = classify(list(lines or []), exited=exited)
    return {"class": found, "evidence": evidence, "hint": hint}


class FilterModule:
    def filters(self):
        return {"vllm_log_diagnosis": vllm_log_diagnosis}
