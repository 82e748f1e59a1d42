# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: files_fingerprint
short_description: The fingerprint of files on the controller, by size and modification time
version_added: 0.1.0
description:
  - A sha256 over the name, size and modification time of each file (a directory - every file under it, in its
    subdirectories too; a missing path counts as missing). Reads no content, so a multi-gigabyte image archive
    or a model directory costs nothing.
  - deploy.yml joins it to C(vllmops.cluster.deploy_fingerprint) for the image archive, the cluster's secrets and
    the model directory on the controller (C(model_controller_path)).
positional: _input
options:
  _input:
    description: Paths on the controller (empty strings are skipped).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Fingerprint the image archive and the secrets
  ansible.builtin.debug:
    msg: "{{ [vllmops_secrets_dir, image_archive] | vllmops.cluster.files_fingerprint }}"
"""

RETURN = r"""
_value:
  description: sha256, hex.
  type: str
"""

import hashlib
import json
import os
from pathlib import Path


def _stat(path: str):
    if not path:
        return None
    target = Path(path).expanduser()
    if target.is_dir():
        return _tree(target)
    try:
        info = target.stat()
    except OSError:
        return "absent"
    return [info.st_size, info.st_mtime_ns]


def _tree(root: Path) -> dict:
    """relative path -> [size, mtime_ns] of every file under root: a model keeps weights in subdirectories
    (original/, a diffusers' unet/), and a file changed there must change the fingerprint too."""
    seen = {}
    for top, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            path = Path(top, name)
            try:
                info = path.stat()  # a link counts as the file it names
            except OSError:  # gone since the walk, or a dangling link
                continue
            seen[path.relative_to(root).as_posix()] = [info.st_size, info.st_mtime_ns]
    return seen


def files_fingerprint(paths):
    """sha256 over the size and modification time of files (a directory: every file under it) on the controller."""
    document = {path: _stat(path) for path in paths or [] if path}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


class FilterModule:
    def filters(self):
        return {"files_fingerprint": files_fingerprint}
