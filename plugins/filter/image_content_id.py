# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: image_content_id
short_description: An image's content ID, the same on every Docker image store, from its inspect
version_added: 0.2.0
description:
  - Returns C(sha256:) and the digest of the image's platform, layers (C(RootFS.Layers), the diff IDs) and the
    settings a container starts with (C(Config) - Env, Entrypoint, Cmd, Labels, User, WorkingDir, ...).
  - Docker's classic image store names an image by its config's digest, its containerd image store by its
    manifest's, and C(docker load) keeps no repo digest; the content ID is equal for the same image on both, and
    differs when a layer or a setting differs. Compare images between nodes with it; start containers by the
    node's own image ID.
  - The same ID as M(vllmops.cluster.image_probe)'s C(image.content_id) and M(vllmops.cluster.image_source)'s
    C(content_id).
positional: _input
options:
  _input:
    description:
      - One image as C(docker image inspect) describes it (an item of M(community.docker.docker_image_info)'s
        C(images)); null or empty for none.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The content ID of the image on this node (empty when it has none)
  ansible.builtin.set_fact:
    _content_id: "{{ __inspect.images | first | default({}) | vllmops.cluster.image_content_id }}"
"""

RETURN = r"""
_value:
  description: The content ID; an empty string without an image (or without a layer list).
  type: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import content_id


def image_content_id(inspect) -> str:
    return content_id(inspect if isinstance(inspect, dict) else None) or ""


class FilterModule:
    def filters(self):
        return {"image_content_id": image_content_id}
