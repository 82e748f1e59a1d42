#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_firewall
short_description: Close the cluster's TCP ports to everyone but its members, in an nftables table of its own
version_added: 0.1.0
description:
  - Builds one nftables table (family C(inet), named O(table)) whose input chain drops new TCP connections to
    O(cluster_ports) and to the node's ephemeral port range (O(ephemeral_ports)) unless they come from O(members),
    and to O(api_ports) unless they come from O(members) or O(api_allowed_cidrs), and to O(metrics_ports) unless
    they come from O(members) or O(metrics_allowed_cidrs). Everything else passes the table
    untouched (policy accept); other tables (Docker's, the distribution's, an operator's) are never flushed or
    changed, and services the table does not list stay reachable.
  - Before anything is loaded, the connection O(ssh_client) -> O(ssh_ports) is checked against the new rules and the
    ruleset is validated by the kernel (C(nft -c -f -)), also in check mode. A cluster or API port that is an SSH
    port is refused.
  - Writes the ruleset to O(path) (the file a oneshot systemd unit loads at boot) and loads it as one transaction
    (the table is created, deleted and defined anew in one C(nft -f)), only when the file or the loaded table differ
    from the new ruleset. The loaded table carries a digest of its rules in its comment, so a table that was deleted
    or left stale is found and replaced.
  - With O(state=absent), deletes the table and removes O(path).
options:
  state:
    description: Whether the table is loaded (and persisted) or gone.
    type: str
    choices: [present, absent]
    default: present
  table:
    description: Name of the nftables table (family C(inet)) that this module owns.
    type: str
    default: vllmops
  path:
    description: The ruleset file.
    type: path
    default: /etc/vllmops/firewall.nft
  members:
    description:
      - Addresses or CIDRs of the cluster's members (every member's cluster and management address); they reach
        every port. Required with O(state=present).
    type: list
    elements: str
    default: []
  cluster_ports:
    description: TCP ports (C(6379)) and ranges (C(10002-10999)) only members reach.
    type: list
    elements: str
    default: []
  api_ports:
    description: TCP ports members and O(api_allowed_cidrs) reach.
    type: list
    elements: str
    default: []
  api_allowed_cidrs:
    description: Addresses or CIDRs besides the members that reach O(api_ports).
    type: list
    elements: str
    default: []
  metrics_ports:
    description: TCP ports of metrics exporters (node exporter) that members and O(metrics_allowed_cidrs) reach.
    type: list
    elements: str
    default: []
  metrics_allowed_cidrs:
    description: Addresses or CIDRs besides the members that reach O(metrics_ports) (a Prometheus server).
    type: list
    elements: str
    default: []
  ephemeral_ports:
    description:
      - The range NCCL, Gloo, ZMQ and torch bind when they ask the kernel for any free port, for members only.
      - C(auto) reads the node's C(net.ipv4.ip_local_port_range); C(LOW-HIGH) gives it; an empty string filters no
        ephemeral ports (those listeners are then open to everyone).
    type: str
    default: auto
  ssh_ports:
    description: TCP ports SSH is reached on; never filtered.
    type: list
    elements: int
    default: [22]
  ssh_client:
    description:
      - The controller's address as this node sees it (the first field of the SSH session's C(SSH_CLIENT)). When set,
        the module refuses to load rules that would drop its connections to O(ssh_ports).
    type: str
  header:
    description: Comment lines written at the top of O(path).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Builds and validates the ruleset (C(nft -c)) and reports whether it would be loaded; loads nothing.
  diff_mode:
    support: full
    description: The ruleset file before and after.
  idempotent:
    support: full
    description: Loads nothing when the file and the loaded table already hold the ruleset.
requirements:
  - nftables 0.9.7 or newer (C(nft)) on the node, and a kernel with nf_tables, 5.10 or newer (table comments)
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Close Ray's and vLLM's ports to everyone but the members
  vllmops.cluster.cluster_firewall:
    members: [10.0.0.1, 10.0.0.2, 192.168.1.11, 192.168.1.12]
    cluster_ports: [6379, 6800, 6801, 10002-10999, 29501]
    api_ports: [8000]
    api_allowed_cidrs: [192.168.1.0/24]
    ssh_ports: [22]
    ssh_client: "{{ ansible_env.SSH_CLIENT.split()[0] }}"

- name: Remove the table and its file
  vllmops.cluster.cluster_firewall:
    state: absent
"""

RETURN = r"""
policy:
  description: What the table does (members, API clients, filtered and API ports, the digest).
  returned: state=present
  type: dict
ruleset:
  description: The ruleset file's text.
  returned: state=present
  type: str
live:
  description: The table as it was loaded before this run, C(current), C(stale) (other rules) or C(absent).
  returned: always
  type: str
