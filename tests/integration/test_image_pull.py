"""The image role's pull path against a real registry (Debian's docker-registry on 127.0.0.1).

The role runs on localhost with ansible-playbook, as it runs on a node: the
node lacks the image, pulls it, probes it; a re-run pulls nothing; a name the
registry does not have fails with the node, Docker's reason and what to try."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests/sandbox"))


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def registry_image(probe_images):
    """(name in the registry, its image ID); the name is absent locally when a test starts."""
    from registry import LocalRegistry

    source = probe_images["vllm-0.10.2"]
    with LocalRegistry() as address:
        name = f"{address}/vllmops-test/pull-demo:0.10.2"
        assert docker("tag", source, name).returncode == 0
        pushed = docker("push", "--quiet", name)
        assert pushed.returncode == 0, pushed.stderr
        image_id = docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
        yield name, image_id
        docker("image", "rm", name)


@pytest.fixture
def absent(registry_image):
    name, image_id = registry_image
    docker("image", "rm", name)
    return name, image_id


def run_role(tmp_path, image_name: str, check: bool = False) -> tuple[int, str, dict]:
    book = tmp_path / "pull.yml"
    book.write_text(json.dumps([{
        "name": "The image on this node", "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": "vllmops.cluster.image", "vars": {"image_name": image_name, "image_source": "pull"}}],
        "post_tasks": [{"ansible.builtin.debug": {"msg": "VLLM={{ image_facts.vllm.version | default('none') }}"}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    argv = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
            str(book)] + (["--check"] if check else [])
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    recap = proc.stdout.rsplit("PLAY RECAP", 1)[-1]
    counts = {key: int(value) for key, value in
              (item.split("=") for item in recap.split() if "=" in item and item.split("=")[1].isdigit())}
    return proc.returncode, " ".join(proc.stdout.split()), counts  # messages wrap over lines


def local_id(name: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()


def test_a_node_without_the_image_pulls_it_and_probes_it(tmp_path, absent):
    name, image_id = absent
    rc, out, counts = run_role(tmp_path, name)
    assert rc == 0, out[-3000:]
    assert local_id(name) == image_id
    assert counts["changed"] == 1, out[-3000:]
    assert f"{name} on localhost: {image_id[:19]} pulled" in out, out[-3000:]
    assert "VLLM=0.10.2" in out


def test_a_rerun_pulls_nothing(tmp_path, registry_image):
    name, image_id = registry_image
    if local_id(name) != image_id:
        assert docker("pull", "--quiet", name).returncode == 0
    rc, out, counts = run_role(tmp_path, name)
    assert rc == 0, out[-3000:]
    assert counts["changed"] == 0, out[-3000:]
    assert f"{name} on localhost:" not in out  # no pull to report
    assert "VLLM=0.10.2" in out


def test_check_mode_says_it_would_pull_and_pulls_nothing(tmp_path, absent):
    name, _ = absent
    rc, out, counts = run_role(tmp_path, name, check=True)
    assert rc == 0, out[-3000:]
    assert f"localhost would pull {name}" in out
    assert counts["changed"] == 1
    assert local_id(name) == ""


def test_a_tag_the_registry_lacks_fails_with_the_reason(tmp_path, registry_image):
    name, _ = registry_image
    missing = name.rsplit(":", 1)[0] + ":no-such-tag"
    rc, out, _ = run_role(tmp_path, missing)
    assert rc != 0
    assert f"Could not pull {missing} on localhost" in out
    assert "not found" in out or "manifest unknown" in out
    assert "docker login" in out and "image_archive" in out
