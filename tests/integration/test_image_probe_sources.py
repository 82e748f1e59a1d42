"""image_probe on images whose vLLM is a source checkout (real vLLM 0.16.0 sources) reached the ways a Python
reaches one: a PEP 660 editable install (setuptools' finder, or a plain-path .pth), `setup.py develop`'s
egg-link, PYTHONPATH, or nothing at all. Both ways of reading an image must find the same vLLM."""

import json

import pytest
from conftest import ROOT, run_module

FIXTURES = ROOT / "tests/fixtures/vllm/serve_flags"
VENV_SITE = "/opt/vllm-env/lib/python3.11/site-packages"

# image -> (vllm.path, version, python.vllm_install, python.vllm_install_via, python.site_packages)
LAYOUTS = {
    "src-editable-finder": ("/opt/vllm/vllm", "0.16.0", "editable", f"{VENV_SITE}/__editable___vllm_0_16_0_finder.py",
                            VENV_SITE),
    "src-editable-pth": ("/opt/vllm/vllm", "0.16.0", "editable",
                         f"{VENV_SITE}/__editable__.vllm-0.16.0+precompiled.pth", VENV_SITE),
    "src-egg-link": ("/opt/vllm/vllm", "0.16.0", "editable", "/usr/local/lib/python3.11/dist-packages/vllm.egg-link",
                     "/usr/local/lib/python3.11/dist-packages"),
    "src-pythonpath": ("/workspace/vllm/vllm", "0.16.0", "pythonpath", "PYTHONPATH", "/usr/local/lib/python3.11/dist-packages"),
    "src-checkout": ("/app/vllm", "0.16.0", "checkout", None, "/usr/local/lib/python3.11/dist-packages"),
}


@pytest.mark.parametrize("backend", ["overlay2", "container"])
@pytest.mark.parametrize("image", LAYOUTS)
def test_vllm_from_a_checkout_is_found_where_python_imports_it(probe_images, image, backend):
    path, version, install, via, site = LAYOUTS[image]
    rc, result = run_module("image_probe", {"image": probe_images[image], "use_cache": False, "backend": backend})
    assert rc == 0, result.get("msg")
    assert result["backend"] == backend
    vllm = result["vllm"]
    assert vllm is not None, result["notes"]
    assert (vllm["path"], vllm["version"]) == (path, version)
    assert (result["python"]["vllm_install"], result["python"]["vllm_install_via"]) == (install, via)
    assert result["python"]["site_packages"] == site
    assert result["python"]["version"] == "3.11"
    truth = json.loads((FIXTURES / "0.16.0.json").read_text())  # the parser recorded from vLLM 0.16.0
    assert vllm["flags"] == truth["flags"]
    assert vllm["architectures"] == truth["architectures"]
    if install == "checkout":
        assert result["notes"] == ["vLLM found only as a checkout in /app: no Python of the image points at it (no "
                                   "PYTHONPATH, .pth or editable install), so `import vllm` may fail in the image"]
    else:
        assert result["notes"] == []


def test_validation_uses_the_checkouts_flags(probe_images):
    rc, result = run_module("image_probe", {"image": probe_images["src-editable-finder"],
                                            "flags": {"tensor_parallel_size": 2, "num_scheduler_steps": 10}})
    assert rc != 0
    assert "--num-scheduler-steps" in result["msg"] and "vLLM 0.16.0" in result["msg"]