validated:
  description: Whether the kernel accepted the ruleset (C(nft -c)); false when nft is not installed yet in check mode.
  returned: state=present
  type: bool
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.firewall import (
    PORT_RANGE,
    FirewallError,
    build_policy,
    describe,
    digest,
    live_digest,
    read_port_range,
    render,
    verdict,
)


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _live(module, nft, table):
    """The loaded table's listing, or None when it is not loaded."""
    rc, out, _err = module.run_command([nft, "list", "table", "inet", table])
    return out if rc == 0 else None


def _write(module, path, text):
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".firewall-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def _absent(module, nft, params):
    listing = _live(module, nft, params["table"]) if nft else None
    on_disk = _read(params["path"])
    changed = listing is not None or on_disk is not None
    if changed and not module.check_mode:
        if listing is not None:
            rc, _out, err = module.run_command([nft, "delete", "table", "inet", params["table"]])
            if rc != 0:
                module.fail_json(msg=f"deleting the table inet {params['table']}: {err.strip()}", rc=rc)
        if on_disk is not None:
            os.unlink(params["path"])
    module.exit_json(changed=changed, live="absent" if listing is None else "stale",
                     diff={"before": on_disk or "", "after": "", "before_header": params["path"]})


def _ephemeral(module, setting):
    if setting != "auto":
        return setting
    try:
        text = read_port_range()
    except FirewallError as err:
        module.fail_json(msg=f"reading the ephemeral port range: {err}; set firewall_ephemeral_ports (LOW-HIGH) or ''")
    if not text:
        module.fail_json(msg=f"reading the ephemeral port range: {PORT_RANGE} is missing; set it (LOW-HIGH) or ''")
    return text


def _present(module, nft, params):
    try:
        policy = build_policy(members=params["members"], cluster_ports=params["cluster_ports"],
                              api_ports=params["api_ports"], api_sources=params["api_allowed_cidrs"],
                              ephemeral_ports=_ephemeral(module, params["ephemeral_ports"]),
                              protected_ports=params["ssh_ports"], table=params["table"],
                              metrics_ports=params["metrics_ports"], metrics_sources=params["metrics_allowed_cidrs"])
    except FirewallError as err:
        module.fail_json(msg=f"building the firewall: {err}")
    client = params["ssh_client"]
    if client:
        try:
            blocked = [port for port in params["ssh_ports"] if verdict(policy, client, port) != "accept"]
        except ValueError:
            module.fail_json(msg=f"checking the controller's SSH session: {client!r} is not an IP address")
        if blocked:
            module.fail_json(msg=f"refusing to load the firewall: it would drop the controller's SSH connections "
                                 f"from {client} to port {blocked[0]}; add that port to ssh_ports")
    ruleset = render(policy, params["header"])
    on_disk = _read(params["path"])
    listing = _live(module, nft, params["table"]) if nft else None
    live = "absent" if listing is None else "current" if live_digest(listing) == digest(policy) else "stale"
    validated = False
    if nft:
        rc, _out, err = module.run_command([nft, "-c", "-f", "-"], data=ruleset, binary_data=True)
        if rc != 0:
            module.fail_json(msg=f"the kernel refuses the firewall's ruleset (nft -c): {err.strip()}", rc=rc, ruleset=ruleset)
        validated = True
    elif not module.check_mode:
        module.fail_json(msg="nft is not installed: install nftables first (the firewall role does)")
    else:
        module.warn("nft is not installed yet: the ruleset is not validated (its installation is only predicted)")
    changed = on_disk != ruleset or live != "current"
    if changed and not module.check_mode:
        if on_disk != ruleset:
            _write(module, params["path"], ruleset)
        rc, _out, err = module.run_command([nft, "-f", params["path"]])
        if rc != 0:
            module.fail_json(msg=f"loading {params['path']} (nft -f): {err.strip()}", rc=rc)
    module.exit_json(changed=changed, live=live, validated=validated, ruleset=ruleset, policy=describe(policy),
                     diff={"before": on_disk or "", "after": ruleset, "before_header": params["path"],
                           "after_header": params["path"]})


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            table=dict(type="str", default="vllmops"),
            path=dict(type="path", default="/etc/vllmops/firewall.nft"),
            members=dict(type="list", elements="str", default=[]),
            cluster_ports=dict(type="list", elements="str", default=[]),
            api_ports=dict(type="list", elements="str", default=[]),
            api_allowed_cidrs=dict(type="list", elements="str", default=[]),
            metrics_ports=dict(type="list", elements="str", default=[]),
            metrics_allowed_cidrs=dict(type="list", elements="str", default=[]),
            ephemeral_ports=dict(type="str", default="auto"),
            ssh_ports=dict(type="list", elements="int", default=[22]),
            ssh_client=dict(type="str"),
            header=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANGUAGE": "C", "LC_ALL": "C"}
    nft = module.get_bin_path("nft")
    if module.params["state"] == "absent":
        _absent(module, nft, module.params)
    _present(module, nft, module.params)


if __name__ == "__main__":
    main()
