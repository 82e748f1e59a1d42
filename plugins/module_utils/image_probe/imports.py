# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where ``import vllm`` lands in an image, found the way the image's own Python finds it, from files read
through an image_files reader. Nothing of the image is run: a .pth ``import`` line and setuptools' editable
finder are parsed, never executed.

The order is the interpreter's, for each site directory of site.candidate_site_dirs (PYTHONPATH, the venvs
VIRTUAL_ENV and PATH name, then the usual prefixes; one site directory per interpreter, most likely first):

1. PYTHONPATH entries (they come before every site directory on sys.path);
2. the site directory itself (a regular ``pip install``);
3. the directories its .pth files add, the files in name order and each line in order, as site.py reads them:
   setuptools' ``__editable__.<name>-<version>.pth`` path lines (PEP 660, compat mode or a src layout) and
   ``easy-install.pth`` lines that a ``<name>.egg-link`` names too (``setup.py develop``, pip < 21.3) are
   editable installs, other lines a plain .pth;
4. the ``MAPPING`` of the setuptools editable finders its .pth ``import`` lines install (PEP 660's default for
   a flat layout such as vLLM's; the finder is appended to sys.meta_path, so the path entries above win);

and, when no Python points at a vLLM, a checkout (vllm/__init__.py and vllm/entrypoints/ side by side) under
/opt, /workspace, /app or /vllm-workspace, reported as such.

Readers without cheap listing (a created container) cannot list a site directory for its .pth files: they read
the names pip and setuptools give them, the editable one named after the version of a checkout at the usual
places (with the local version suffixes vLLM's setup.py adds).
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass

from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.packages import version_from_file

CHECKOUT_BASES = ("/opt", "/workspace", "/app", "/vllm-workspace")
# Checkout directories tried under each base by readers that cannot list (and the base itself).
_CHECKOUT_NAMES = ("vllm", "vllm-src", "src/vllm")
# What vLLM's setup.py appends to the version (VLLM_USE_PRECOMPILED, a CUDA other than the main one, CPU, ...).
_LOCAL_SUFFIXES = ("", "precompiled", "cpu", "empty", "cu118", "cu121", "cu124", "cu126", "cu128", "cu129",
                   "cu130", "xpu", "tpu")
_EDITABLE_PTH = re.compile(r"__editable__\.(.+)-([^-]+)\.pth")
_PKG_INFO_VERSION = re.compile(r"^Version:\s*(\S+)", re.M)


@dataclass(frozen=True)
class VllmInstall:
    """Where vLLM was found: ``root`` is the directory holding the ``vllm`` package (the sys.path entry)."""

    root: str
    kind: str  # site-packages | editable | pth | pythonpath | checkout
    site_dir: str | None  # the site directory (or PYTHONPATH entry) it was found through
    via: str | None = None  # the file or variable that points there
    version: str | None = None  # what the installer recorded (dist-info or egg-info name), if anything

    @property
    def package_dir(self) -> str:
        return posixpath.join(self.root, "vllm")


# -- parsers (pure) -------------------------------------------------------------


def parse_pth(text: str, site_dir: str) -> tuple[list[str], list[str]]:
    """(directories, imported modules) of a .pth file, as site.addpackage reads it: comments and blank lines are
    skipped, lines starting with ``import`` are code (only the imported module names are taken, by ``ast``),
    any other line is a directory, relative to the site directory."""
    directories, modules = [], []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(("import ", "import\t")):
            try:
                tree = ast.parse(line)
            except SyntaxError:
                continue
            modules += [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
            continue
        directories.append(posixpath.normpath(posixpath.join(site_dir, line.rstrip())))
    return directories, modules


def finder_mapping(source: str) -> dict[str, str]:
    """setuptools' editable finder module's ``MAPPING: dict[str, str] = {'vllm': '/opt/vllm/vllm'}``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in targets) and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            if isinstance(value, dict):
                return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def egg_link_target(text: str) -> str | None:
    """The project directory an ``.egg-link`` names (its first line; the second is ``.``)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return posixpath.normpath(lines[0]) if lines else None


def editable_pth_version(name: str) -> tuple[str, str] | None:
    """(distribution, version) from ``__editable__.vllm-0.16.0+precompiled.pth``."""
    match = _EDITABLE_PTH.fullmatch(name)
    return (match.group(1), match.group(2)) if match else None


def local_version_guesses(version: str) -> list[str]:
    """The versions an editable vLLM of this checkout version may carry (vLLM's setup.py: ``+`` or, when the
    version has a local part already, ``.`` then the suffix)."""
    sep = "." if "+" in version else "+"
    return [version + (sep + suffix if suffix else "") for suffix in _LOCAL_SUFFIXES]


# -- reading the image -------------------------------------------------------------


def _has_vllm(files, root: str) -> bool:
    return files.read_bytes(posixpath.join(root, "vllm/__init__.py")) is not None


def _has_vllm_tree(files, root: str) -> bool:
    return _has_vllm(files, root) and files.read_bytes(posixpath.join(root, "vllm/entrypoints/__init__.py")) is not None


def _egg_info_version(files, project: str) -> str | None:
    """The version ``setup.py develop`` recorded in the project's vllm.egg-info."""
    text = files.read_text(posixpath.join(project, "vllm.egg-info/PKG-INFO"))
    match = _PKG_INFO_VERSION.search(text) if text else None
    return match.group(1) if match else None


class _Resolver:
    def __init__(self, files) -> None:
        self.files = files
        self._checkouts: list[str] | None = None

    def checkouts(self) -> list[str]:
        """Directories under the checkout bases holding a vLLM checkout (computed once)."""
        if self._checkouts is None:
            roots = []
            for base in CHECKOUT_BASES:
                roots.append(base)
                if self.files.cheap_listing:
                    roots += [posixpath.join(base, name) for name in self.files.listdir(base) or []]
                else:
                    roots += [posixpath.join(base, name) for name in _CHECKOUT_NAMES]
            self._checkouts = [r for r in dict.fromkeys(roots) if _has_vllm_tree(self.files, r)]
        return self._checkouts

    def pth_names(self, site_dir: str) -> list[str]:
        if self.files.cheap_listing:
            return sorted(n for n in self.files.listdir(site_dir) or [] if n.endswith(".pth") and not n.startswith("."))
        names = ["easy-install.pth", "vllm.pth"]
        for checkout in self.checkouts():
            version = version_from_file(self.files, posixpath.join(checkout, "vllm/_version.py"))
            for guess in local_version_guesses(version) if version else []:
                names.append(f"__editable__.vllm-{guess}.pth")
        return sorted(dict.fromkeys(names))

    def in_site_dir(self, site_dir: str) -> VllmInstall | None:
        """vLLM in this site directory, through its .pth lines, or through its editable finders."""
        files = self.files
        if _has_vllm(files, site_dir):
            return VllmInstall(site_dir, "site-packages", site_dir, None)
        finders = []
        for name in self.pth_names(site_dir):
            pth = posixpath.join(site_dir, name)
            text = files.read_text(pth)
            if text is None:
                continue
            directories, modules = parse_pth(text, site_dir)
            editable = editable_pth_version(name)
            version = editable[1] if editable and editable[0] == "vllm" else None
            finders += [(module, version) for module in modules if module.startswith("__editable__")]
            for directory in directories:
                if _has_vllm(files, directory):
                    return self._from_pth(site_dir, pth, directory, editable is not None, version)
        for module, version in finders:
            finder = posixpath.join(site_dir, module.replace(".", "/") + ".py")
            target = finder_mapping(files.read_text(finder) or "").get("vllm")
            if target and posixpath.basename(target.rstrip("/")) == "vllm":
                root = posixpath.dirname(posixpath.normpath(target))
                if _has_vllm(files, root):
                    return VllmInstall(root, "editable", site_dir, finder, version)
        return None

    def _from_pth(self, site_dir: str, pth: str, directory: str, editable: bool, version: str | None) -> VllmInstall:
        if editable:
            return VllmInstall(directory, "editable", site_dir, pth, version)
        link = posixpath.join(site_dir, "vllm.egg-link")
        text = self.files.read_text(link)
        if text is not None and egg_link_target(text) == directory:
            return VllmInstall(directory, "editable", site_dir, link, _egg_info_version(self.files, directory))
        return VllmInstall(directory, "pth", site_dir, pth, None)


def locate_vllm(files, env: dict, site_dirs: list[str]) -> VllmInstall | None:
    """Where ``import vllm`` lands: see the module's docstring for the order. site_dirs: the image's site
    directories, most likely interpreter first (PYTHONPATH entries among them are taken first, as Python does)."""
    resolver = _Resolver(files)
    pythonpath = [e for e in (env.get("PYTHONPATH") or "").split(":") if e]
    for entry in pythonpath:
        if _has_vllm(files, entry):
            return VllmInstall(posixpath.normpath(entry), "pythonpath", entry, "PYTHONPATH")
    for site_dir in site_dirs:
        if site_dir not in pythonpath:
            found = resolver.in_site_dir(site_dir)
            if found:
                return found
    checkouts = resolver.checkouts()
    return VllmInstall(checkouts[0], "checkout", None, None) if checkouts else None


def is_checkout(files, root: str) -> bool:
    """A source tree (setup.py or pyproject.toml beside vllm/) rather than installed packages."""
    return any(files.read_bytes(posixpath.join(root, name)) is not None for name in ("pyproject.toml", "setup.py"))
