"""An image's files held in a dict, with the image_files reader interface the probe uses."""

from __future__ import annotations

import posixpath


class MemoryFiles:
    def __init__(self, files: dict[str, str], cheap_listing: bool = True) -> None:
        self.files = {posixpath.normpath(path): text.encode() for path, text in files.items()}
        self.cheap_listing = cheap_listing
        self.dirs = {"/"}
        for path in self.files:
            parent = posixpath.dirname(path)
            while parent not in self.dirs:
                self.dirs.add(parent)
                parent = posixpath.dirname(parent)

    def read_bytes(self, path: str) -> bytes | None:
        return self.files.get(posixpath.normpath(path))

    def read_text(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode()

    def is_dir(self, path: str) -> bool:
        return posixpath.normpath(path) in self.dirs

    def exists(self, path: str) -> bool:
        return self.is_dir(path) or self.read_bytes(path) is not None

    def listdir(self, path: str) -> list[str] | None:
        path = posixpath.normpath(path)
        if path not in self.dirs:
            return None
        children = {p for p in self.dirs | set(self.files) if p != path and posixpath.dirname(p) == path}
        return sorted(posixpath.basename(c) for c in children)

    def close(self) -> None:
        pass
