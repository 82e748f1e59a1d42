# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan: one computation of how the cluster runs, read by every role.

Which host is the head, which backend (Ray, or vLLM's own multiprocessing
executor on one or several nodes), the parallel sizes, each node's rank and
the flags its vLLM gets. Decided once from the inventory and the image probe,
so that no two roles can disagree; a cluster that cannot work is refused here,
before anything changes, with one message naming the hosts and the fix.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import image_env_overrides

BACKENDS = ("auto", "ray", "mp")
MODE_LABELS = {"ray": "ray", "mp-multinode": "mp multi-node", "mp-single": "mp single-node"}
# Defaults; the plan role passes the vllmops role's settings.
ADDRESS_SOURCE = "VLLM_HOST_IP in /etc/vllmops/cluster.env, written by the nccl role"
RAY_UNITS = {"head": "vllmops-ray-head", "worker": "vllmops-ray-worker"}
# Ray checks a shared token on every control-plane request from this release on
# (RAY_AUTH_MODE=token; docs.ray.io, "Ray token authentication").
RAY_TOKEN_AUTH_SINCE = (2, 52)


class PlanError(Exception):
    """The cluster as described cannot run; the message names the hosts and the fix."""


def _names(nodes):
    return ", ".join(node["name"] for node in nodes)


def _gpu_list(nodes):
    return ", ".join(f"{node['name']} {node['gpus']}" for node in nodes)


def _image_label(image):
    return image.get("name") or image.get("id") or "the image"


def _choose_head(nodes):
    """The one head every host names; it must be a host of the play."""
    if not nodes:
        raise PlanError("there are no hosts to plan for: put the serving nodes in the play (group vllm_nodes)")
    naming = {}
    for node in nodes:
        naming.setdefault(node.get("head") or "", []).append(node["name"])
    if len(naming) > 1:
        parts = [f"{', '.join(hosts)} {'names' if len(hosts) == 1 else 'name'} {head or 'no host'}" for head, hosts in naming.items()]
        parts[0] += " as the head"
        raise PlanError(f"{', '.join(parts)}: set vllmops_head_host once, in group_vars, for every host")
    head = next(iter(naming))
    if head not in {node["name"] for node in nodes}:
        raise PlanError(f"vllmops_head_host is {head or 'empty'}, which is not a host of this play ({_names(nodes)}): "
                        "set it to one of them, in group_vars, for every host")
    return head


def _check_nodes(nodes, address_source):
    """Every node has a GPU; several nodes need distinct cluster addresses."""
    for node in nodes:
        if node["gpus"] < 1:
            raise PlanError(f"{node['name']} has no GPU (found {node['gpus']}): install the driver and the container toolkit "
                            "(gpu_probe tells what is missing), or take the host out of the play")
    if len(nodes) == 1:
        return
    seen = {}
    for node in nodes:
        if not node.get("address"):
            raise PlanError(f"{node['name']} has no cluster address ({address_source}): run the nccl role on it first")
        if node["address"] in seen:
            raise PlanError(f"{seen[node['address']]} and {node['name']} both have the cluster address {node['address']}: "
                            f"each node needs its own address on the cluster network ({address_source})")
        seen[node["address"]] = node["name"]


def _choose_backend(backend, image, node_count):
    """(backend, mode, reason) for this image on this many nodes."""
    label = _image_label(image)
    version = image.get("vllm_version")
    modes = set(image.get("multinode_modes") or [])
    has_ray = bool(image.get("has_ray") or image.get("ray_version"))
    ray_ok = has_ray and "ray" in modes
    if backend not in BACKENDS:
        raise PlanError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}: set vllmops_backend to one of them")
    if not version:
        raise PlanError(f"{label} holds no vLLM: use a vLLM serving image (image_probe finds no vllm package in it)")
    if backend == "ray":
        if not has_ray:
            raise PlanError(f"{label} has no Ray (recent vLLM images ship without it): set vllmops_backend to auto or mp "
                            "to use vLLM's Ray-free multi-node mode, or use an image with Ray")
        if "ray" not in modes:
            raise PlanError(f"{label} has Ray, but its vLLM {version} has no Ray executor: set vllmops_backend to auto or mp, "
                            "or use an image whose vLLM runs on Ray")
        return "ray", "ray", "vllmops_backend is ray: vLLM's Ray executor, a Ray head and Ray workers"
    if node_count == 1:
        return "mp", "mp-single", "one node: vLLM's own multiprocessing executor, no Ray"
    native = "native" in modes
    if backend == "mp":
        if not native:
            instead = "set vllmops_backend to ray (this image has Ray)" if ray_ok else "set vllmops_backend to ray with an image that has Ray"
            raise PlanError(f"{label} has vLLM {version}, which has no Ray-free multi-node mode (no --nnodes/--headless: "
                            f"vLLM older than 0.11.1), so it cannot serve {node_count} nodes with mp: {instead}, or use a newer vLLM")
        return "mp", "mp-multinode", f"vllmops_backend is mp: vLLM's Ray-free multi-node mode over {node_count} nodes, no Ray"
    if native:
        return "mp", "mp-multinode", f"{node_count} nodes: vLLM's Ray-free multi-node mode (--nnodes/--headless), no Ray"
    if ray_ok:
        return "ray", "ray", f"{node_count} nodes and vLLM {version} has no Ray-free multi-node mode: vLLM's Ray executor"
    why_not_ray = "not installed" if not has_ray else f"vLLM {version} has no Ray executor"
    raise PlanError(f"{label} (vLLM {version}) can serve {node_count} nodes neither with Ray ({why_not_ray}) nor with vLLM's "
                    "Ray-free multi-node mode (no --nnodes/--headless: vLLM older than 0.11.1): use an image with Ray or a newer vLLM")


