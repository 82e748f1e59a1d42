# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: secrets_dir
author: vllmops.cluster developers (@vllmops)
short_description: The cluster's secrets directory on the controller, refused to an inventory that does not own it
version_added: 0.1.0
description:
  - Returns the directory it is given, once it has checked who owns it. The owner is the inventory directory
    (its resolved path) recorded in the file C(inventory-dir) inside it; the api_proxy role records it on the first
    deploy that uses the directory (vllmops.cluster.api_proxy, C(tasks/secrets_owner.yml)).
  - Fails when another inventory directory is recorded - two inventories whose directories share a name share the
    default directory (C(~/.vllmops/secrets/<inventory directory's name>)), and with it the API key, the proxy's CA
    and Ray's token. The sentence names both inventories and tells the operator to set C(vllmops_cluster_name) (or
    C(vllmops_secrets_dir)) for one of them.
  - Passes when nothing is recorded yet (a new directory, or one kept by an earlier release) or no inventory
    directory is known (C(-i host,), where C(inventory_dir) is not an absolute path). Writes nothing.
  - The default of C(vllmops_secrets_dir) (roles/vllmops) goes through it, so every playbook that reads or writes a
    secret on the controller stops at its first use of the directory, before anything is read from it or changed.
options:
  _terms:
    description: The secrets directory (one path).
    type: list
    elements: path
    required: true
  inventory_dir:
    description: The inventory directory of the host (C(inventory_dir)); empty or not absolute - nothing is checked.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: The secrets directory of this inventory
  ansible.builtin.debug:
    msg: >-
      {{ lookup('vllmops.cluster.secrets_dir', lookup('ansible.builtin.env', 'HOME') ~ '/.vllmops/secrets/spark',
                inventory_dir=inventory_dir | default('', true)) }}
"""

RETURN = r"""
_raw:
  description: The directory, as given.
  type: list
  elements: str
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# The file inside the secrets directory that names the inventory directory owning it.
OWNER_FILE = "inventory-dir"


def resolved(path: str) -> str:
    """The path with ~ expanded and symbolic links resolved, as the owner record holds it."""
    return os.path.realpath(os.path.expanduser(path))


def read_owner(secrets_dir: str) -> str | None:
    """The inventory directory recorded in the secrets directory, or None when none is."""
    try:
        with open(os.path.join(secrets_dir, OWNER_FILE), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except FileNotFoundError:
        return None


def owner_problem(secrets_dir: str, inventory_dir: str) -> str | None:
    """The sentence that refuses the secrets directory to this inventory, or None when it may use it."""
    if not os.path.isabs(inventory_dir or ""):  # no inventory directory: a host list (-i host,) says "None"
        return None
    owner = read_owner(secrets_dir)
    if owner is None or resolved(owner) == resolved(inventory_dir):
        return None
    return (
        f"The secrets directory {secrets_dir} (the API key, the proxy's CA, Ray's token) belongs to the inventory "
        f"{owner}, not to this one ({resolved(inventory_dir)}): their directories share the name "
        f"{os.path.basename(resolved(inventory_dir))}, so set vllmops_cluster_name (or vllmops_secrets_dir) for one "
        f"of them and re-run - nothing was changed (if that inventory moved here, write this path into "
        f"{os.path.join(secrets_dir, OWNER_FILE)} instead)."
    )


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1:
            raise AnsibleLookupError(f"vllmops.cluster.secrets_dir takes one directory, got {len(terms)}.")
        secrets_dir = str(terms[0])
        problem = owner_problem(secrets_dir, self.get_option("inventory_dir") or "")
        if problem:
            raise AnsibleLookupError(problem)
        return [secrets_dir]
