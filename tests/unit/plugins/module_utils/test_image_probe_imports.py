"""Where `import vllm` lands: .pth files, setuptools' editable finders, egg-links, PYTHONPATH and checkouts, read
the way the image's Python reads them. The file contents are those pip 26.3 / setuptools 84.2.1 and setuptools
63.4.3's `setup.py develop` wrote for a tiny package named vllm (see tests/sandbox/probe_images.py)."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe import probe
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.imports import (
    VllmInstall,
    editable_pth_version,
    egg_link_target,
    finder_mapping,
    local_version_guesses,
    locate_vllm,
    parse_pth,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.site import candidate_site_dirs
from memory_files import MemoryFiles

VENV = "/opt/vllm-env/lib/python3.11/site-packages"
SYSTEM = "/usr/local/lib/python3.11/dist-packages"
FINDER_NAME = "__editable___vllm_0_16_0_finder"
FINDER = (
    "from __future__ import annotations\nimport sys\nfrom importlib.machinery import ModuleSpec, PathFinder\n\n"
    "MAPPING: dict[str, str] = {'vllm': '/opt/vllm/vllm'}\nNAMESPACES: dict[str, list[str]] = {}\n"
    "PATH_PLACEHOLDER = '__editable__.vllm-0.16.0.finder' + \".__path_hook__\"\n\n"
    "def install():\n    if not any(finder == _EditableFinder for finder in sys.meta_path):\n"
    "        sys.meta_path.append(_EditableFinder)\n")
CHECKOUT = {"/opt/vllm/vllm/__init__.py": "", "/opt/vllm/vllm/entrypoints/__init__.py": "",
            "/opt/vllm/vllm/_version.py": "__version__ = version = '0.16.0'\n", "/opt/vllm/pyproject.toml": ""}


class NoListing(MemoryFiles):
    """A created container's reader: reads one file at a time, and must never list or copy a directory."""

    def __init__(self, files):
        super().__init__(files, cheap_listing=False)
        self.reads = 0

    def read_bytes(self, path):
        self.reads += 1
        return super().read_bytes(path)

    def listdir(self, path):
        raise AssertionError(f"listed {path}")

    def is_dir(self, path):
        raise AssertionError(f"copied {path} to learn whether it is a directory")


@pytest.mark.parametrize(("text", "directories", "modules"), [
    ("/opt/vllm\n", ["/opt/vllm"], []),  # __editable__.*.pth in compat mode: the project directory
    ("/opt/vllm/src", ["/opt/vllm/src"], []),  # a src layout; no final newline
    ("../../../extra  \n", ["/opt/env/extra"], []),  # relative to the site directory, trailing blanks dropped
    ("# a comment\n\n   \n/x\n", ["/x"], []),
    (f"import {FINDER_NAME}; {FINDER_NAME}.install()", [], [FINDER_NAME]),
    ("import\tos, sys\n", [], ["os", "sys"]),
    ("import _virtualenv\n", [], ["_virtualenv"]),
    ("importlib-is-a-directory\n", ["/opt/env/lib/python3.11/site-packages/importlib-is-a-directory"], []),
])
def test_pth_lines(text, directories, modules):
    assert parse_pth(text, "/opt/env/lib/python3.11/site-packages") == (directories, modules)


@pytest.mark.parametrize(("source", "mapping"), [
    (FINDER, {"vllm": "/opt/vllm/vllm"}),
    ("MAPPING = {'vllm': '/src/vllm', 'other': '/src/other'}\n", {"vllm": "/src/vllm", "other": "/src/other"}),
    ("MAPPING = dict(vllm='/x')\n", {}),  # code, not a literal: never evaluated
    ("def broken(:\n", {}),
    ("NAMESPACES = {}\n", {}),
])
def test_editable_finder_mapping(source, mapping):
    assert finder_mapping(source) == mapping


def test_egg_link_and_editable_pth_names():
    assert egg_link_target("/opt/vllm\n.") == "/opt/vllm"
    assert editable_pth_version("__editable__.vllm-0.16.0+precompiled.pth") == ("vllm", "0.16.0+precompiled")
    assert editable_pth_version("easy-install.pth") is None
    assert "0.16.0+precompiled" in local_version_guesses("0.16.0")
    assert "0.17.1.dev3+g1234abc.cpu" in local_version_guesses("0.17.1.dev3+g1234abc")


