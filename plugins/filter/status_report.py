# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: status_report
short_description: The status table of the cluster and its verdict, OK, DEGRADED or DOWN
version_added: 0.1.0
description:
  - Renders what every node reported (C(playbooks/status.yml) gathers it) as one row per node, a line with the
    served model and the backend, and a verdict.
  - The verdict is C(DEGRADED) when a node did not answer, a node is not in Ray or Ray counts another number of
    alive nodes (Ray backend), a machine the inventory does not name is in the cluster (an alive Ray node, or
    connected to a node's cluster ports, O(peers)), a node that runs vLLM has its unit down, the nodes hold
    different images (compared by content ID, which the same image has on Docker's classic and containerd image
    stores; the C(IMAGE) column shows it), or the head's API does not list its models;
    also when the head watchdog has a record but its timer does not run, vLLM refuses its check (a key or model name
    it does not know), or it reached its restart limit while vLLM still fails; and when the nodes serve different
    releases, or a node's files differ from the release it recorded.
  - With O(health), lines on the head watchdog - its timer, the last check, the last event (when, what it saw, what
    it did, and when the service answered again).
  - With O(fleet) (several services, C(vllmops_services)), a second table - one line per service (its model, layout,
    replicas answering of all, and whether the API lists it) and one indented line per replica (its nodes, port,
    whether it answers C(/health) and the state of each of its units). The verdict is then C(DOWN) when a service has
    no replica answering, C(DEGRADED) when a replica does not answer (its service still serves), a unit of a replica
    is not active, the API does not list a service, or for any reason above that is not the single service's own (the
    Ray, rank, watchdog, model and release checks are not made); else C(OK).
positional: _input
options:
  _input:
    description:
      - Host name to what the host reported; null, or left out while O(hosts) names it, for a host that did not
        answer. Each is a mapping with C(address) (the cluster address, C(VLLM_HOST_IP) of cluster.env), C(gpus) (list of GPU names),
        C(image_id) (the image's ID on that node), optionally C(image_content_id) (its content ID, the same on
        Docker's classic and containerd image stores), C(vllm_version) and C(units), the state
        C(systemctl is-active) gives for each of
        C(ray_head), C(ray_worker) and C(vllm) (the units of the Ray head, a Ray worker and vLLM); optionally
        C(model), the model role's manifest on the node - C(digest) (empty without one) and C(stale) (files
        changed since it); optionally C(release), what M(vllmops.cluster.release) says of the node - C(current),
        C(last_good), C(previous) (release IDs) and C(matches) (its files are those the current release recorded).
      - With O(fleet), C(units) maps each unit of the services the host runs to its state (C(systemctl is-active)),
        and C(replicas) maps each replica the host heads to the HTTP status its C(/health) answered the host;
        C(watchdogs) has the parallel lists C(ids), C(units), C(timers) and C(records) of the watchdogs of those
        replicas (their IDs, unit names, C(systemctl is-active) of their timers, their JSON records)
        (-1 when nothing answered).
    type: dict
    required: true
  hosts:
    description: Every host of the cluster, in the order of the table; those missing from the input did not answer.
      Default the input's hosts.
    type: list
    elements: str
  head:
    description: The head node.
    type: str
    required: true
  plan:
    description: The plan (C(vllmops_plan)); without one the table assumes the Ray backend.
    type: dict
  ray:
    description: The result of M(vllmops.cluster.ray_cluster_info) on the head (C(nodes), C(alive_nodes), C(gpus)).
    type: dict
  api:
    description: The result of M(ansible.builtin.uri) asking the head's C(/v1/models) (C(status), C(json)).
    type: dict
  health:
    description:
      - The head watchdog as the head reports it - C(unit) (its name), C(timer) (what C(systemctl is-active) says of
        its timer) and C(record) (the text of its JSON state file; empty when there is none). A record that does not
        parse reads as none.
      - Left out, or without a record while the timer does not run (no head watchdog), the report has no line on it.
    type: dict
  peers:
    description:
      - Host name to the addresses M(vllmops.cluster.cluster_peers) found connected to its cluster ports that are
        not members (its C(unknown)). An address of a node of the input is not counted.
      - These and the alive Ray nodes whose address no node of the input has are the cluster's extra members; one
        problem names them all, with how to remove them (C(playbooks/remove_node.yml)).
    type: dict
  fleet:
    description:
      - The services' plan (C(vllmops_fleet), M(vllmops.cluster.fleet_plan)'s C(fleet)); the report is then per service
        and replica, and O(plan), O(ray) and O(health) are not read. O(api) is C(/v1/models) through the API proxy.
    type: dict
