"""The vllmops role's shared task files, called the way the roles call them
(`tasks_from: unit`, by entry point): their argument specs are checked, so a
caller that leaves out what the unit needs is stopped with a clear message
before anything is written."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: vllmops.cluster.vllmops
        tasks_from: unit
      vars:
        vllmops_unit: {unit}
"""


def write_unit(tmp_path, unit: str):
    (tmp_path / "play.yml").write_text(PLAY.format(unit=unit))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    return subprocess.run([str(BIN / "ansible-playbook"), "--check", "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_unit_without_its_image_is_refused_by_the_argument_spec(tmp_path):
    proc = write_unit(tmp_path, "{name: vllmops-test-unit, template: vllmops-ray.service.j2, entrypoint: ray}")
    assert proc.returncode != 0
    assert "Validating arguments against arg spec 'unit'" in proc.stdout
    assert "image_id" in proc.stdout
    assert "Write our systemd unit" not in proc.stdout  # stopped before the template


def test_a_unit_with_what_it_needs_passes_the_argument_spec(tmp_path):
    proc = write_unit(tmp_path, "{name: vllmops-test-unit, template: /nonexistent.j2, image_id: 'sha256:abc', "
                                "entrypoint: ray, restart_sec: '3'}")
    assert "Validating arguments against arg spec 'unit'" in proc.stdout
    assert "Write our systemd unit" in proc.stdout, proc.stdout[-2000:]  # went on to the template (missing here)


def test_the_roles_call_the_shared_task_files_by_entry_point():
    # `tasks_from: unit.yml` would run the same tasks without checking the spec.
    by_file = [f"{path.relative_to(ROOT)}:{number}"
               for path in [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml")]
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if line.strip() in {f"tasks_from: {name}.yml" for name in ("unit", "remove_units", "remove_containers")}]
    assert by_file == []