LAYOUTS = {
    "finder": {**CHECKOUT, f"{VENV}/__editable__.vllm-0.16.0.pth": f"import {FINDER_NAME}; {FINDER_NAME}.install()",
               f"{VENV}/{FINDER_NAME}.py": FINDER, f"{VENV}/vllm-0.16.0.dist-info/METADATA": ""},
    "static": {**CHECKOUT, f"{VENV}/__editable__.vllm-0.16.0+precompiled.pth": "/opt/vllm\n",
               f"{VENV}/vllm-0.16.0+precompiled.dist-info/METADATA": ""},
    "egg-link": {**CHECKOUT, f"{SYSTEM}/easy-install.pth": "/opt/vllm\n", f"{SYSTEM}/vllm.egg-link": "/opt/vllm\n.",
                 "/opt/vllm/vllm.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n"},
    "other-pth": {**CHECKOUT, f"{SYSTEM}/easy-install.pth": "/opt/vllm\n"},  # no egg-link names it
    "pythonpath": {"/workspace/vllm/vllm/__init__.py": "", "/workspace/vllm/vllm/entrypoints/__init__.py": ""},
    "checkout": {"/app/vllm/__init__.py": "", "/app/vllm/entrypoints/__init__.py": "", "/app/setup.py": ""},
    "installed-wins": {**CHECKOUT, f"{VENV}/vllm/__init__.py": "",
                       f"{VENV}/__editable__.vllm-0.16.0.pth": f"import {FINDER_NAME}; {FINDER_NAME}.install()",
                       f"{VENV}/{FINDER_NAME}.py": FINDER},
    "stale-mapping": {f"{VENV}/__editable__.vllm-0.16.0.pth": f"import {FINDER_NAME}; {FINDER_NAME}.install()",
                      f"{VENV}/{FINDER_NAME}.py": FINDER, "/opt/vllm/README.md": ""},  # the checkout is gone
}
EXPECTED = {
    "finder": VllmInstall("/opt/vllm", "editable", VENV, f"{VENV}/{FINDER_NAME}.py", "0.16.0"),
    "static": VllmInstall("/opt/vllm", "editable", VENV, f"{VENV}/__editable__.vllm-0.16.0+precompiled.pth",
                          "0.16.0+precompiled"),
    "egg-link": VllmInstall("/opt/vllm", "editable", SYSTEM, f"{SYSTEM}/vllm.egg-link", "0.16.0"),
    "other-pth": VllmInstall("/opt/vllm", "pth", SYSTEM, f"{SYSTEM}/easy-install.pth", None),
    "pythonpath": VllmInstall("/workspace/vllm", "pythonpath", "/workspace/vllm", "PYTHONPATH", None),
    "checkout": VllmInstall("/app", "checkout", None, None, None),
    "installed-wins": VllmInstall(VENV, "site-packages", VENV, None, None),
    "stale-mapping": None,
}


@pytest.mark.parametrize("reader", [MemoryFiles, NoListing])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_where_import_vllm_lands(layout, reader):
    files = reader(LAYOUTS[layout])
    env = {"PYTHONPATH": "/workspace/vllm"} if layout == "pythonpath" else {}
    assert locate_vllm(files, env, [VENV, SYSTEM]) == EXPECTED[layout]


def test_a_venv_on_path_comes_before_the_system_python():
    image = {**LAYOUTS["finder"], f"{SYSTEM}/vllm/__init__.py": "", "/usr/bin/python3": "",
             "/opt/vllm-env/pyvenv.cfg": "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n"}
    env = {"PATH": "/opt/vllm-env/bin:/usr/local/bin:/usr/bin:/bin"}
    for files in (MemoryFiles(image), MemoryFiles(image, cheap_listing=False)):
        site_dirs = candidate_site_dirs(files, env)
        assert site_dirs[0] == VENV
        assert locate_vllm(files, env, site_dirs).kind == "editable"


def test_a_reader_that_cannot_list_reads_few_files():
    files = NoListing(LAYOUTS["static"])
    locate_vllm(files, {}, [VENV])
    assert files.reads < 40


def test_the_probe_reads_vllm_from_the_checkout_and_packages_from_the_venv(monkeypatch):
    image = {**LAYOUTS["finder"], f"{VENV}/ray/_version.py": "version = '2.40.0'\n", "/usr/bin/python3": "",
             "/opt/vllm-env/pyvenv.cfg": "version = 3.11.2\n"}
    monkeypatch.setattr(probe, "probe_vllm", lambda files, root, dists: {"root": root, "version": dists.get("vllm")})
    env = {"VIRTUAL_ENV": "/opt/vllm-env", "PATH": "/opt/vllm-env/bin:/usr/bin"}
    for files in (MemoryFiles(image), MemoryFiles(image, cheap_listing=False)):
        found = probe.probe_files(files, env)
        assert found["vllm"] == {"root": "/opt/vllm", "version": "0.16.0"}
        assert found["python"]["site_packages"] == VENV
        assert (found["python"]["vllm_install"], found["python"]["vllm_install_via"]) == (
            "editable", f"{VENV}/{FINDER_NAME}.py")
        assert found["packages"]["ray"] == "2.40.0"
        assert found["notes"] == []


def test_a_bare_checkout_is_found_and_said_to_be_one(monkeypatch):
    image = {**LAYOUTS["checkout"], "/usr/bin/python3": "", "/usr/lib/python3/dist-packages/apt/__init__.py": "",
             "/app/vllm/_version.py": "__version__ = version = '0.16.0'\n"}
    monkeypatch.setattr(probe, "probe_vllm", lambda files, root, dists: {"root": root, "dists": dists})
    found = probe.probe_files(MemoryFiles(image), {})
    assert found["vllm"]["root"] == "/app"
    assert found["python"]["site_packages"] == "/usr/lib/python3/dist-packages"
    assert found["python"]["vllm_install"] == "checkout"
    assert found["notes"] == ["vLLM found only as a checkout in /app: no Python of the image points at it (no "
                              "PYTHONPATH, .pth or editable install), so `import vllm` may fail in the image"]