"""

EXAMPLES = r"""
- name: Print the cluster's status
  ansible.builtin.debug:
    msg: "{{ report.text }}"
  vars:
    report: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'node_status')))
         | vllmops.cluster.status_report(hosts=ansible_play_hosts_all, head='spark-1', plan=vllmops_plan,
                                         ray=ray_info, api=models, peers={'spark-1': ['10.0.0.9']}) }}

- name: Print the status of several services (vllmops_services)
  ansible.builtin.debug:
    msg: "{{ report.text }}"
  vars:
    report: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'node_status')))
         | vllmops.cluster.status_report(hosts=ansible_play_hosts_all, head='spark-1', fleet=vllmops_fleet, api=models) }}
"""

RETURN = r"""
_value:
  description: The report.
  type: dict
  contains:
    lines:
      description: The table's header, one row per node, the served model and backend, the head watchdog's lines
        (with O(health)), the verdict.
      type: list
      elements: str
    text:
      description: The lines joined by newlines.
      type: str
    verdict:
      description: C(OK) or C(DEGRADED); with O(fleet) also C(DOWN) (a service with no replica answering).
      type: str
    problems:
      description: Why it is DEGRADED or DOWN, one phrase per problem; empty when OK.
      type: list
      elements: str
    document:
      description:
        - The same for scripts and monitors (C(status.yml -e status_format=json)); its JSON Schema is
          C(docs/status.schema.json) (C(schema) C(vllmops.status/1)); C(extra_members) lists the machines in the
          cluster the inventory does not name (C(address), C(seen_as) - C(ray) and/or C(peer)); with O(fleet),
          C(services) lists each service with its replicas, their units and whether they answer.
      type: dict
