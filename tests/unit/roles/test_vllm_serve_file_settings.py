"""Every setting the vllm_serve role writes into a unit or environment file is checked for control characters
(tasks/validate.yml checks _vllm_serve_file_settings): a setting a template starts to name is not forgotten."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "vllm_serve"
CHECKED = set(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["_vllm_serve_file_settings"])
# What the files name under another name, and the settings it comes from.
DERIVED = {
    "_vllm_serve_name": {"vllm_serve_served_model_name", "vllm_serve_model"},
    # Each rank's command, which tasks/validate.yml puts into the plan: the model's path and vllm serve's flags.
    "vllmops_plan.commands": {"vllm_serve_model", "vllm_serve_model_dir", "vllm_serve_args", "vllm_serve_host",
                              "vllm_serve_port", "vllm_serve_served_model_name"},
    "_vllm_serve_health_url": {"vllm_serve_host", "vllm_serve_port"},
    "vllmops_api_key": {"vllm_serve_api_key"},
}


def _named(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])(_?vllm_serve_\w+|vllmops_api_key|vllmops_plan\.commands)", text))


def test_every_setting_written_into_a_unit_or_environment_file_is_checked():
    # The role's templates, and what tasks/unit.yml passes to the shared unit template (vllmops_unit).
    sources = [*(ROLE / "templates").glob("*.j2"), ROLE / "tasks" / "unit.yml"]
    named = set().union(*(_named(path.read_text()) for path in sources))
    public = {name for name in named if name.startswith("vllm_serve_")}
    assert public, named
    assert public <= CHECKED, sorted(public - CHECKED)
    for name, settings in DERIVED.items():
        assert name in named, f"{name} is no longer in the files: update DERIVED"
        assert settings <= CHECKED, (name, sorted(settings - CHECKED))


def test_preflight_refuses_control_characters_before_anything_changes():
    # deploy.yml's preflight runs before any play changes a node: the command-line settings and vLLM's environment
    # are checked there (the role checks every setting it writes again, for a run of the role alone).
    tasks = yaml.safe_load((ROLE.parent / "preflight/tasks/main.yml").read_text())
    checks = [task for task in tasks if "control_characters" in str(task.get("vars", {}))]
    assert len(checks) == 1, [task.get("name") for task in tasks]
    checked = str(checks[0]["vars"])
    assert "_preflight_command_line_settings" in checked and "vllm_serve_env" in checked, checked
    assert "Nothing was changed on any host" in checks[0]["ansible.builtin.assert"]["fail_msg"]
