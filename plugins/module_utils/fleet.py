# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet: several services (vllmops_services), each a model with its own replicas, GPUs, ports and units.

Decided at once for the whole list, so that no two services can take one GPU or one port; a list that cannot
run is refused before anything changes, with one sentence naming the service, the hosts, the numbers and the fix.

How replicas are placed (deterministic for one inventory):

* Services are placed in the order they are listed. The GPUs a service lists under `gpus` for a host are the only
  ones it uses there, and no other service gets them; on its other hosts it may use every GPU nobody so lists.
* A replica needs TP x PP x DP GPUs. When a node has that many free, the replica runs on one node: a node holding
  no replica of this service yet, then the one with the most free GPUs, ties in inventory order.
* Otherwise it spans whole free nodes (none of the GPUs it may use there taken), in inventory order: k nodes
  giving g GPUs each, k x g = TP x PP x DP, the largest g that fits, since vLLM's multi-node modes run the same
  number of ranks on every node. With DP > 1 each node holds whole DP ranks (g a multiple of TP x PP,
  data_parallel_size_local = g / (TP x PP)); a service that sets data_parallel_size_local fixes g. The first
  replica of a service fixes the shape of the others.
* GPUs are taken lowest index first.
* A replica's API port is its service's `port`, or the lowest from base_port up that is not reserved, not any
  service's own `port` and not used on the replica's nodes. A replica over several nodes also gets, distinct in
  the fleet, a master port (DP 1: vLLM's --nnodes mode) or a DP RPC port (DP > 1), from their bases up.
* Units are <unit_prefix>-<suffix>-<replica> (the suffix is the name with . and _ as -); on the replica's other
  nodes they end in -r<node rank>.
"""

from __future__ import annotations

import re

from ansible_collections.vllmops.cluster.plugins.module_utils.model_config import memory_problems
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PlanError, flag_name, host_port, model_outside_dir

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,47}$")
# The layout keys of a service and their defaults (data_parallel_size_local 0: derived).
LAYOUT = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1, "data_parallel_size_local": 0}
KEYS = ("name", "model", "revision", "image", "recipe", "min_vllm_version", "args", "env", "nodes", "group", "gpus", *LAYOUT,
        "enable_expert_parallel", "replicas", "port")
_RANKS = " (the fleet gives each unit its rank and each replica its head)"
# The flags the fleet sets on a unit, each with what decides it instead: in a service's args they would be
# overwritten, or rendered twice.
FLEET_OWNED = {
    **{key: f" and set the service's {key} instead" for key in (*LAYOUT, "enable_expert_parallel", "port", "model")},
    **{key: _RANKS for key in ("nnodes", "node_rank", "headless", "master_addr", "master_port", "data_parallel_rank",
                               "data_parallel_start_rank", "data_parallel_address", "data_parallel_rpc_port")},
    "distributed_executor_backend": " (a replica runs vLLM's own executor, on one node or several)",
    "served_model_name": " (the service's name is the name it serves)",
    "host": " and set vllm_serve_host instead",
}


class FleetError(PlanError):
    """The services as described cannot run; the message names the service, the hosts and the fix."""


def _gpu_text(indices):
    """[0, 1, 2, 3] as 0-3, [0, 2] as 0,2."""
    if indices and list(indices) == list(range(indices[0], indices[-1] + 1)) and len(indices) > 1:
        return f"{indices[0]}-{indices[-1]}"
    return ",".join(str(index) for index in indices)


def _count(raw, key, where, least, default):
    value = raw.get(key)
    value = default if value is None else value
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise FleetError(f"{where} sets {key} {value!r}: set it to a whole number, {least} or more")
    return value


def _owned(args, where):
    found = []
    for key in args:
        name = flag_name(key)
        if name in FLEET_OWNED:
            spelled = "" if str(key) == name else f" (written {key!r})"
            found.append(f"{where}: its args set --{name.replace('_', '-')}{spelled}, which the fleet sets: "
                         f"remove it{FLEET_OWNED[name]}.")
    if found:
        raise FleetError(" ".join(found))


def _hosts(raw, where, counts, groups):
    """The service's hosts, in inventory order."""
    if raw.get("nodes") is not None and raw.get("group") is not None:
        raise FleetError(f"{where} sets both nodes and group: set one of them (neither: every node)")
    if raw.get("group") is not None:
        if raw["group"] not in groups:
            raise FleetError(f"{where} names group {raw['group']!r}, which the inventory does not have: use one of "
                             f"{', '.join(sorted(groups)) or '(none)'}, or list its nodes")
        wanted, named = list(groups[raw["group"]]), f"its group {raw['group']} holds"
    elif raw.get("nodes") is not None:
        wanted, named = raw["nodes"], "it names"
        if not isinstance(wanted, list) or not wanted:
            raise FleetError(f"{where} sets nodes {wanted!r}: list one host or more (or leave it out: every node)")
    else:
        return list(counts)
    unknown = [str(host) for host in wanted if host not in counts]
    if unknown:
        raise FleetError(f"{where}: {named} {', '.join(unknown)}, which {'is not a serving node' if len(unknown) == 1 else 'are not serving nodes'}"
                         f": use hosts of {', '.join(counts)}")
    return [host for host in counts if host in wanted]


def _own_gpus(raw, where, hosts, counts):
    lists = raw.get("gpus") or {}
    if not isinstance(lists, dict):
        raise FleetError(f"{where} sets gpus {lists!r}: map each host to its GPU indices, e.g. {{{hosts[0]}: [0, 1]}}")
    for host, indices in lists.items():
        if host not in hosts:
            raise FleetError(f"{where}: its gpus name {host}, which is not one of its nodes ({', '.join(hosts)}): "
                             "list GPUs of its nodes only")
        if not isinstance(indices, list) or not indices:
            raise FleetError(f"{where}: its gpus for {host} are {indices!r}: list one GPU index or more")
        bad = [index for index in indices if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < counts[host]]
        if bad:
            raise FleetError(f"{where}: its gpus for {host} name {', '.join(map(str, bad))}, but {host} has {counts[host]} "
                             f"GPU(s) (indices 0 to {counts[host] - 1}): list indices that exist")
        twice = sorted({index for index in indices if indices.count(index) > 1})
        if twice:
            raise FleetError(f"{where}: its gpus for {host} list {', '.join(map(str, twice))} more than once: list each GPU once")
    return {host: sorted(indices) for host, indices in lists.items()}


def _service(raw, position, counts, groups, model_dir):
    """One service's settings, checked and with defaults."""
    if not isinstance(raw, dict) or not raw.get("name"):
        raise FleetError(f"vllmops_services item {position} has no name: give every service a name (the model name clients send)")
    name = str(raw["name"])
    where = f"vllmops_services: service {name}"
    unknown = [str(key) for key in raw if key not in KEYS]
    if unknown:
        raise FleetError(f"{where} has the unknown key(s) {', '.join(unknown)}: use only {', '.join(KEYS)}")
    if not NAME.match(name):
        raise FleetError(f"{where}: the name must be 1 to 48 of a-z, 0-9, '.', '_' and '-', starting with a letter or "
                         "digit (it names the service's units): rename it")
    model = raw.get("model")
    if not model or not isinstance(model, str):
        raise FleetError(f"{where} has no model: set model to a hub id (org/name) or a directory under {model_dir}")
    if model_outside_dir(model, model_dir):
        raise FleetError(f"{where}: {model_outside_dir(model, model_dir)}")
    args = raw.get("args") or {}
    if not isinstance(args, dict):
        raise FleetError(f"{where} sets args {args!r}: write the extra vllm serve flags as a mapping (max_model_len: 8192)")
    _owned(args, where)
    env = raw.get("env") or {}
    if not isinstance(env, dict):
        raise FleetError(f"{where} sets env {env!r}: write the container's extra environment as a mapping (NAME: value)")
    revision = raw.get("revision") or ("" if model.startswith("/") else "main")
    if revision and (model.startswith("/") or not isinstance(revision, str)):
        raise FleetError(f"{where} sets revision {revision!r}: a revision (a branch, tag or commit) goes with a hub id "
                         "(org/name) only")
    layout = {key: _count(raw, key, where, 1 if key != "data_parallel_size_local" else 0, default) for key, default in LAYOUT.items()}
    tp, dp, dp_local = layout["tensor_parallel_size"], layout["data_parallel_size"], layout["data_parallel_size_local"]
    if dp_local and (dp_local > dp or dp % dp_local):
        raise FleetError(f"{where} sets data_parallel_size_local {dp_local} with data_parallel_size {dp}: it must divide "
                         f"{dp} (the DP ranks each node runs), or be 0 to derive it")
    expert = raw.get("enable_expert_parallel") or False
    if not isinstance(expert, bool):
        raise FleetError(f"{where} sets enable_expert_parallel {expert!r}: set it to true or false")
    if expert and tp * dp == 1:
        raise FleetError(f"{where} sets enable_expert_parallel with tensor_parallel_size 1 and data_parallel_size 1: "
                         "expert parallelism needs more than one rank; raise one of them or drop it")
    port = _count(raw, "port", where, 0, 0)
    if port > 65535:
        raise FleetError(f"{where} sets port {port}: set a port up to 65535, or leave it out to have one assigned")
    hosts = _hosts(raw, where, counts, groups)
    # Where the model lies on every node: a hub id is downloaded into model_dir, under the service's name.
    path = model if model.startswith("/") else f"{model_dir.rstrip('/')}/{name}"
    return {"name": name, "where": where, "unit_suffix": re.sub(r"[._]", "-", name), "model": model,
            "repo": "" if model.startswith("/") else model, "revision": revision, "path": path, "env": env,
            "image": raw.get("image"), "recipe": raw.get("recipe"), "min_vllm_version": str(raw.get("min_vllm_version") or ""),
            "args": args, "hosts": hosts,
            "gpus": _own_gpus(raw, where, hosts, counts), "layout": {**layout, "enable_expert_parallel": expert},
            "replicas": _count(raw, "replicas", where, 1, 1), "port": port}


def _check_apart(services):
    """Distinct names and unit names, and no GPU listed by two services: {(host, gpu): the service listing it}."""
    suffixes, listed = {}, {}
    for service in services:
        first = suffixes.setdefault(service["unit_suffix"], service)
        if first is not service:
            same = "are both named" if first["name"] == service["name"] else "would both name their units"
            raise FleetError(f"vllmops_services: services {first['name']} and {service['name']} {same} "
                             f"...-{service['unit_suffix']}-*: rename one of them")
        for host, indices in service["gpus"].items():
            owner = next((listed[host, index] for index in indices if (host, index) in listed), None)
            if owner:
                both = sorted(set(indices) & set(owner["gpus"][host]))
                raise FleetError(f"vllmops_services: services {owner['name']} and {service['name']} both list GPU(s) "
                                 f"{_gpu_text(both)} of {host} in their gpus: give each GPU to one service")
            listed.update({(host, index): service for index in indices})
    return {key: service["name"] for key, service in listed.items()}


class _Fleet:
    """The GPUs and ports handed out so far."""

    def __init__(self, nodes, listed, reserved, own_ports, bases):
        self.nodes = {node["name"]: node for node in nodes}
        self.listed, self.reserved, self.own_ports = listed, reserved, own_ports
        self.base_port, self.master_port_base, self.dp_rpc_port_base = bases
        self.taken = {name: {} for name in self.nodes}  # host -> {gpu: service}
        self.ports = {name: {} for name in self.nodes}  # host -> {port: unit}
        self.fleet_ports = set()

    def allowed(self, service, host):
        if host in service["gpus"]:
            return service["gpus"][host]
        return [index for index in range(self.nodes[host]["gpus"]) if (host, index) not in self.listed]

    def free(self, service, host):
        return [index for index in self.allowed(service, host) if index not in self.taken[host]]

    def _one_node(self, service, need, held):
        fits = [host for host in service["hosts"] if len(self.free(service, host)) >= need]
        if not fits:
            return None
        host = min(fits, key=lambda name: (name in held, -len(self.free(service, name))))
        return [(host, self.free(service, host)[:need])]

    def _span(self, service, need, size):
        layout = service["layout"]
        whole = [host for host in service["hosts"] if self.allowed(service, host) == self.free(service, host)]
        rank_gpus = layout["tensor_parallel_size"] * layout["pipeline_parallel_size"] if layout["data_parallel_size"] > 1 else 1
        sizes = [size] if size else [s for s in range(need - 1, 0, -1) if need % s == 0 and s % rank_gpus == 0]
        for size in sizes:
            fit = [host for host in whole if len(self.allowed(service, host)) >= size][:need // size]
            if len(fit) == need // size:
                return [(host, self.allowed(service, host)[:size]) for host in fit]
        return None

    def place(self, service, prefix):
        layout = service["layout"]
        tp, pp, dp = layout["tensor_parallel_size"], layout["pipeline_parallel_size"], layout["data_parallel_size"]
        need = tp * pp * dp
        size = layout["data_parallel_size_local"] * tp * pp or None
        before = {host: len(self.free(service, host)) for host in service["hosts"]}
        replicas = []
        for index in range(service["replicas"]):
            held = {host for replica in replicas for host in replica["nodes"]}
            placed = self._one_node(service, need, held) if size in (None, need) else None
            if placed is None and size != need:
                placed = self._span(service, need, size)
            if placed is None:
                raise FleetError(self._short(service, need, before))
            size = len(placed[0][1])
            replicas.append(self._replica(service, index, placed, prefix))
        layout["data_parallel_size_local"] = size // (tp * pp) if dp > 1 else 1
        return replicas

    def _short(self, service, need, before):
        count, have = service["replicas"], sum(before.values())
        takers = {}
        for host in service["hosts"]:
            for index in range(self.nodes[host]["gpus"]):
                owner = self.taken[host].get(index) or self.listed.get((host, index))
                if owner and owner != service["name"]:
                    takers.setdefault(owner, {}).setdefault(host, []).append(index)
        after = "; ".join(f"{owner}: " + ", ".join(f"{host} GPU {_gpu_text(gpus)}" for host, gpus in held.items())
                          for owner, held in takers.items())
        nodes = ", ".join(f"{host} {before[host]} of {self.nodes[host]['gpus']}" for host in service["hosts"])
        said = (f"{service['where']} needs {need} GPU(s) per replica x {count} replica(s); its nodes ({nodes}) have "
                f"{'only ' if have < need * count else ''}{have} free" + (f" (after {after})" if after else ""))
        if have >= need * count:
            said += (f", but not as a replica takes them: {need} on one node, or the same number on each of several "
                     "nodes with none of theirs taken" + (" (whole DP ranks per node)" if service["layout"]["data_parallel_size"] > 1 else ""))
        return (said + ": give it more nodes or GPUs, lower its replicas or parallel sizes, or move the other services "
                       "off its nodes")

    def _api_port(self, service, replica, hosts):
        port = service["port"]
        if not port:
            port = self.base_port
            while port in self.reserved or port in self.own_ports or any(port in self.ports[host] for host in hosts):
                port += 1
            return port
        if port in self.reserved:
            raise FleetError(f"{service['where']} sets port {port}, which {self.reserved[port]} uses: choose another port, "
                             "or leave port out to have one assigned")
        for host in hosts:
            if port in self.ports[host]:
                raise FleetError(f"{service['where']}: replica {replica} would listen on port {port} on {host}, where "
                                 f"{self.ports[host][port]} already does: give each unit of a host its own port, or leave "
                                 "port out to have one assigned to each replica")
        return port

    def _fleet_port(self, base, hosts):
        port = base
        while port in self.reserved or port in self.fleet_ports or any(port in self.ports[host] for host in hosts):
            port += 1
        self.fleet_ports.add(port)
        return port

    def _replica(self, service, index, placed, prefix):
        name, layout = service["name"], service["layout"]
        replica_id, hosts = f"{name}-{index}", [pair[0] for pair in placed]
        head_address = self.nodes[hosts[0]].get("address") or ""
        port = self._api_port(service, replica_id, hosts)
        spans, dp = len(hosts) > 1, layout["data_parallel_size"]
        master = self._fleet_port(self.master_port_base, hosts) if spans and dp == 1 else None
        rpc = self._fleet_port(self.dp_rpc_port_base, hosts) if spans and dp > 1 else None
        units = []
        for rank, (host, gpus) in enumerate(placed):
            unit = f"{prefix}-{service['unit_suffix']}-{index}" + (f"-r{rank}" if rank else "")
            for gpu in gpus:
                self.taken[host][gpu] = name
            self.ports[host][port] = f"{unit} (service {name})"
            for extra in (master, rpc):
                if extra:
                    self.ports[host][extra] = f"{unit} (service {name})"
            units.append({"host": host, "unit": unit, "node_rank": rank, "gpus": gpus, "port": port, "serves_http": rank == 0,
                          "flags": _flags(service, rank, len(hosts), len(gpus), head_address, port, master, rpc)})
        return {"index": index, "id": replica_id, "port": port, "head": hosts[0], "head_address": head_address,
                "nodes": hosts, "master_port": master, "dp_rpc_port": rpc, "units": units}


def _flags(service, rank, nnodes, local_gpus, head_address, port, master_port, rpc_port):
    """One unit's vllm serve flags (snake_case, as plan.serve_settings writes them); an unknown head address is left out."""
    layout = service["layout"]
    tp, pp, dp = layout["tensor_parallel_size"], layout["pipeline_parallel_size"], layout["data_parallel_size"]
    flags = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "served_model_name": service["name"],
             "model": service["path"], "port": port}
    if dp > 1:
        flags["data_parallel_size"] = dp
        if nnodes > 1:
            local = local_gpus // (tp * pp)
            flags.update(data_parallel_size_local=local, data_parallel_address=head_address, data_parallel_rpc_port=rpc_port)
            if rank:
                flags.update(data_parallel_start_rank=rank * local, headless=True)
    elif nnodes > 1:
        flags.update(nnodes=nnodes, node_rank=rank, master_addr=head_address, master_port=master_port)
        if rank:
            flags["headless"] = True
    if layout["enable_expert_parallel"]:
        flags["enable_expert_parallel"] = True
    return {key: value for key, value in flags.items() if value != ""}


def _check_memory(service, replicas, nodes, memory):
    sizes = [nodes[host].get("gpu_memory_bytes") for replica in replicas for host in replica["nodes"]]
    sizes = [size for size in sizes if size]
    if not sizes:
        return
    layout = service["layout"]
    settings = {**(memory.get("settings") or {}), "tensor_parallel_size": layout["tensor_parallel_size"],
                "pipeline_parallel_size": layout["pipeline_parallel_size"]}
    found = memory_problems(memory.get("shape") or {}, settings, memory.get("weight_bytes"), min(sizes),
                            where=f"{service['name']}'s model")
    if found:
        raise FleetError(f"{service['where']}: " + " ".join(found))


def _summary(service):
    layout, replicas = service["layout"], service["replicas"]
    where = ", ".join("+".join(f"{unit['host']}[{_gpu_text(unit['gpus'])}]" for unit in replica["units"]) for replica in replicas)
    ports = sorted({replica["port"] for replica in replicas})
    return (f"{service['name']}: {len(replicas)} replica{'s' if len(replicas) > 1 else ''} x TP {layout['tensor_parallel_size']} "
            f"x PP {layout['pipeline_parallel_size']} x DP {layout['data_parallel_size']}"
            f"{' (EP)' if layout['enable_expert_parallel'] else ''} on {where}, port{'s' if len(ports) > 1 else ''} "
            + ", ".join(map(str, ports)))


def make_fleet(services, nodes, groups=None, model_dir="/srv/models", base_port=8100, reserved_ports=None,
               master_port_base=29600, dp_rpc_port_base=29700, unit_prefix="vllmops-vllm", memory=None) -> dict:
    """Where every replica of every service runs, its ports, units and flags; or FleetError saying why it cannot.

    nodes: [{name, gpus (count), address, gpu_memory_bytes}] in inventory order; groups: {group: [hosts]};
    reserved_ports: {port: what uses it}; memory: {service name: {shape, weight_bytes, settings}} to check."""
    if not nodes:
        raise FleetError("vllmops_services: there are no serving nodes to place the services on: put them in the play")
    counts = {node["name"]: int(node["gpus"]) for node in nodes}
    addresses = {}
    for node in nodes:
        if node.get("address") and addresses.setdefault(node["address"], node["name"]) != node["name"]:
            raise FleetError(f"{addresses[node['address']]} and {node['name']} both have the cluster address {node['address']}: "
                             "each node needs its own address on the cluster network")
    checked = [_service(raw, position, counts, groups or {}, model_dir) for position, raw in enumerate(services or [], 1)]
    listed = _check_apart(checked)
    memory = memory or {}
    unknown = [name for name in memory if name not in {service["name"] for service in checked}]
    if unknown:
        raise FleetError(f"the memory check names {', '.join(map(str, unknown))}, which vllmops_services does not list: "
                         "check the service names")
    reserved = {int(port): str(owner) for port, owner in (reserved_ports or {}).items()}
    own_ports = {service["port"] for service in checked if service["port"]}
    fleet = _Fleet(nodes, listed, reserved, own_ports, (base_port, master_port_base, dp_rpc_port_base))
    planned, hosts, upstreams = [], {name: [] for name in counts}, {}
    for service in checked:
        replicas = fleet.place(service, unit_prefix)
        if service["name"] in memory:
            _check_memory(service, replicas, fleet.nodes, memory[service["name"]])
        for unit in (unit for replica in replicas for unit in replica["units"]):
            hosts[unit["host"]].append(unit["unit"])
        # A head whose address is not known yet (before the nccl role ran) has no upstream.
        upstreams[service["name"]] = [host_port(r["head_address"], r["port"]) for r in replicas if r["head_address"]]
        layout = service["layout"]
        planned.append({"name": service["name"], "unit_suffix": service["unit_suffix"], "model": service["model"],
                        "repo": service["repo"], "revision": service["revision"], "path": service["path"],
                        "env": service["env"], "image": service["image"], "recipe": service["recipe"],
                        "min_vllm_version": service["min_vllm_version"], "args": service["args"],
                        "layout": layout, "gpus_per_replica": layout["tensor_parallel_size"] * layout["pipeline_parallel_size"]
                        * layout["data_parallel_size"], "replicas": replicas})
    return {"services": planned, "hosts": hosts, "upstreams": upstreams,
            "summary": "\n".join(_summary(service) for service in planned)}