"""

import ipaddress
import json

ROW = "%-26s %-6s %-12s %-10s %-20s %-9s %-6s %s"
HEADER = ("NODE", "ROLE", "CLUSTER IP", "GPUS", "IMAGE, VLLM", "RAY UNIT", "IN RAY", "VLLM UNIT")
# Several services: a line per service, an indented one per replica.
SERVICE_ROW = "%-26s %-26s %-6s %-9s %s"
SERVICE_HEADER = ("SERVICE, REPLICA", "MODEL, NODES", "PORT", "READY", "LAYOUT, UNITS")
REMOVE_HINT = "remove with playbooks/remove_node.yml -e node=NAME -e node_address=ADDRESS"


def _alive_addresses(ray: dict) -> set[str]:
    return {node.get("address") for node in ray.get("nodes") or [] if node.get("alive")}


def _gpus(names: list[str]) -> str:
    model = names[0].replace("NVIDIA ", "") if names else ""
    return f"{len(names)} {model}".strip()


def _image(node: dict) -> str:
    """The image's content ID where the node says it (the same image has different image IDs on Docker's classic
    and containerd image stores), else its image ID."""
    image_id = node.get("image_content_id") or node.get("image_id") or ""
    short = image_id.split(":", 1)[-1][:12] if image_id else "absent"
    return f"{short} {node.get('vllm_version') or '-'}"


def _image_problems(nodes: dict) -> list[str]:
    """The image must be the same on every node that has one, by content ID."""
    held = {host: node["image_content_id"] for host, node in nodes.items()
            if node is not None and node.get("image_content_id")}
    if len(set(held.values())) <= 1:
        return []
    return ["the image differs between the nodes (by content ID): "
            + ", ".join(f"{host} {content[:19]}" for host, content in held.items())]


class _Cluster:
    """What the table needs to know about the cluster as a whole."""

    def __init__(self, head, plan, ray, api, fleet=None):
        self.head = head
        self.fleet = fleet or None
        # Several services have no single-service plan, and run on vLLM's own executor, without Ray.
        self.plan = (plan or None) if self.fleet is None else None
        self.on_ray = self.fleet is None and (self.plan is None or self.plan.get("backend") == "ray")
        self.ray = ray or {}
        self.alive = _alive_addresses(self.ray)
        self.api = api or {}
        self.answers = self.api.get("status") == 200

    def member(self, host: str) -> dict:
        return ((self.plan or {}).get("members") or {}).get(host) or {}

    def role(self, host: str) -> str:
        role = "head" if host == self.head else "worker"
        return role if self.on_ray or self.fleet else f"{role} {self.member(host).get('rank', '?')}"

    def runs_vllm(self, host: str) -> bool:
        if self.fleet:
            return bool((self.fleet.get("hosts") or {}).get(host))
        return host == self.head or (not self.on_ray and bool(self.member(host).get("runs_vllm")))

    def models(self) -> list[str]:
        """The models the API lists (/v1/models), when it answers."""
        data = ((self.api.get("json") or {}).get("data") or []) if self.answers else []
        return [str(model.get("id")) for model in data]

    def served(self) -> str:
        return ", ".join(self.models()) or "none answering"


def _row(host: str, node: dict | None, cluster: _Cluster) -> tuple:
    if node is None:
        return (host, cluster.role(host), "-", "?", "?", "?", "?", "host unreachable")
    units = node.get("units") or {}
    address = node.get("address") or "-"
    ray_unit, in_ray = "-", "-"
    if cluster.on_ray:
        ray_unit = units.get("ray_head" if host == cluster.head else "ray_worker", "?")
        in_ray = "yes" if address in cluster.alive else "NO"
    vllm = "-"
    if cluster.fleet:
        if cluster.runs_vllm(host):
            states = [units.get(unit, "?") for unit in cluster.fleet["hosts"][host]]
            vllm = f"{states.count('active')}/{len(states)} active"
    elif cluster.runs_vllm(host):
        vllm = units.get("vllm", "?")
        if host == cluster.head:
            vllm += " healthy" if cluster.answers else " not answering"
    return (host, cluster.role(host), address, _gpus(node.get("gpus") or []), _image(node), ray_unit, in_ray, vllm)


def _address_order(address: str) -> tuple:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return (1, 0, 0, address)
    return (0, parsed.version, int(parsed), address)


def _extra_members(nodes: dict, cluster: _Cluster, peers: dict | None) -> list[dict]:
    """The machines in the cluster that no node of the inventory is: alive Ray nodes at another address, and
    peers on a node's cluster ports. One entry per address: address, seen_as (ray, peer), connected_to (hosts)."""
    inventory = {node.get("address") for node in nodes.values() if node is not None and node.get("address")}
    inventory |= {member.get("address") for member in ((cluster.plan or {}).get("members") or {}).values()
                  if isinstance(member, dict) and member.get("address")}
    extras: dict[str, dict] = {}
    if cluster.on_ray:
        for address in cluster.alive - inventory - {None, ""}:
            extras[str(address)] = {"address": str(address), "seen_as": ["ray"], "connected_to": []}
    for host, addresses in (peers or {}).items():
        for address in addresses or []:
            if not address or address in inventory:
                continue
            extra = extras.setdefault(str(address), {"address": str(address), "seen_as": [], "connected_to": []})
            if "peer" not in extra["seen_as"]:
                extra["seen_as"].append("peer")
            if host not in extra["connected_to"]:
                extra["connected_to"].append(host)
    return [extras[address] for address in sorted(extras, key=_address_order)]


