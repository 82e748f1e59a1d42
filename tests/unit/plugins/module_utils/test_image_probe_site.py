"""Where an image's Python keeps its packages, and which Python it is."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.site import (
    candidate_site_dirs,
    fixed_site_dirs,
    python_executables,
    python_version,
)
from memory_files import MemoryFiles

IMAGE = {
    "/usr/local/bin/python3.11": "",
    "/usr/bin/python3": "",
    "/usr/bin/python": "",
    "/usr/local/lib/python3.11/dist-packages/vllm/__init__.py": "",
    "/usr/lib/python3/dist-packages/apt/__init__.py": "",
    "/opt/venv/lib/python3.12/site-packages/ray/__init__.py": "",
    "/srv/custom/lib/python3.10/site-packages/x.py": "",
    "/pp/extra/mod.py": "",
}


def test_listing_readers_find_venvs_path_prefixes_and_the_usual_places():
    files = MemoryFiles(IMAGE)
    env = {"PATH": "/srv/custom/bin:/usr/bin", "PYTHONPATH": "/pp/extra:/pp/missing"}
    assert candidate_site_dirs(files, env) == [
        "/pp/extra",
        "/srv/custom/lib/python3.10/site-packages",
        "/usr/local/lib/python3.11/dist-packages",
        "/usr/lib/python3/dist-packages",
        "/opt/venv/lib/python3.12/site-packages",
    ]


def test_readers_that_cannot_list_try_the_fixed_places_once_each():
    files = MemoryFiles(IMAGE, cheap_listing=False)
    found = candidate_site_dirs(files, {"VIRTUAL_ENV": "/opt/venv"})
    assert found == ["/opt/venv/lib/python3.12/site-packages", "/usr/local/lib/python3.11/dist-packages",
                     "/usr/lib/python3/dist-packages"]


def test_fixed_places_start_with_pythonpath_and_the_venv():
    dirs = fixed_site_dirs({"PYTHONPATH": "/a:", "VIRTUAL_ENV": "/v"})
    assert dirs[:2] == ["/a", "/v/lib/python3.14/site-packages"]
    assert dirs[-1] == "/usr/lib/python3/dist-packages"


@pytest.mark.parametrize(("cheap", "expected"), [
    (True, ["/usr/local/bin/python3.11", "/usr/bin/python3"]),
    (False, ["/usr/bin/python3"]),
])
def test_python_executables(cheap, expected):
    assert python_executables(MemoryFiles(IMAGE, cheap_listing=cheap)) == expected


@pytest.mark.parametrize(("site_dir", "env", "version"), [
    ("/usr/local/lib/python3.11/dist-packages", {}, "3.11"),
    ("/usr/local/lib/python3.11/dist-packages", {"PYTHON_VERSION": "3.11.9"}, "3.11.9"),
    ("/usr/local/lib/python3.11/dist-packages", {"PYTHON_VERSION": "3.12.1"}, "3.11"),  # not this Python's
    ("/pp/extra", {"PYTHON_VERSION": "3.12.1"}, "3.12.1"),
    ("/pp/extra", {}, None),
])
def test_python_version(site_dir, env, version):
    assert python_version(site_dir, env) == version
