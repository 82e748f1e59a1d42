"""OverlayLayers merges layer directories the way overlayfs does."""

import os
import shutil
import stat

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_files import ImageFilesError, OverlayLayers


def write(root, path, text="x"):
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def whiteout(root, path):
    """Docker's overlay2 whiteout: a 0/0 character device (needs root)."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def make_opaque(root, path):
    target = root / path.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    os.setxattr(target, "trusted.overlay.opaque", b"y")


@pytest.fixture
def layers(tmp_path):
    lower, middle, upper = (tmp_path / name for name in ("lower", "middle", "upper"))
    for d in (lower, middle, upper):
        d.mkdir()
    write(lower, "/usr/lib/python3/site/vllm/__init__.py", "old")
    write(lower, "/usr/lib/python3/site/ray/__init__.py", "ray")
    write(lower, "/etc/removed.conf")
    write(lower, "/srv/data/a.txt")
    write(lower, "/srv/data/b.txt")
    (lower / "usr/local").mkdir(parents=True)
    os.symlink("/usr/lib/python3/site", lower / "usr/local/site")
    os.symlink("../lib/python3/site/vllm", lower / "usr/local/vllm-link")
    write(middle, "/usr/lib/python3/site/vllm/__init__.py", "new")
    write(middle, "/usr/lib/python3/site/vllm/extra.py")
    write(upper, "/srv/data/.wh.b.txt", "")  # aufs-style whiteout file, as in image tarballs
    return lower, middle, upper


def test_upper_layers_win_and_symlinks_resolve_inside_the_image(layers):
    lower, middle, upper = layers
    files = OverlayLayers([str(upper), str(middle), str(lower)])
    assert files.read_text("/usr/lib/python3/site/vllm/__init__.py") == "new"
    assert files.read_text("/usr/local/site/ray/__init__.py") == "ray"   # absolute symlink
    assert files.read_text("/usr/local/vllm-link/extra.py") == "x"       # relative symlink
    assert files.listdir("/usr/lib/python3/site/vllm") == ["__init__.py", "extra.py"]
    assert files.is_dir("/usr/local/site") and not files.is_dir("/etc/removed.conf")
    assert files.read_bytes("/nope/at/all") is None and files.listdir("/nope") is None


def test_whiteout_file_hides_lower_entry(layers):
    lower, middle, upper = layers
    files = OverlayLayers([str(upper), str(middle), str(lower)])
    assert files.read_bytes("/srv/data/b.txt") is None
    assert files.listdir("/srv/data") == ["a.txt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="character-device whiteouts and trusted.* xattrs need root")
def test_char_device_whiteout_and_opaque_directory(layers, tmp_path):
    lower, middle, upper = layers
    whiteout(upper, "/etc/removed.conf")
    whiteout(upper, "/usr/lib/python3/site/ray")          # a whole package removed
    make_opaque(upper, "/usr/lib/python3/site/vllm")      # rm -rf vllm && mkdir vllm
    write(upper, "/usr/lib/python3/site/vllm/only.py")
    files = OverlayLayers([str(upper), str(middle), str(lower)])
    assert files.read_bytes("/etc/removed.conf") is None
    assert files.is_dir("/usr/lib/python3/site/ray") is False
    assert files.read_bytes("/usr/local/site/ray/__init__.py") is None
    assert files.read_bytes("/usr/lib/python3/site/vllm/__init__.py") is None
    assert files.listdir("/usr/lib/python3/site/vllm") == ["only.py"]
    assert "ray" not in files.listdir("/usr/lib/python3/site")


def test_a_file_replacing_a_directory_hides_its_content(layers):
    lower, middle, upper = layers
    shutil.rmtree(upper / "srv")
    write(upper, "/srv", "now a file")
    files = OverlayLayers([str(upper), str(middle), str(lower)])
    assert files.read_bytes("/srv/data/a.txt") is None
    assert files.read_text("/srv") == "now a file"


def test_symlink_loops_are_reported(tmp_path):
    layer = tmp_path / "l"
    layer.mkdir()
    os.symlink("/b", layer / "a")
    os.symlink("/a", layer / "b")
    with pytest.raises(ImageFilesError, match="too many symlinks"):
        OverlayLayers([str(layer)]).read_bytes("/a/x")


def test_other_storage_drivers_are_refused():
    with pytest.raises(ImageFilesError, match="not overlay2"):
        OverlayLayers.from_graph_driver({"Name": "vfs", "Data": {}})