def _extra_members_problem(extras: list[dict], unreachable: list[str]) -> list[str]:
    if not extras:
        return []
    named = []
    for extra in extras:
        seen = ["a Ray node"] if "ray" in extra["seen_as"] else []
        hosts = extra["connected_to"]
        if len(hosts) == 1:
            seen.append(f"connected to {hosts[0]}'s cluster ports")
        elif hosts:
            seen.append(f"connected to the cluster ports of {', '.join(hosts)}")
        named.append(f"{extra['address']} ({', '.join(seen)})")
    # A node that did not answer reported no address: it may be one of these.
    unless = f" (unless one is {', '.join(unreachable)}, which did not answer)" if unreachable else ""
    return [f"not in the inventory but in the cluster: {', '.join(named)}{unless} - {REMOVE_HINT}"]


def _problems(nodes: dict, rows: list[tuple], cluster: _Cluster, extras: list[dict]) -> list[str]:
    problems = []
    unreachable = [host for host, node in nodes.items() if node is None]
    if unreachable:
        problems.append(f"no answer from: {', '.join(unreachable)}")
    if cluster.on_ray:
        missing = [row[0] for row in rows if row[6] == "NO"]
        if missing:
            problems.append(f"not in Ray: {', '.join(missing)}")
        alive = int(cluster.ray.get("alive_nodes") or 0)
        if alive != len(nodes):
            problems.append(f"Ray counts {alive} alive node(s) for the {len(nodes)} of the inventory")
    problems += _extra_members_problem(extras, unreachable)
    if cluster.fleet:
        return problems + _image_problems(nodes)
    stopped = [host for host, node in nodes.items()
               if node is not None and cluster.runs_vllm(host) and (node.get("units") or {}).get("vllm") != "active"]
    if stopped:
        problems.append(f"vLLM {'not' if cluster.on_ray else 'rank not'} running on: {', '.join(stopped)}")
    problems += _image_problems(nodes)
    problems += _model_problems(nodes)
    if nodes.get(cluster.head) is not None and cluster.head not in stopped and not cluster.answers:
        problems.append(f"vLLM on {cluster.head} does not answer /v1/models (HTTP {cluster.api.get('status', '-')})")
    return problems


def _models(nodes: dict) -> dict:
    """host -> its model report, for the nodes that said anything of the model (each loads its part from its disk)."""
    return {host: node["model"] for host, node in nodes.items() if node is not None and isinstance(node.get("model"), dict)}


def _model_problems(nodes: dict) -> list[str]:
    """The model must be the same on every node, unchanged since its manifest (when there is one)."""
    models = _models(nodes)
    if not any(model.get("digest") for model in models.values()):
        return []  # no manifest anywhere: the model was not put there by the model role
    problems = []
    digests = {model.get("digest") or "" for model in models.values()}
    if len(digests) > 1:
        problems.append("the model differs between the nodes: " + ", ".join(
            f"{host} {(model.get('digest') or 'none')[:19]}" for host, model in models.items()))
    stale = [host for host, model in models.items() if model.get("stale")]
    if stale:
        problems.append(f"model files changed since their manifest on: {', '.join(stale)}")
    return problems


def _releases(nodes: dict) -> dict:
    """host -> what the release module said of the node (current, last_good, previous, matches)."""
    return {host: node["release"] for host, node in nodes.items()
            if node is not None and isinstance(node.get("release"), dict)}


