# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a few files out of a Docker image without running it and without
exporting it.

Two ways in, the fastest that works:

* ``OverlayLayers``: the image's overlay2 layer directories on the host
  (``docker image inspect`` → GraphDriver), merged the way overlayfs merges
  them (whiteouts, opaque directories, symlinks resolved inside the image).
  Cost follows the files read, not the image size. Needs read access to
  Docker's data root (root) and the classic overlay2 store: the containerd
  image store names no directories (GraphDriver "overlayfs", Data null).
* ``CreatedContainer``: a created, never started container and the engine's
  archive of each path (what ``docker cp CONTAINER:PATH -`` reads); works
  with any storage driver, costs one engine request per path.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile

from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerError

_MAX_SYMLINKS = 40
_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
# GraphDriver.Name with Docker's containerd image store: its snapshotter's name.
_CONTAINERD_SNAPSHOTTERS = ("overlayfs", "native", "btrfs", "zfs", "fuse-overlayfs", "stargz")


class ImageFilesError(Exception):
    """The image's files cannot be read this way."""


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _normalize(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


class _ImageFiles:
    """Common interface: paths are absolute paths inside the image."""

    # Whether listing a large directory (/, /opt, site-packages) is cheap.
    cheap_listing = True

    def read_bytes(self, path: str) -> bytes | None:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str] | None:
        raise NotImplementedError

    def is_dir(self, path: str) -> bool:
        raise NotImplementedError

    def read_text(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def exists(self, path: str) -> bool:
        return self.is_dir(path) or self.read_bytes(path) is not None

    def close(self) -> None:
        """Release what the reader holds (a created container)."""


class OverlayLayers(_ImageFiles):
    """Files of an image from its overlay2 layer directories (top layer first)."""

    def __init__(self, layer_dirs: list[str]) -> None:
        if not layer_dirs:
            raise ImageFilesError("the image reports no overlay2 layer directories")
        unreadable = [d for d in layer_dirs if not os.access(d, os.R_OK | os.X_OK)]
        if unreadable:
            raise ImageFilesError(f"cannot read the layer directory {unreadable[0]} (run as root)")
        self.layers = layer_dirs
        self._states: dict[tuple[str, str], str] = {}

    @classmethod
    def from_graph_driver(cls, graph_driver: dict) -> OverlayLayers:
        """The image's layers from `docker image inspect`'s GraphDriver. Only the classic overlay2 store has layer
        directories of its own: Docker's containerd image store answers {"Name": "overlayfs", "Data": null}
        (Docker 26.1 with containerd-snapshotter), and its snapshots are containerd's, not the image's."""
        name = (graph_driver or {}).get("Name")
        if name != "overlay2":
            store = " (the containerd image store)" if name in _CONTAINERD_SNAPSHOTTERS else ""
            raise ImageFilesError(f"storage driver is {name!r}{store}, not overlay2")
        data = graph_driver.get("Data") or {}
        layers = [data["UpperDir"]] if data.get("UpperDir") else []
        layers += [d for d in (data.get("LowerDir") or "").split(":") if d]
        return cls(layers)

    # -- overlayfs semantics -------------------------------------------------

    @staticmethod
    def _has_whiteout_file(layer: str, logical: str) -> bool:
        """An aufs-style `.wh.<name>` beside the entry (as in image tarballs)."""
        parent, name = posixpath.split(logical)
        return os.path.lexists(layer + posixpath.join(parent, ".wh." + name))

    @staticmethod
    def _is_opaque(real_dir: str) -> bool:
        for attr in _OPAQUE_XATTRS:
            try:
                if os.getxattr(real_dir, attr, follow_symlinks=False) == b"y":
                    return True
            except OSError:
                pass
        return os.path.lexists(os.path.join(real_dir, ".wh..wh..opq"))

    def _dir_state(self, layer: str, directory: str) -> str:
        """How one layer treats a directory: "present", "opaque" (present and
        hiding the lower layers' content), "absent" (lower layers show
        through) or "hidden" (a whiteout, a file or an opaque parent hides
        the lower layers' directory). Memoized: a probe asks about the same
        few directories in every layer."""
        key = (layer, directory)
        if key not in self._states:
            self._states[key] = self._compute_dir_state(layer, directory)
        return self._states[key]

    def _compute_dir_state(self, layer: str, directory: str) -> str:
        st = _lstat(layer + directory)
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                return "hidden"
            return "opaque" if directory != "/" and self._is_opaque(layer + directory) else "present"
        if directory == "/":
            return "absent"
        parent_state = self._dir_state(layer, posixpath.dirname(directory))
        if parent_state in ("present", "opaque"):
            if parent_state == "opaque" or self._has_whiteout_file(layer, directory):
                return "hidden"
            return "absent"
        return parent_state

    def _entry(self, logical: str) -> tuple[str, os.stat_result] | None:
        """The topmost visible (real path, lstat) of a resolved path."""
        parent = posixpath.dirname(logical)
        for layer in self.layers:
            parent_state = self._dir_state(layer, parent)
            if parent_state == "hidden":
                return None
            if parent_state == "absent":
                continue
            real = layer + logical
            st = _lstat(real)
            if st is not None:
                # Docker's overlay2 whiteout is a 0/0 character device.
                if (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0) or self._has_whiteout_file(layer, logical):
                    return None
                return real, st
            if parent_state == "opaque" or self._has_whiteout_file(layer, logical):
                return None
        return None

    def _resolve(self, path: str) -> tuple[str, tuple[str, os.stat_result] | None]:
        """Resolve symlinks inside the image; return (logical path, entry)."""
        pending = _normalize(path).strip("/").split("/")
        current = "/"
        hops = 0
        entry = None
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                current = posixpath.dirname(current)
                continue
            candidate = posixpath.join(current, part)
            entry = self._entry(candidate)
            if entry is None:
                return candidate, None
            real, st = entry
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_SYMLINKS:
                    raise ImageFilesError(f"too many symlinks resolving {path}")
                target = os.readlink(real)
                base = "/" if target.startswith("/") else current
                pending = _normalize(posixpath.join(base, target)).strip("/").split("/") + pending
                current = "/"
                continue
            current = candidate
        if current == "/":
            return "/", ("/", os.lstat(self.layers[-1]))
        return current, entry

    # -- public --------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes | None:
        entry = self._resolve(path)[1]
        if entry is None or not stat.S_ISREG(entry[1].st_mode):
            return None
        with open(entry[0], "rb") as handle:
            return handle.read()

    def is_dir(self, path: str) -> bool:
        entry = self._resolve(path)[1]
        return entry is not None and stat.S_ISDIR(entry[1].st_mode)

    def listdir(self, path: str) -> list[str] | None:
        logical, entry = self._resolve(path)
        if entry is None or not stat.S_ISDIR(entry[1].st_mode):
            return None
        names: set[str] = set()
        hidden: set[str] = set()
        for layer in self.layers:
            state = self._dir_state(layer, logical)
            if state == "hidden":
                break
            if state == "absent":
                continue
            real = layer + logical if logical != "/" else layer
            for name in os.listdir(real):
                if name == ".wh..wh..opq":
                    continue
                if name.startswith(".wh."):
                    hidden.add(name[4:])
                    continue
                st = os.lstat(os.path.join(real, name))
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    hidden.add(name)
                elif name not in hidden:
                    names.add(name)
            if state == "opaque":
                break
        return sorted(names)


class CreatedContainer(_ImageFiles):
    """Files of an image through a created (never started) container."""

    cheap_listing = False  # listing copies the whole directory tree

    def __init__(self, docker, image: str) -> None:
        """docker: a docker_api.DockerClient."""
        self._docker = docker
        self.container = None
        try:
            # The entrypoint is never run: the container is only created.
            self.container = docker.container_create(image, entrypoint=["/vllmops-probe-never-started"],
                                                     labels={"io.vllmops.probe": "1"})
        except DockerError as err:
            raise ImageFilesError(f"creating a container of {image} failed: {err}") from err
        self._tars: dict[str, tarfile.TarFile | None] = {}

    def _tar(self, path: str) -> tarfile.TarFile | None:
        path = _normalize(path)
        if path not in self._tars:
            try:
                data = self._docker.container_archive(self.container, path)
            except DockerError as err:
                raise ImageFilesError(f"reading {path} from a created container failed: {err}") from err
            # An in-memory archive kept for later reads of the same path; nothing to close.
            self._tars[path] = tarfile.open(fileobj=io.BytesIO(data)) if data else None  # noqa: SIM115
        return self._tars[path]

    def _member(self, path: str, hops: int = 0) -> tuple[tarfile.TarFile, tarfile.TarInfo] | None:
        tar = self._tar(path)
        if tar is None:
            return None
        members = tar.getmembers()
        if not members:
            return None
        top = members[0]
        if top.issym():
            if hops >= _MAX_SYMLINKS:
                raise ImageFilesError(f"too many symlinks resolving {path}")
            base = "/" if top.linkname.startswith("/") else posixpath.dirname(_normalize(path))
            return self._member(posixpath.join(base, top.linkname), hops + 1)
        return tar, top

    def read_bytes(self, path: str) -> bytes | None:
        found = self._member(path)
        if found is None or not found[1].isfile():
            return None
        return found[0].extractfile(found[1]).read()

    def is_dir(self, path: str) -> bool:
        found = self._member(path)
        return found is not None and found[1].isdir()

    def listdir(self, path: str) -> list[str] | None:
        """Lists a directory by copying it whole: use on small directories only."""
        found = self._member(path)
        if found is None or not found[1].isdir():
            return None
        tar, top = found
        prefix = top.name.rstrip("/") + "/"
        return sorted({m.name[len(prefix):].split("/")[0] for m in tar.getmembers()
                       if m.name.startswith(prefix) and m.name != prefix})

    def close(self) -> None:
        if self.container:
            self._docker.container_remove(self.container)
            self.container = None
