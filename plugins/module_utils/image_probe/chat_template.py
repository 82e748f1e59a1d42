# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`--chat-template` given as a file: is the file there for vLLM to open?

vLLM opens the value as a path (relative to the container's working
directory), then, for a value without Jinja's characters (``{``, ``}``, a
newline), as a name in its built-in ``vllm/transformers_utils/chat_templates``;
anything else is an inline template. A file found neither in the image nor
there but on the host (the vllm_serve role mounts the model directory at the
same path) counts as found, with the caveat in its ``where``.
"""

from __future__ import annotations

import difflib
import os
import posixpath

from ansible_collections.vllmops.cluster.plugins.module_utils.plan import flag_name

JINJA_CHARS = "{}\n"


def flag_value(flags, key: str):
    """The value `flags` (a settings mapping, or argv) gives the option `key` (in any spelling: `tool_call_parser`,
    `tool-call-parser`, plan.flag_name's rule); None if unset."""
    key = flag_name(key)
    if isinstance(flags, dict):
        return next((value for k, value in flags.items() if flag_name(k) == key and value is not None), None)
    if isinstance(flags, (list, tuple)):
        tokens = [str(t) for t in flags]
        for i, token in enumerate(tokens):
            name, eq, value = token.partition("=")
            if name.startswith("--") and flag_name(name) == key:
                return value if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
    return None


def template_path(flags) -> str | None:
    """The chat_template of `flags` when it is a path, None when unset or an inline template."""
    value = flag_value(flags, "chat_template")
    if value is None or isinstance(value, bool) or any(c in str(value) for c in JINJA_CHARS):
        return None
    return str(value)


class HostFiles:
    """This host's files, with the reader interface image_files gives an image's."""

    cheap_listing = True

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError:  # missing, a directory, unreadable
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None


def is_file(files, path: str) -> bool:
    return files.read_bytes(path) is not None  # None for a directory too


def check_chat_template(files, value: str, working_dir: str | None, vllm_dir: str | None, host=None) -> dict:
    """{value, path, found, where, suggestions}: where vLLM would find the template (`image`, `vllm builtin`,
    `host`), or, when nowhere, the .jinja files beside the path closest to its name."""
    path = posixpath.normpath(posixpath.join(working_dir or "/", value))
    candidates = [("image", files, path)]
    if vllm_dir and not posixpath.isabs(value):
        candidates.append(("vllm builtin", files, posixpath.join(vllm_dir, "transformers_utils", "chat_templates", value)))
    if host is not None and posixpath.isabs(value):
        candidates.append(("host", host, path))
    for where, reader, candidate in candidates:
        if is_file(reader, candidate):
            return {"value": value, "path": candidate, "found": True, "where": where, "suggestions": []}
    names = files.listdir(posixpath.dirname(path)) if files.cheap_listing else None
    jinja = [n for n in names or [] if n.endswith(".jinja")]
    close = difflib.get_close_matches(posixpath.basename(path), jinja, n=3, cutoff=0.4)
    return {"value": value, "path": path, "found": False, "where": None,
            "suggestions": [posixpath.join(posixpath.dirname(path), n) for n in close]}