def _release_problems(nodes: dict) -> list[str]:
    """Every node serves the same release, and serves it as recorded."""
    releases = _releases(nodes)
    if not any(release.get("current") for release in releases.values()):
        return []  # none recorded yet (a cluster deployed before releases, or never served)
    problems = []
    if len({release.get("current") or "" for release in releases.values()}) > 1:
        problems.append("the nodes serve different releases: " + ", ".join(
            f"{host} {release.get('current') or 'none'}" for host, release in releases.items()))
    edited = [host for host, release in releases.items() if release.get("matches") is False]
    if edited:
        problems.append(f"files of the release differ from its record on: {', '.join(edited)} (edited by hand, or a "
                        "switch that did not finish: deploy.yml, or playbooks/rollback.yml)")
    return problems


def _release_line(nodes: dict) -> list[str]:
    releases = list(_releases(nodes).values())
    currents = {release.get("current") or "" for release in releases}
    if len(currents) != 1 or "" in currents:
        return []
    first = releases[0]
    return [f"release: {first['current']} on every node (last good {first.get('last_good') or 'none'}, "
            f"previous {first.get('previous') or 'none'})"]


def _model_line(nodes: dict) -> list[str]:
    models = _models(nodes)
    digests = {model.get("digest") or "" for model in models.values()}
    if len(digests) == 1 and "" not in digests:
        return [f"model: {next(iter(digests))[:19]} on every node"]
    return []


def _record(health: dict) -> dict:
    record = health.get("record") or {}
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except ValueError:
            return {}
    return record if isinstance(record, dict) else {}


def _health(health: dict | None) -> tuple[list[str], list[str]]:
    """The head watchdog's lines and problems."""
    health = health or {}
    unit, timer, record = health.get("unit") or "the head watchdog", health.get("timer") or "?", _record(health)
    if not record and timer != "active":
        return [], []
    check = record.get("last_check") or {}
    if check.get("ok") is True:
        last = f"ok ({check.get('took', '?')} s)"
    elif check.get("ok") is False:
        last = f"FAILED: {check.get('what', '?')}; /health: {check.get('health', '?')}"
    else:
        last = check.get("what") or "none yet"
    lines = [f"head watchdog {unit}: timer {timer}; last check {record.get('checked_at', '-')}: {last}"]
    problems = []
    if timer != "active":
        problems.append(f"the head watchdog is not running ({unit}.timer {timer})")
    elif check.get("ok") is None and str(check.get("what", "")).startswith("completion refused"):
        problems.append(f"the head watchdog cannot check vLLM ({check['what'].split(' {')[0]})")
    event = record.get("last_event") or {}
    if event:
        after = f"; served again {event['recovered_after_s']:g} s later" if event.get("recovered_after_s") is not None else ""
        why = f"; the rank's log: {event['failure_class']}" if event.get("failure_class") else ""
        lines.append(f"last event {event.get('time', '?')}: saw {event.get('saw', '?')}; did {event.get('did', '?')}{after}{why}")
        if event.get("action") == "held" and check.get("ok") is False:
            problems.append(f"the head watchdog reached its restart limit ({event.get('restarts_in_window', '?')} in its "
                            "window) and no longer restarts vLLM")
    else:
        lines.append("last event: none (no restart so far)")
    return lines, problems


def _layout(layout: dict) -> str:
    text = " x ".join(f"{short} {layout.get(key, 1)}" for short, key in
                      (("TP", "tensor_parallel_size"), ("PP", "pipeline_parallel_size"), ("DP", "data_parallel_size")))
    return text + (", EP" if layout.get("enable_expert_parallel") else "")


def _health_text(status) -> str:
    """What a replica's /health answered its head: None when the head itself did not answer (nothing asked)."""
    if status is None:
        return "?"
    if status == 200:
        return "healthy"
    return "no answer" if status == -1 else f"HTTP {status}"