def _release(version):
    """(major, minor) of a version string such as 2.52.0 or 2.60.0rc1; None when it does not start so."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def ray_token_auth(ray_version):
    """Whether this Ray release has token authentication (unknown versions are taken as having none)."""
    release = _release(ray_version)
    return release is not None and release >= RAY_TOKEN_AUTH_SINCE


def host_port(address, port):
    """address:port, an IPv6 address in brackets (Ray's --address, a URL's authority)."""
    return f"[{address}]:{port}" if ":" in address and not address.startswith("[") else f"{address}:{port}"


def _ray(backend, image, ray_port, head_address):
    """How Ray is reached and secured (backend ray): the head's GCS address (the one owner: the Ray units, readiness
    and status read it here), the image's Ray version, token authentication, and the warning when it has none."""
    version = image.get("ray_version") or None
    auth = backend == "ray" and ray_token_auth(version)
    warning = None
    if backend == "ray" and not auth:
        since = ".".join(str(part) for part in RAY_TOKEN_AUTH_SINCE)
        warning = (f"{_image_label(image)} has Ray {version or '(version unknown)'}, which has no token authentication "
                   f"(Ray >= {since} has it): whoever reaches the cluster's Ray ports (the GCS on :{ray_port}, the raylets, "
                   f"Ray's worker ports) can run code on every node. Only the firewall keeps others out; use an image "
                   f"with Ray >= {since} to turn authentication on")
    # `ray start --head` opens Ray's client server whenever the image has Ray Client's dependency (grpcio), and it
    # cannot be turned off then: the Ray units pin its port (the firewall closes it to all but the members).
    client_server = backend == "ray" and bool(image.get("ray_client"))
    return {"address": host_port(head_address, ray_port), "version": version, "token_auth": auth, "warning": warning,
            "client_server": client_server}


def parallel_sizes(nodes, tensor_parallel_size, pipeline_parallel_size):
    """(tp, pp) that multiply to the cluster's GPUs; 0 means derive. The one owner of the rule: preflight checks it
    with this too, before anything changes."""
    for name, value in (("tensor_parallel_size", tensor_parallel_size), ("pipeline_parallel_size", pipeline_parallel_size)):
        if value < 0:
            raise PlanError(f"{name} is {value}: set vllm_serve_{name} to a positive number, or 0 to derive it")
    total = sum(node["gpus"] for node in nodes)
    cluster = f"the cluster has {total} ({len(nodes)} node(s): {_gpu_list(nodes)})"
    pp = pipeline_parallel_size or 1
    if not tensor_parallel_size and total % pp:
        raise PlanError(f"pipeline_parallel_size {pp} does not divide the cluster's GPUs: {cluster}: set "
                        f"vllm_serve_pipeline_parallel_size to a divisor of {total}, or leave it 0")
    tp = tensor_parallel_size or total // pp
    if tp * pp != total:
        raise PlanError(f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} GPUs, but {cluster}: set "
                        f"vllm_serve_tensor_parallel_size and vllm_serve_pipeline_parallel_size so they multiply to {total}, "
                        "or leave both 0 to derive them")
    return tp, pp


def _check_even_gpus(nodes):
    """vLLM's Ray-free multi-node mode runs world_size / nnodes local ranks on every node."""
    if len({node["gpus"] for node in nodes}) > 1:
        raise PlanError(f"vLLM's Ray-free multi-node mode needs the same number of GPUs on every node "
                        f"(it runs world_size / nnodes ranks on each), but the nodes hold {_gpu_list(nodes)}: "
                        "give every node the same GPUs, or set vllmops_backend to ray with an image that has Ray")


