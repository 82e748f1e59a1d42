#!/usr/bin/env python3
"""The stand-in DCGM exporter image (tests/sandbox/gpu/dcgm-exporter on the
node image's Debian rootfs), built once per recipe and loaded into the nodes'
own Docker the way an operator of an air-gapped cluster pre-loads NGC's image.

    python3 tests/sandbox/gpu/dcgm_image.py load NODE...   # prints the image name
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import nodes  # noqa: E402

SCRIPT = HERE / "dcgm-exporter"
DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY dcgm-exporter /usr/bin/dcgm-exporter
ENTRYPOINT ["/usr/bin/dcgm-exporter"]
"""


def name() -> str:
    digest = hashlib.sha256(SCRIPT.read_bytes() + DOCKERFILE.encode() + nodes.rootfs_hash(nodes.IMAGE_SUITE).encode()).hexdigest()[:12]
    return f"vllmops-sandbox/dcgm-exporter:{digest}"


def build() -> str:
    image = name()
    if nodes.image_exists(image):
        return image
    base = nodes.image_base()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Dockerfile").write_text(DOCKERFILE)
        (Path(tmp) / "dcgm-exporter").write_bytes(SCRIPT.read_bytes())
        (Path(tmp) / "dcgm-exporter").chmod(0o755)
        nodes.run(["docker", "build", "--quiet", "--build-arg", f"BASE_IMAGE={base}",
                   "-t", image, tmp])
    return image


def load(node_names: list[str]) -> str:
    """The image in every node's Docker (skipped where it is already there)."""
    image = build()
    for node in node_names:
        present = subprocess.run(["docker", "exec", node, "docker", "image", "inspect", image], capture_output=True)
        if present.returncode == 0:
            continue
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        subprocess.run(["docker", "exec", "-i", node, "docker", "load", "--quiet"], stdin=save.stdout, check=True,
                       capture_output=True)
        save.stdout.close()
        if save.wait():
            raise RuntimeError(f"docker save {image} failed")
    return image


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "load":
        print(load(sys.argv[2:]))
    else:
        sys.exit(__doc__)