def _replica(replica: dict, nodes: dict) -> dict:
    """One replica as its hosts reported it: its units' states (None: the host did not answer) and its /health."""
    units = [{"host": unit["host"], "unit": unit["unit"],
              "state": ((nodes.get(unit["host"]) or {}).get("units") or {}).get(unit["unit"])} for unit in replica["units"]]
    status = ((nodes.get(replica["head"]) or {}).get("replicas") or {}).get(replica["id"])
    if isinstance(status, str) and status.lstrip("-").isdigit():
        status = int(status)  # a status that went through a template as text
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    return {"id": replica["id"], "head": replica["head"], "nodes": list(replica["nodes"]), "port": replica["port"],
            "units": units, "status": status, "healthy": status == 200,
            "watchdog": _watchdogs((nodes.get(replica["head"]) or {}).get("watchdogs")).get(replica["id"])}


def _watchdogs(found) -> dict:
    """Replica ID -> its watchdog (unit, timer state, record, and the lines and problems _health makes of them), from
    the parallel lists its head reported."""
    if not isinstance(found, dict):
        return {}
    watchdogs = {}
    lists = (found.get(key) or [] for key in ("ids", "units", "timers", "records"))
    for replica_id, unit, timer, record in zip(*lists, strict=False):  # shorter when a read failed
        lines, problems = _health({"unit": unit, "timer": timer, "record": record})
        record = _record({"record": record})
        watchdogs[replica_id] = {"unit": unit, "timer": timer, "checked_at": record.get("checked_at"),
                                 "last_check": record.get("last_check"), "last_event": record.get("last_event"),
                                 "lines": lines or [f"watchdog {unit}: timer {timer}; no check yet"], "problems": problems}
    return watchdogs


def _services(nodes: dict, cluster: _Cluster) -> list[dict]:
    """Every service of the fleet: its replicas, how many answer /health, and whether the API lists it."""
    listed = set(cluster.models())
    services = []
    for service in cluster.fleet.get("services") or []:
        replicas = [_replica(replica, nodes) for replica in service.get("replicas") or []]
        layout = service.get("layout") or {}
        services.append({"name": service["name"], "model": service.get("model") or "",
                         "layout": {key: layout.get(key, default) for key, default in
                                    (("tensor_parallel_size", 1), ("pipeline_parallel_size", 1), ("data_parallel_size", 1),
                                     ("data_parallel_size_local", 1), ("enable_expert_parallel", False))},
                         "replicas": replicas, "ready": sum(replica["healthy"] for replica in replicas),
                         "total": len(replicas), "listed": service["name"] in listed})
    return services


def _why(replica: dict) -> str:
    """Why a replica does not answer, as far as the report knows: its /health and its units that are not active."""
    asked = f"/health: {_health_text(replica['status'])}"
    why = [f"its head {replica['head']} did not answer" if replica["status"] is None else asked]
    why += [f"{unit['unit']} {unit['state'] or '?'}" for unit in replica["units"] if unit["state"] != "active"]
    return f"{replica['id']} on {', '.join(replica['nodes'])} ({'; '.join(why)})"


def _service_problems(services: list[dict], cluster: _Cluster) -> tuple[list[str], bool]:
    """The services' problems, and whether a service is down (no replica answering)."""
    problems, down = [], False
    for service in services:
        failing = [replica for replica in service["replicas"] if not replica["healthy"]]
        if failing and service["ready"] == 0:
            down = True
            problems.append(f"service {service['name']} is down, no replica answers: {', '.join(map(_why, failing))}")
        elif failing:
            problems.append(f"service {service['name']} serves on {service['ready']} of {service['total']} replicas, "
                            f"not answering: {', '.join(map(_why, failing))}")
        # A replica over several nodes may answer /health from its head while a rank on another node is gone.
        stopped = [f"{unit['unit']} on {unit['host']} ({unit['state'] or '?'})" for replica in service["replicas"]
                   if replica["healthy"] for unit in replica["units"] if unit["state"] != "active"]
        if stopped:
            problems.append(f"service {service['name']}: units not active in answering replicas: {', '.join(stopped)}")
        problems += [f"replica {replica['id']}: {problem.replace('the head watchdog', 'its watchdog')}"
                     for replica in service["replicas"] for problem in (replica["watchdog"] or {}).get("problems", [])]
    if not cluster.answers:
        problems.append(f"the API on {cluster.head} does not answer /v1/models (HTTP {cluster.api.get('status', '-')}): "
                        "clients reach no service")
    else:
        unlisted = [service["name"] for service in services if not service["listed"]]
        if unlisted:
            problems.append(f"the API on {cluster.head} does not list: {', '.join(unlisted)} (clients cannot reach them)")
    return problems, down