def model_outside_dir(model_path, model_dir):
    """The sentence refusing a local model that does not lie under model_dir, the only directory the containers mount;
    empty when it does (or when the model is a hub ID, which vLLM downloads itself)."""
    if not model_path.startswith("/"):
        return ""
    path, root = posixpath.normpath(model_path), posixpath.normpath(model_dir)
    if posixpath.commonpath([path, root]) == root:
        return ""
    return (f"the model path {model_path} is outside vllm_serve_model_dir {model_dir}, which is the only directory "
            f"the containers see: move the model under {model_dir} or set vllm_serve_model_dir")


def _check_model(model_path, model_dir):
    if not model_path:
        raise PlanError("no model is set: set vllm_serve_model to a directory under vllm_serve_model_dir or a hub id (org/name)")
    problem = model_outside_dir(model_path, model_dir)
    if problem:
        raise PlanError(problem)


def _check_same_image(nodes, image):
    """Every node that says which image it holds holds the planned one, by content ID (image IDs differ between
    Docker's classic and containerd image stores for the same image)."""
    wanted = image.get("content_id")
    if not wanted:
        return
    other = [node for node in nodes if node.get("image_content_id") and node["image_content_id"] != wanted]
    if other:
        held = ", ".join(f"{node['name']} {node['image_content_id'][:19]}" for node in other)
        raise PlanError(f"{held} {'holds' if len(other) == 1 else 'hold'} another image than {_image_label(image)} "
                        f"({wanted[:19]}, by content ID): put the same image on every node (the image role does) "
                        "and re-run")


def _ordered(nodes, head):
    """Head first (rank 0), then the others in inventory order."""
    return [node for node in nodes if node["name"] == head] + [node for node in nodes if node["name"] != head]


def _members(nodes, head, mode, head_address, master_port, ray_units, image_id=None):
    ordered = _ordered(nodes, head)
    members = {}
    for rank, node in enumerate(ordered):
        is_head = rank == 0
        flags = {}
        if mode == "mp-multinode":
            flags = {"nnodes": len(ordered), "node_rank": rank, "master_addr": head_address, "master_port": master_port}
            if not is_head:
                flags["headless"] = True
        members[node["name"]] = {
            "rank": rank,
            "address": node.get("address") or "",
            "gpus": node["gpus"],
            # The node's own image ID, what its units start: the same image has another on another image store.
            "image_id": node.get("image_id") or image_id,
            "role": "head" if is_head else "worker",
            "runs_vllm": is_head or mode == "mp-multinode",
            "serves_http": is_head,
            "ray_unit": ray_units["head" if is_head else "worker"] if mode == "ray" else None,
            "serve_flags": flags,
        }
    return members


def _image_env(members, nodes, image):
    """Per member, what its serving containers do not take from the image's ENV (the network settings the image
    bakes: its node's cluster.env replaces or removes them); and one warning per node and variable."""
    warnings = []
    for node in nodes:
        found = image_env_overrides(image.get("network_env") or {}, node.get("cluster_env") or {}, node["name"],
                                    _image_label(image))
        members[node["name"]]["image_env"] = {"replaced": found["replaced"], "removed": found["removed"]}
        warnings += found["warnings"]
    return warnings


def _summary(plan):
    count = plan["nodes"]
    parts = [f"{MODE_LABELS[plan['mode']]}: {count} node{'s' if count > 1 else ''}, "
             f"TP {plan['tensor_parallel_size']} x PP {plan['pipeline_parallel_size']} over {plan['gpus']} GPUs, "
             f"head {plan['head']} ({plan['head_address']})"]
    if plan["mode"] == "ray":
        auth = "token auth" if plan["ray"]["token_auth"] else f"no auth: Ray {plan['ray']['version'] or '?'}"
        parts.append(f"Ray on :{plan['ports']['ray']} ({auth})")
    ports = plan["ports"]
    parts.append(f"rank 0 serves http on :{ports['vllm']}"
                 + (f" behind the API proxy on :{ports['api']}" if ports["vllm"] != ports["api"] else ""))
    return f"{', '.join(parts)}; image {plan['image']} (vLLM {plan['vllm_version']})"


