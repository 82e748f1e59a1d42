# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A JSON file written whole or not at all: the records, caches, manifests and progress reports of the modules;
and the documents of one schema kept in a directory (the benchmark's and the bandwidth check's results)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile


def write_whole(path, fill, mode=0o644, binary=False, owner=None):
    """Write path through a temporary file in the same directory and a rename, with mode (and owner, (uid, gid),
    when given): a reader sees the old file or the new one, never a part. fill(out) writes the content. Creates the
    directory (0755) when missing."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")  # 0600
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as out:
            fill(out)
        if owner is not None:
            os.chown(partial, *owner)
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


def write_json(path, data, mode=0o644, **dump_options):
    """Write data to path as JSON, whole or not at all (write_whole)."""
    write_whole(path, lambda out: json.dump(data, out, **dump_options), mode)


def read_documents(directory, schema, suffix=".json", exclude=""):
    """[(path, document)] of every file in directory named *suffix whose JSON object has that `schema`; files that
    are not JSON, or another schema's, are skipped; none when the directory does not exist."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        path = os.path.join(directory, name)
        if not name.endswith(suffix) or path == exclude:
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and document.get("schema") == schema:
            found.append((path, document))
    return found
