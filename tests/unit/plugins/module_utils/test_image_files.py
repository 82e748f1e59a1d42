"""OverlayLayers merges layer directories the way overlayfs does; CreatedContainer reads the same through
the engine's archive of a created, never started container."""

import io
import json
import os
import shutil
import stat
import tarfile

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient
from ansible_collections.vllmops.cluster.plugins.module_utils.image_files import CreatedContainer, ImageFilesError, OverlayLayers


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


def archive(*members) -> bytes:
    """A tar as the engine's archive endpoint sends it: (name, text) for a file, (name, None) for a directory,
    (name, "->target") for a symlink."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif content.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, content[2:]
                tar.addfile(info)
            else:
                data = content.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


ARCHIVES = {
    "/usr/lib/python3/site/vllm/version.py": archive(("version.py", "__version__ = '0.16.0'\n")),
    "/usr/local/site": archive(("site", "->/usr/lib/python3/site")),
    "/usr/lib/python3/site": archive(("site", None), ("site/vllm", None), ("site/vllm/version.py", "x"),
                                     ("site/ray", None)),
}


@pytest.fixture
def engine(engine):
    """The shared fake engine (conftest.py), with a created container that holds ARCHIVES."""
    engine.route("POST", "/containers/create", lambda req: req.json(201, {"Id": "c1"}))
    engine.route("GET", "/containers/c1/archive",
                 lambda req: req.raw(200, ARCHIVES[req.query["path"]], "application/x-tar")
                 if req.query["path"] in ARCHIVES else req.json(404, {"message": "Could not find the file"}))
    engine.route("DELETE", "/containers/c1", lambda req: req.raw(204, b""))
    return engine


def test_a_created_container_is_never_started_and_is_removed(engine):
    files = CreatedContainer(DockerClient(engine.host), "sha256:abc")
    assert files.read_text("/usr/lib/python3/site/vllm/version.py") == "__version__ = '0.16.0'\n"
    files.close()
    config = json.loads(engine.requests[0][3])
    assert config["Image"] == "sha256:abc"
    assert config["Entrypoint"] == ["/vllmops-probe-never-started"]
    assert config["Labels"] == {"io.vllmops.probe": "1"}
    asked = [(method, path) for method, path, _query, _body in engine.requests]
    assert ("POST", "/containers/c1/start") not in asked
    assert asked[-1] == ("DELETE", "/containers/c1")


def test_created_container_follows_symlinks_lists_and_misses(engine):
    files = CreatedContainer(DockerClient(engine.host), "sha256:abc")
    assert files.is_dir("/usr/local/site")  # the link itself resolves to the directory
    assert files.listdir("/usr/local/site") == ["ray", "vllm"]
    assert files.read_bytes("/nowhere") is None and not files.is_dir("/nowhere")


def test_a_container_that_cannot_be_created_says_why(engine):
    engine.route("POST", "/containers/create", lambda req: req.json(404, {"message": "No such image: sha256:abc"}))
    with pytest.raises(ImageFilesError, match="creating a container of sha256:abc failed: No such image"):
        CreatedContainer(DockerClient(engine.host), "sha256:abc")