def make_plan(nodes, image, backend="auto", tensor_parallel_size=0, pipeline_parallel_size=0, master_port=29501,
              api_port=8000, ray_port=6379, model_path="", model_dir="/srv/models", ray_units=None,
              address_source=ADDRESS_SOURCE, vllm_port=None) -> dict:
    """How the cluster runs, or PlanError saying why it cannot.

    api_port is where clients reach the API on the head; vllm_port where vLLM's
    rank 0 listens (behind the API proxy), by default the same port (no proxy)."""
    head = _choose_head(nodes)
    _check_nodes(nodes, address_source)
    _check_same_image(nodes, image)
    chosen, mode, reason = _choose_backend(backend, image, len(nodes))
    tp, pp = parallel_sizes(nodes, tensor_parallel_size, pipeline_parallel_size)
    if mode == "mp-multinode":
        _check_even_gpus(nodes)
    _check_model(model_path, model_dir)
    head_address = next(node.get("address") for node in nodes if node["name"] == head) or "127.0.0.1"
    plan = {
        "backend": chosen,
        "mode": mode,
        "reason": reason,
        "head": head,
        "head_address": head_address,
        "nodes": len(nodes),
        "gpus": tp * pp,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "ports": {"api": api_port, "vllm": vllm_port or api_port, "master": master_port, "ray": ray_port},
        "image_id": image.get("id"),
        "image_content_id": image.get("content_id") or None,
        "image": image.get("name"),
        "vllm_version": image.get("vllm_version"),
        "model_path": model_path,
        "model_dir": model_dir,
        "serve_flags": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "distributed_executor_backend": chosen},
        "members": _members(nodes, head, mode, head_address, master_port, ray_units or RAY_UNITS, image.get("id")),
        "ray": _ray(chosen, image, ray_port, head_address),
    }
    plan["image_env_warnings"] = _image_env(plan["members"], nodes, image)
    plan["summary"] = _summary(plan)
    return plan


# The flags the plan sets on a rank's command line (serve_flags above, and the vllm_serve role's name, address and
# port), each with the setting that decides it instead. Given in vllm_serve_args they would be overwritten, or,
# spelled another way, rendered twice with the last one winning.
PLAN_OWNED = {
    "tensor_parallel_size": "vllm_serve_tensor_parallel_size",
    "pipeline_parallel_size": "vllm_serve_pipeline_parallel_size",
    "distributed_executor_backend": "vllmops_backend",
    "nnodes": "the inventory's vllm_nodes group (the plan gives each node its rank)",
    "node_rank": "the inventory's vllm_nodes group (the plan gives each node its rank)",
    "headless": "the inventory's vllm_nodes group (every node but the head runs headless)",
    "master_addr": "vllmops_head_host",
    "master_port": "vllmops_master_port",
    "host": "vllm_serve_host",
    "port": "vllm_serve_port",
    "served_model_name": "vllm_serve_served_model_name",
    "model": "vllm_serve_model",
}
# vLLM's own short spellings of flags (vllm/engine/arg_utils.py; each in vllm serve 0.33's parser,
# tests/fixtures/vllm/serve_flags): those of the flags above, and the others recipes are written with.
SHORT_FLAGS = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "n": "nnodes", "r": "node_rank",
               "dp": "data_parallel_size", "q": "quantization", "ep": "enable_expert_parallel",
               "dcp": "decode_context_parallel_size", "cc": "compilation_config"}


def flag_name(key) -> str:
    """A vllm_serve_args key as vLLM's option name: tensor_parallel_size, tensor-parallel-size,
    --tensor-parallel-size and -tp are one flag."""
    text = str(key).strip()
    if text.startswith("-") and not text.startswith("--"):
        short = text[1:]
        return SHORT_FLAGS.get(short, short.replace("-", "_"))
    return text.lstrip("-").replace("-", "_")


def owned_flags(settings) -> list:
    """One sentence per key of vllm_serve_args that names a flag the plan sets, naming the setting to use."""
    if not isinstance(settings, dict):
        return []
    found = []
    for key in settings:
        name = flag_name(key)
        if name in PLAN_OWNED:
            flag = "--" + name.replace("_", "-")
            spelled = "" if str(key) == name else f" (written {key!r})"
            found.append(f"vllm_serve_args sets {flag}{spelled}, which the plan sets on every rank: "
                         f"remove it and use {PLAN_OWNED[name]} instead.")
    return found


def serve_settings(args, plan, host, served_name, bind_host) -> dict:
    """A rank's vLLM settings: the inventory's vllm_serve_args, then the plan's flags for the cluster and for this
    node, then the name, address and port it serves on. A flag the plan sets is refused in vllm_serve_args, in any
    spelling (owned_flags), rather than overwritten or rendered twice."""
    refused = owned_flags(args)
    if refused:
        raise PlanError(" ".join(refused))
    return {**(args or {}), **plan["serve_flags"], **plan["members"][host]["serve_flags"],
            "served_model_name": served_name, "host": bind_host, "port": plan["ports"]["vllm"]}
