# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An image's content ID: the same for the same image on every Docker image
store, different when what a container of it runs differs.

Docker's image ID is not that. Measured on Docker 20.10 (classic store), 26.1
(classic overlay2 store) and 26.1 with the containerd image store
(``"features": {"containerd-snapshotter": true}``), one image moved between
them with ``docker save | docker load`` (tests/fixtures/image_identity):

* ``Id``: the classic store gives the config's digest; the containerd store
  the manifest's (or, pulled, the index's) digest. A ``docker save`` of the
  containerd store (an OCI layout with a manifest.json) loads into 20.10
  under the config's digest again.
* ``RepoDigests``: empty after a load on the classic store; the containerd
  store makes one up from the local manifest's digest. Neither says what a
  registry holds.
* ``RootFS.Layers`` (the layers' diff IDs), ``Architecture``/``Os``/
  ``Variant``, ``Created`` and every field of ``Config`` are equal, except
  ``Config.Image`` (the parent image's ID on the classic store, "" on the
  containerd store). ``Size``, ``GraphDriver``, ``Metadata``, ``Parent`` and
  ``DockerVersion`` (the engine's on the containerd store) are the engine's,
  not the image's. ``Config`` also carries a container's fields (Hostname,
  AttachStdin, Tty, ...), always empty in an image, which engines may show
  or leave out.

So the content ID is the sha256 of a canonical JSON of the platform, the
diff IDs and the ``Config`` fields that decide what a container runs
(``CONFIG_FIELDS``), empty values dropped (an image config may leave out what
an inspect shows as null or ""). ``Created`` is left out: the same files and
settings built twice run the same. An image config blob (``docker save``'s,
or a registry's) gives the same ID as the inspect of the loaded image.
"""

from __future__ import annotations

import hashlib
import json

# Bump when what goes into the ID changes: an ID of another scheme never equals one of this.
SCHEME = 1

# The image config's own fields (the OCI image spec's and Docker's extensions): what a container starts with.
CONFIG_FIELDS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                 "StopSignal", "Healthcheck", "OnBuild", "Shell")
# Sets written as mappings to {}: their keys are what counts.
_SET_FIELDS = ("ExposedPorts", "Volumes")


def _pruned(value):
    """value without the empty members of its mappings (None, "", [], {}, 0, false): absent and empty mean the
    same in an image config, and engines differ in which they show."""
    if isinstance(value, dict):
        kept = {key: _pruned(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, "", [], {}, 0, False)}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


def _config_fields(config: dict) -> dict:
    fields = {}
    for key in CONFIG_FIELDS:
        value = config.get(key)
        fields[key] = sorted(value) if key in _SET_FIELDS and isinstance(value, dict) else value
    return _pruned(fields)


def _identity(platform: dict, config: dict | None, diff_ids) -> str | None:
    if not isinstance(diff_ids, list):
        return None
    document = {
        "scheme": SCHEME,
        "platform": _pruned(platform),
        "config": _config_fields(config or {}),
        "layers": diff_ids,
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def content_id(inspect: dict | None) -> str | None:
    """The content ID of an image from `docker image inspect` (the engine API's /images/NAME/json); None when
    the inspect has no layer list to identify it by."""
    if not inspect:
        return None
    platform = {"architecture": inspect.get("Architecture"), "os": inspect.get("Os"), "variant": inspect.get("Variant")}
    return _identity(platform, inspect.get("Config"), (inspect.get("RootFS") or {}).get("Layers"))


def config_content_id(config: dict | None) -> str | None:
    """The content ID of an image from its config blob (the JSON a `docker save` archive's manifest names as
    Config); equal to content_id() of the same image's inspect."""
    if not config:
        return None
    platform = {"architecture": config.get("architecture"), "os": config.get("os"), "variant": config.get("variant")}
    return _identity(platform, config.get("config"), (config.get("rootfs") or {}).get("diff_ids"))


def short_id(image_id: str | None) -> str:
    """An ID as the collection's messages show it: `sha256:` and 12 hex digits."""
    return (image_id or "")[:19]