def _service_lines(services: list[dict]) -> list[str]:
    lines = [SERVICE_ROW % SERVICE_HEADER]
    for service in services:
        ports = ",".join(str(port) for port in sorted({replica["port"] for replica in service["replicas"]})) or "-"
        listed = "listed in /v1/models" if service["listed"] else "NOT listed in /v1/models"
        lines.append(SERVICE_ROW % (service["name"], service["model"], ports, f"{service['ready']}/{service['total']}",
                                    f"{_layout(service['layout'])}; {listed}"))
        for replica in service["replicas"]:
            units = ", ".join(f"{unit['unit']} {unit['state'] or '?'}" for unit in replica["units"])
            lines.append(SERVICE_ROW % (f"  {replica['id']}", ",".join(replica["nodes"]), replica["port"],
                                        _health_text(replica["status"]), units))
            lines += [f"      {line}" for line in (replica["watchdog"] or {}).get("lines", [])]
    return lines


def _service_document(service: dict) -> dict:
    return {"name": service["name"], "model": service["model"], "layout": dict(service["layout"]),
            "listed": service["listed"], "ready": service["ready"], "total": service["total"],
            "replicas": [{"id": replica["id"], "nodes": list(replica["nodes"]), "port": replica["port"],
                          "units": [dict(unit) for unit in replica["units"]], "healthy": replica["healthy"],
                          "http_status": replica["status"], "watchdog": _watchdog_document(replica["watchdog"])}
                         for replica in service["replicas"]]}


def _watchdog_document(watchdog: dict | None) -> dict | None:
    if not watchdog:
        return None
    return {key: watchdog[key] for key in ("unit", "timer", "checked_at", "last_check", "last_event")}


def _node_document(host: str, node: dict | None, row: tuple, cluster: _Cluster) -> dict:
    rank = cluster.member(host).get("rank")
    return {
        "name": host,
        "role": "head" if host == cluster.head else "worker",
        "rank": rank if isinstance(rank, int) and not cluster.on_ray else None,
        "reachable": node is not None,
        "address": (node or {}).get("address") or None,
        "gpus": list((node or {}).get("gpus") or []),
        "image_id": (node or {}).get("image_id") or None,
        "image_content_id": (node or {}).get("image_content_id") or None,
        "vllm_version": (node or {}).get("vllm_version") or None,
        "units": {name: str(state) for name, state in ((node or {}).get("units") or {}).items()},
        "in_ray": None if node is None or not cluster.on_ray else row[6] == "yes",
        "runs_vllm": cluster.runs_vllm(host),
        "model_digest": ((node or {}).get("model") or {}).get("digest") or None,
        # Several services keep no release of the one service on the node.
        "release": None if cluster.fleet else _release_document((node or {}).get("release")),
    }


def _release_document(release) -> dict | None:
    if not isinstance(release, dict):
        return None
    matches = release.get("matches")
    return {"current": release.get("current") or None, "last_good": release.get("last_good") or None,
            "previous": release.get("previous") or None, "matches": matches if isinstance(matches, bool) else None}


