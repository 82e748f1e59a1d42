# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_fingerprint
short_description: The fingerprint of everything a deploy of one host is made from
version_added: 0.1.0
description:
  - A sha256 over the host's settings, the cluster's members in inventory order (the first is the default head) and
    their addresses, the collection's own roles, plugins and playbooks (role defaults included), and O(extra) (the
    ansible-core version). Two runs with the same fingerprint deploy the same thing;
    M(vllmops.cluster.deploy_state) keeps it with a node's record.
  - "Not seen: a setting outside those names, and what a setting's value is derived from at run time (facts:
    such a value counts as the error it gives before facts are read)."
  - "Settings: every variable of the host whose name starts with a role's name (C(docker_), C(nccl_),
    C(vllm_serve_)...) or C(vllmops_), extra vars included, and C(ansible_host), C(ansible_port), C(ansible_user);
    not the switches of the run itself - C(vllmops_fast_rerun), and the bandwidth check's C(network_check) and
    C(network_check_*) (a measurement, not something deployed).
    A variable that cannot be templated counts as its error."
  - The filter C(vllmops.cluster.files_fingerprint) adds the files on the controller the deploy reads, by size and
    modification time (of a directory, each file in it), so a new image archive or a replaced secret changes it
    without reading gigabytes. deploy.yml takes it again when it records, after the run made the secrets.
positional: _input
options:
  _input:
    description: The host's variables (C(hostvars[inventory_hostname])).
    type: dict
    required: true
  members:
    description: The cluster's hosts (C(groups['vllm_nodes'])).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars), for the members' addresses.
    type: dict
    required: true
  extra:
    description: Other inputs (the ansible-core version).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Fingerprint this host's deploy
  ansible.builtin.set_fact:
    _inputs: >-
      {{ hostvars[inventory_hostname] | vllmops.cluster.deploy_fingerprint(groups['vllm_nodes'], hostvars)
         ~ ':' ~ [vllmops_secrets_dir, image_archive | default('')] | vllmops.cluster.files_fingerprint }}
"""

RETURN = r"""
_value:
  description: sha256, hex.
  type: str
"""

import hashlib
import json
from pathlib import Path

COLLECTION = Path(__file__).resolve().parents[2]
CONTENT = ("roles", "plugins", "playbooks", "meta", "recipes")
CONNECTION = ("ansible_host", "ansible_port", "ansible_user")
# Switches of the run itself, not of what it deploys: names, and name prefixes (a role that only measures).
RUN_SWITCHES = ("vllmops_fast_rerun", "network_check", "vllm_serve_restart")
RUN_SWITCH_PREFIXES = ("network_check_",)
_content_digest = None


def collection_digest() -> str:
    """sha256 over the collection's own files (names and contents; documentation aside), once per process."""
    global _content_digest
    if _content_digest is None:
        digest = hashlib.sha256()
        for top in CONTENT:
            for path in sorted((COLLECTION / top).rglob("*")):
                if path.is_file() and path.suffix != ".md" and "__pycache__" not in path.parts:
                    digest.update(str(path.relative_to(COLLECTION)).encode() + b"\0" + path.read_bytes() + b"\0")
        _content_digest = digest.hexdigest()
    return _content_digest


def _prefixes() -> tuple[str, ...]:
    roles = COLLECTION / "roles"
    names = sorted(p.name for p in roles.iterdir() if p.is_dir()) if roles.is_dir() else []
    return (*(name + "_" for name in names), "vllmops_")


def _value(variables, name):
    """The setting, templated whole (as JSON text), or the error it gives."""
    try:
        return json.dumps(variables[name], sort_keys=True, default=str)
    except Exception as err:  # an undefined variable, a failing lookup: ansible-core raises several kinds
        return f"<error: {type(err).__name__}>"


def deploy_fingerprint(variables, members, hostvars, extra=None):
    prefixes = _prefixes()
    settings = {name: _value(variables, name) for name in sorted(variables.keys())
                if (name.startswith(prefixes) or name in CONNECTION) and name not in RUN_SWITCHES
                and not name.startswith(RUN_SWITCH_PREFIXES)}
    cluster = [[member, _value(hostvars[member], "ansible_host") if "ansible_host" in hostvars[member] else member]
               for member in members]
    document = {"collection": collection_digest(), "settings": settings, "members": cluster, "extra": extra or {}}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


class FilterModule:
    def filters(self):
        return {"deploy_fingerprint": deploy_fingerprint}
