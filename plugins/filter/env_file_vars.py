# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: env_file_vars
short_description: Read the variables of a KEY=VALUE environment file
version_added: 0.1.0
description:
  - Parses the text of a file that systemd reads with C(EnvironmentFile=) (for example the
    C(/etc/vllmops/cluster.env) the nccl role writes) into a dictionary.
  - Blank lines and lines starting with C(#) or C(;) are skipped; a value wrapped in matching single or
    double quotes loses them; a later line wins over an earlier one with the same name.
  - Lines without C(=) are ignored, as systemd does.
positional: _input
options:
  _input:
    description: The file's text (for example a slurped file's C(content | b64decode)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the cluster address the nccl role chose
  ansible.builtin.slurp:
    src: /etc/vllmops/cluster.env
  register: cluster_env

- name: Use it
  ansible.builtin.debug:
    msg: "{{ (cluster_env.content | b64decode | vllmops.cluster.env_file_vars).VLLM_HOST_IP | default('none') }}"
"""

RETURN = r"""
_value:
  description: Variable name to value.
  type: dict
"""


def env_file_vars(text):
    variables = {}
    for line in str(text or "").splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        name, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        variables[name] = value
    return variables


class FilterModule:
    def filters(self):
        return {"env_file_vars": env_file_vars}
