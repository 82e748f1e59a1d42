# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe results kept on the host by the image's content ID (image_identity):
an image never changes under it, so a second probe of it costs one inspect,
and the same image on another image store (the containerd store gives it
another Docker ID) finds the same result. The probe's version is part of the
key: results of an older probe are not read."""

from __future__ import annotations

import contextlib
import json
import os

from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import write_json


def cache_dir() -> str:
    if os.geteuid() == 0:
        return "/var/cache/vllmops/image_probe"
    return os.path.join(os.path.expanduser("~"), ".cache", "vllmops", "image_probe")


def cache_path(directory: str, image_key: str, version: int) -> str:
    safe = image_key.replace(":", "_").replace("/", "_")
    return os.path.join(directory, f"{safe}-v{version}.json")


def read_cache(directory: str, image_key: str, version: int) -> dict | None:
    try:
        with open(cache_path(directory, image_key, version), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_cache(directory: str, image_key: str, version: int, result: dict) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs speed
        write_json(cache_path(directory, image_key, version), result, mode=0o600)
