"""The firewall's systemd units, rendered from the roles' templates as Ansible renders them (trim_blocks): the
table survives a stop or restart of the distribution's nftables.service, and no container of ours starts
while it is not loaded (issue 38: the firewall failed open)."""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2.nativetypes import NativeEnvironment

ROLES = Path(__file__).resolve().parents[3] / "roles"
VLLMOPS = yaml.safe_load((ROLES / "vllmops/defaults/main.yml").read_text())
FIREWALL_VARS = yaml.safe_load((ROLES / "firewall/vars/main.yml").read_text())
DCGM_UNIT = yaml.safe_load((ROLES / "metrics_exporters/defaults/main.yml").read_text())["metrics_exporters_dcgm_unit"]


def _environment(cls=jinja2.Environment, templates=None):
    env = cls(loader=jinja2.FileSystemLoader(str(templates)) if templates else None, trim_blocks=True,
              undefined=jinja2.ChainableUndefined, keep_trailing_newline=True)
    env.filters.update(bool=lambda value: str(value).lower() in ("true", "yes", "1"),
                       b64decode=lambda value: base64.b64decode(value).decode(), from_json=json.loads)
    return env


def _firewall_vars() -> dict:
    """roles/firewall/vars/main.yml resolved against roles/vllmops' defaults, as Ansible would."""
    values = {"ansible_managed": "Ansible managed", **VLLMOPS}
    for name, value in FIREWALL_VARS.items():
        values[name] = NativeEnvironment().from_string(str(value)).render(**values) if "{{" in str(value) else value
    return values


def _render(role: str, template: str, **variables) -> str:
    return _environment(templates=ROLES / role / "templates").get_template(template).render(**variables)


def _unit(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value assigned (systemd's own syntax: comments, repeated keys, \\ continuations)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _words(values: list[str]) -> list[str]:
    return [word for value in values for word in value.split()]


@pytest.fixture(scope="module")
def firewall():
    variables = _firewall_vars()
    return variables, _unit(_render("firewall", "vllmops-firewall.service.j2", **variables))


@pytest.fixture(scope="module")
def dropin():
    variables = _firewall_vars()
    return variables, _unit(_render("firewall", "nftables-vllmops-firewall.conf.j2", **variables))


def _container(**variables) -> dict:
    return _unit(_render("vllmops", "vllmops-container.service.j2", **{
        **VLLMOPS, "ansible_managed": "Ansible managed",
        "vllmops_unit": {"name": "vllmops-vllm", "image_id": "sha256:0", "entrypoint": "vllm"}, **variables}))


def test_stopping_or_restarting_nftables_does_not_stop_our_firewall(firewall):
    """PartOf=nftables.service stopped our unit with nftables.service (whose ExecStop flushes the ruleset), and
    nothing loaded the table again: the cluster's ports stayed open."""
    _, unit = firewall
    for binding in ("PartOf", "BindsTo", "Requisite", "Requires"):
        assert "nftables.service" not in _words(unit["Unit"].get(binding, [])), binding
    assert "nftables.service" in _words(unit["Unit"]["After"])


@pytest.mark.parametrize("command", ["ExecStartPost", "ExecReload", "ExecStopPost"])
def test_each_flush_by_nftables_service_is_followed_by_our_table(dropin, command):
    variables, unit = dropin
    loads = [value.lstrip("-") for value in unit["Service"].get(command, [])]
    assert f"/usr/sbin/nft -f {variables['_firewall_file']}" in loads
    assert variables["_firewall_nftables_dropin"].startswith("/etc/systemd/system/nftables.service.d/")


def test_a_failure_to_load_after_nftables_starts_does_not_flush_every_table(dropin):
    """A failed ExecStartPost makes systemd stop nftables.service, whose ExecStop is `nft flush ruleset`."""
    _, unit = dropin
    assert all(value.startswith("-") for value in unit["Service"]["ExecStartPost"])


def _pre_start(**variables) -> list[str]:
    return _container(**variables)["Service"]["ExecStartPre"]


def test_no_container_of_ours_starts_while_the_table_is_not_loaded(firewall):
    """At boot the containers started whether or not the firewall had loaded. The check is on the table itself
    (a flush or `nft delete table` leaves the unit active), and fails the start, which Restart= retries."""
    variables, unit = firewall
    check = f"/bin/sh -c 'exec /usr/sbin/nft list table inet {variables['_firewall_table']} >/dev/null'"
    pre_start = _pre_start(firewall_enabled=True)
    assert pre_start[0] == check  # first, and without "-": its failure stops the start
    assert _container(firewall_enabled=True)["Service"]["Restart"] == ["always"]
    # ...and after the firewall's unit: at boot the table is loaded first
    before = _words(unit["Unit"]["Before"])
    for name in (*VLLMOPS["vllmops_units"].values(), DCGM_UNIT):
        assert f"{name}.service" in before, name
    assert "docker.service" in before


def test_the_table_check_is_one_shell_command_silent_when_the_table_is_there():
    """systemd passes the quoted command to the shell as one argument; the table's listing goes nowhere (the
    journal would get it at every start), nft's error when it is missing stays."""
    argv = shlex.split(_pre_start(firewall_enabled=True)[0])
    assert argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3
    assert shlex.split(argv[2]) == ["exec", "/usr/sbin/nft", "list", "table", "inet", VLLMOPS["vllmops_firewall_table"],
                                    ">/dev/null"]


def test_without_our_firewall_the_containers_do_not_check_for_it():
    assert not any("nft" in command for command in _pre_start(firewall_enabled=False))
