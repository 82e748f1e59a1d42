# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: model_version
short_description: Where a version of the model lies beside its served path
version_added: 0.5.0
description:
  - Every version of a model the model role puts on a node lies in its own directory, named by its digest, under
    C(.vllmops-versions/NAME) beside the served path C(DIR/NAME); the served path is a link to the version that serves.
  - The one place this is decided (the model role's module_utils), for the roles and playbooks.
positional: digest
options:
  _input:
    description: The served path (the model role's model_path).
    type: str
    required: true
  digest:
    description: The model's digest (C(sha256:...)); empty for the directory that holds every version.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: The directory of one version
  ansible.builtin.debug:
    msg: "{{ '/srv/models/tiny' | vllmops.cluster.model_version(vllmops_model.digest) }}"  # /srv/models/.vllmops-versions/tiny/0123456789abcdef
"""

RETURN = r"""
_value:
  description: The version's directory, or the directory of every version when the digest is empty.
  type: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.model_files import version_path, versions_dir


def model_version(path, digest=""):
    return version_path(path, digest) if digest else versions_dir(path)


class FilterModule:
    def filters(self):
        return {"model_version": model_version}