def _document(nodes: dict, rows: list[tuple], cluster: _Cluster, health: dict | None, verdict: str,
              problems: list[str], extras: list[dict], services: list[dict] | None = None) -> dict:
    record = _record(health or {})
    watchdog = None
    if record or (health or {}).get("timer") == "active":
        watchdog = {"unit": (health or {}).get("unit") or None, "timer": (health or {}).get("timer") or None,
                    "last_check": record.get("last_check") or None, "checked_at": record.get("checked_at") or None,
                    "last_event": record.get("last_event") or None}
    status = cluster.api.get("status")
    if cluster.fleet:
        backend, plan = "mp", cluster.fleet.get("summary") or None  # every replica runs on vLLM's own executor
    else:
        backend = (cluster.plan or {}).get("backend") or ("ray" if cluster.on_ray else None)
        plan = (cluster.plan or {}).get("summary") or None
    document = {
        "schema": "vllmops.status/1",
        "verdict": verdict,
        "problems": problems,
        "head": cluster.head,
        "backend": backend,
        "plan": plan,
        "api": {"answering": cluster.answers, "status": status if isinstance(status, int) else None,
                "models": cluster.models()},
        "ray": {"alive_nodes": int(cluster.ray.get("alive_nodes") or 0), "gpus": cluster.ray.get("gpus") or 0}
        if cluster.on_ray else None,
        "nodes": [_node_document(host, node, row, cluster) for (host, node), row in zip(nodes.items(), rows, strict=True)],
        "head_watchdog": watchdog,
        "extra_members": [{"address": extra["address"], "seen_as": list(extra["seen_as"])} for extra in extras],
    }
    if services is not None:
        document["services"] = [_service_document(service) for service in services]
    return document


def _fleet_report(nodes: dict, rows: list[tuple], cluster: _Cluster, peers: dict | None) -> dict:
    """Several services: the node table, a line per service and replica, and OK, DEGRADED or DOWN."""
    services = _services(nodes, cluster)
    extras = _extra_members(nodes, cluster, peers)
    service_problems, down = _service_problems(services, cluster)
    problems = _problems(nodes, rows, cluster, extras) + service_problems
    verdict = "DOWN" if down else "DEGRADED" if problems else "OK"
    ready = sum(service["ready"] for service in services)
    total = sum(service["total"] for service in services)
    lines = [ROW % HEADER, *(ROW % row for row in rows), *_service_lines(services),
             f"served model: {cluster.served()}; {len(services)} service(s), {ready}/{total} replicas answering",
             f"{verdict}: {'; '.join(problems)}" if problems else verdict]
    return {"lines": lines, "text": "\n".join(lines), "verdict": verdict, "problems": problems,
            "document": _document(nodes, rows, cluster, None, verdict, problems, extras, services)}


def status_report(nodes, head, hosts=None, plan=None, ray=None, api=None, health=None, peers=None, fleet=None):
    nodes = dict(nodes or {})
    if hosts is not None:
        nodes = {host: nodes.get(host) for host in hosts}
    cluster = _Cluster(head, plan, ray, api, fleet)
    rows = [_row(host, node, cluster) for host, node in nodes.items()]
    if cluster.fleet:
        return _fleet_report(nodes, rows, cluster, peers)
    if cluster.on_ray:
        backend = f"Ray: {int(cluster.ray.get('alive_nodes') or 0)} alive node(s), {cluster.ray.get('gpus', 0)} GPU(s)"
    else:
        backend = cluster.plan.get("summary", "")
    health_lines, health_problems = _health(health)
    extras = _extra_members(nodes, cluster, peers)
    problems = _problems(nodes, rows, cluster, extras) + _release_problems(nodes) + health_problems
    verdict = "DEGRADED" if problems else "OK"
    lines = [ROW % HEADER, *(ROW % row for row in rows), f"served model: {cluster.served()}; {backend}",
             *_release_line(nodes), *_model_line(nodes), *health_lines,
             f"{verdict}: {'; '.join(problems)}" if problems else verdict]
    return {"lines": lines, "text": "\n".join(lines), "verdict": verdict, "problems": problems,
            "document": _document(nodes, rows, cluster, health, verdict, problems, extras)}


class FilterModule:
    def filters(self):
        return {"status_report": status_report}
