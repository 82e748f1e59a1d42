# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an image's Python keeps its packages, and which Python it is, found
through an image_files reader (``files``: read_bytes, listdir, is_dir, exists,
cheap_listing)."""

from __future__ import annotations

import posixpath
import re

_PYTHON_DIRS = ("/usr/local/lib", "/usr/lib", "/opt/conda/lib", "/root/.local/lib")
_VENV_ROOTS = ("/opt", "/", "/workspace", "/app")
_SYSTEM_BIN = ("/usr/bin", "/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin")
_PYTHON_NAME = re.compile(r"python3(\.\d+)?")


def fixed_site_dirs(env: dict) -> list[str]:
    """Where pip puts packages, for readers that cannot list directories cheaply."""
    roots = [env["VIRTUAL_ENV"]] if env.get("VIRTUAL_ENV") else []
    roots += ["/usr/local", "/usr", "/opt/venv", "/opt/conda", "/venv", "/root/.local"]
    dirs = [e for e in (env.get("PYTHONPATH") or "").split(":") if e]
    for root in roots:
        for minor in range(14, 7, -1):
            for sub in ("site-packages", "dist-packages"):
                dirs.append(f"{root}/lib/python3.{minor}/{sub}")
    return list(dict.fromkeys([*dirs, "/usr/lib/python3/dist-packages"]))


def _lib_prefixes(files, env: dict) -> list[str]:
    """lib directories that may hold pythonX.Y/: the venv's, those beside PATH's bin directories, the usual ones."""
    prefixes = [env["VIRTUAL_ENV"] + "/lib"] if env.get("VIRTUAL_ENV") else []
    for path_entry in (env.get("PATH") or "").split(":"):
        if path_entry.endswith("/bin") and path_entry not in _SYSTEM_BIN:
            prefixes.append(path_entry[:-4] + "/lib")
    prefixes += list(_PYTHON_DIRS)
    for root in _VENV_ROOTS:
        for name in files.listdir(root) or []:
            prefixes.append(posixpath.join(root, name, "lib"))
    return list(dict.fromkeys(prefixes))


def venv_python(pyvenv_cfg: str) -> str | None:
    """3.X from a venv's pyvenv.cfg (``version = 3.11.2`` from venv, ``version_info = 3.11.2.final.0`` from
    virtualenv and uv)."""
    for line in pyvenv_cfg.splitlines():
        key, _sep, value = line.partition("=")
        match = re.match(r"\s*(3\.\d+)", value)
        if key.strip() in ("version", "version_info") and match:
            return match.group(1)
    return None


def venv_site_dirs(files, env: dict) -> list[str]:
    """site-packages of the venvs VIRTUAL_ENV and PATH point at, one pyvenv.cfg read each: no listing, and no
    copy of a large site-packages to learn that it exists."""
    roots = [env["VIRTUAL_ENV"]] if env.get("VIRTUAL_ENV") else []
    roots += [entry[:-4] for entry in (env.get("PATH") or "").split(":")
              if entry.endswith("/bin") and entry not in _SYSTEM_BIN]
    dirs = []
    for root in dict.fromkeys(posixpath.normpath(r) for r in roots):
        version = venv_python(files.read_text(posixpath.join(root, "pyvenv.cfg")) or "")
        if version:
            dirs.append(f"{root}/lib/python{version}/site-packages")
    return dirs


def _site_dir_exists(files, directory: str) -> bool:
    """For readers that cannot list: vllm/__init__.py first, a read of one file, before is_dir (which copies)."""
    return files.read_bytes(posixpath.join(directory, "vllm/__init__.py")) is not None or files.is_dir(directory)


def candidate_site_dirs(files, env: dict) -> list[str]:
    """Existing site-packages directories of the image, most likely first."""
    if not files.cheap_listing:
        pythonpath = list(dict.fromkeys(e for e in (env.get("PYTHONPATH") or "").split(":") if e))
        venvs = [d for d in venv_site_dirs(files, env) if d not in pythonpath]
        rest = [d for d in fixed_site_dirs(env) if d not in venvs and d not in pythonpath]
        return ([d for d in pythonpath if _site_dir_exists(files, d)] + venvs
                + [d for d in rest if _site_dir_exists(files, d)])
    candidates = [entry for entry in (env.get("PYTHONPATH") or "").split(":") if entry]
    for prefix in _lib_prefixes(files, env):
        for name in files.listdir(prefix) or []:
            if _PYTHON_NAME.fullmatch(name):
                for sub in ("site-packages", "dist-packages"):
                    candidates.append(posixpath.join(prefix, name, sub))
    candidates.append("/usr/lib/python3/dist-packages")
    return [c for c in dict.fromkeys(candidates) if files.is_dir(c)]


def python_version(site_dir: str, env: dict) -> str | None:
    """3.X from the site directory's path; the image's PYTHON_VERSION when it agrees."""
    match = re.search(r"python(3\.\d+)", site_dir)
    version = match.group(1) if match else None
    if env.get("PYTHON_VERSION") and (version is None or env["PYTHON_VERSION"].startswith(version)):
        return env["PYTHON_VERSION"]
    return version


def python_executables(files) -> list[str]:
    if not files.cheap_listing:
        return [path for path in ("/usr/local/bin/python3", "/usr/bin/python3", "/opt/venv/bin/python3",
                                  "/opt/conda/bin/python3") if files.exists(path)]
    found = []
    for directory in ("/usr/local/bin", "/usr/bin", "/opt/conda/bin", "/opt/venv/bin"):
        for name in files.listdir(directory) or []:
            if _PYTHON_NAME.fullmatch(name):
                found.append(posixpath.join(directory, name))
    return found
