# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: docker_daemon_json
short_description: Merge managed settings into the text of an existing Docker daemon.json
version_added: 0.1.0
description:
  - Parses the current content of C(daemon.json) and merges the managed settings into it, in order.
  - Mappings merge recursively; any other value (lists included) replaces the old one.
  - Top-level keys whose managed value is null are treated as not set.
  - Raises a clear error when the existing content is not a JSON object, instead of overwriting it.
positional: _input
options:
  _input:
    description: Current content of daemon.json; an empty string when the file does not exist.
    type: str
    required: true
  managed:
    description: Mappings of settings, merged in order (later wins).
    type: list
    elements: dict
    required: true
  keep_unmanaged:
    description: Keep keys of the existing file that no managed mapping sets.
    type: bool
    default: true
  absent_keys:
    description: Top-level keys removed from the result, whoever set them.
    type: list
    elements: str
    default: []
  source:
    description: Where the content came from, for error messages.
    type: str
    default: daemon.json
"""

EXAMPLES = r"""
- name: Merge settings into the current daemon.json
  ansible.builtin.set_fact:
    daemon_json: "{{ current_text | vllmops.cluster.docker_daemon_json(managed=[{'live-restore': true}]) }}"
"""

RETURN = r"""
_value:
  description: The merged daemon configuration.
  type: dict
"""

import json

from ansible.errors import AnsibleFilterError


def _deep_merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _parse_existing(text: str, source: str) -> dict:
    if not text or not text.strip():
        return {}
    try:
        existing = json.loads(text)
    except ValueError as err:
        raise AnsibleFilterError(
            f"reading {source}: it is not valid JSON ({err}); fix or remove the file, "
            "the docker role merges its settings into it and will not overwrite what it cannot read"
        ) from err
    if not isinstance(existing, dict):
        raise AnsibleFilterError(f"reading {source}: expected a JSON object, found {type(existing).__name__}")
    return existing


def docker_daemon_json(text, managed, keep_unmanaged=True, absent_keys=(), source="daemon.json"):
    existing = _parse_existing(text, source)
    result = existing if keep_unmanaged else {}
    for settings in managed:
        if not isinstance(settings, dict):
            raise AnsibleFilterError(f"managed daemon.json settings must be mappings, got {type(settings).__name__}")
        result = _deep_merge(result, {k: v for k, v in settings.items() if v is not None})
    return {k: v for k, v in result.items() if k not in set(absent_keys)}


class FilterModule:
    def filters(self):
        return {"docker_daemon_json": docker_daemon_json}
