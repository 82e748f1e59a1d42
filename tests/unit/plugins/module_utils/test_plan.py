"""The plan: which head, backend, parallel sizes and per-node flags, or the one refusal that says why not."""

import json

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PlanError, make_plan

NEW = {"id": "sha256:new", "name": "vllm/vllm-openai:v0.32.0", "vllm_version": "0.32.0", "has_ray": False,
       "multinode_modes": ["native", "data_parallel"]}
NEW_RAY = dict(NEW, id="sha256:newray", name="vllm-ray:0.32.0", has_ray=True, multinode_modes=["ray", "native", "data_parallel"])
OLD_RAY = {"id": "sha256:old", "name": "vllm/vllm-openai:v0.10.0", "vllm_version": "0.10.0", "has_ray": True,
           "multinode_modes": ["ray"]}
OLD_NO_RAY = dict(OLD_RAY, id="sha256:oldnoray", name="vllm-slim:0.10.0", has_ray=False)
NO_VLLM = {"id": "sha256:cuda", "name": "nvidia/cuda:12.8", "vllm_version": None, "has_ray": False, "multinode_modes": []}
MODEL = "/srv/models/qwen"


def node(name, address, gpus=1, head="node1"):
    return {"name": name, "address": address, "gpus": gpus, "head": head}


TWO = [node("node1", "10.88.0.2"), node("node2", "10.88.0.3")]


def plan(nodes, image, **kwargs):
    return make_plan(nodes, image, **dict({"model_path": MODEL}, **kwargs))


def flags(result):
    return {name: member["serve_flags"] for name, member in result["members"].items()}


# (id, nodes, image, kwargs, expected top-level fields, expected members {name: (rank, role, runs_vllm, serves_http, ray_unit)})
ACCEPTED = [
    ("two nodes native -> mp multi-node", TWO, NEW, {},
     {"backend": "mp", "mode": "mp-multinode", "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "head": "node1",
      "head_address": "10.88.0.2", "gpus": 2},
     {"node1": (0, "head", True, True, None), "node2": (1, "worker", True, False, None)}),
    ("two nodes, old vLLM with Ray -> ray", TWO, OLD_RAY, {},
     {"backend": "ray", "mode": "ray", "tensor_parallel_size": 2, "pipeline_parallel_size": 1},
     {"node1": (0, "head", True, True, "vllmops-ray-head"), "node2": (1, "worker", False, False, "vllmops-ray-worker")}),
    ("auto prefers native over Ray", TWO, NEW_RAY, {}, {"backend": "mp", "mode": "mp-multinode"}, None),
    ("explicit ray on a native image with Ray", TWO, NEW_RAY, {"backend": "ray"}, {"backend": "ray", "mode": "ray"}, None),
    ("one node, 8 GPUs -> mp single, TP 8", [node("node1", "", gpus=8)], NEW, {},
     {"backend": "mp", "mode": "mp-single", "tensor_parallel_size": 8, "pipeline_parallel_size": 1, "head_address": "127.0.0.1",
      "nodes": 1, "gpus": 8},
     {"node1": (0, "head", True, True, None)}),
    ("one node keeps its address", [node("node1", "10.88.0.2", gpus=2)], OLD_NO_RAY, {},
     {"mode": "mp-single", "head_address": "10.88.0.2"}, None),
    ("explicit mp, one node, old vLLM", [node("node1", "", gpus=2)], OLD_RAY, {"backend": "mp"}, {"mode": "mp-single"}, None),
    ("explicit ray on one node", [node("node1", "", gpus=2)], OLD_RAY, {"backend": "ray"},
     {"backend": "ray", "mode": "ray", "tensor_parallel_size": 2},
     {"node1": (0, "head", True, True, "vllmops-ray-head")}),
    ("unequal GPUs are fine with Ray", [node("node1", "10.0.0.1", gpus=2), node("node2", "10.0.0.2", gpus=1)], OLD_RAY,
     {"tensor_parallel_size": 3}, {"mode": "ray", "tensor_parallel_size": 3, "gpus": 3}, None),
    ("PP 2 derives TP", [node(f"node{i}", f"10.0.0.{i}", gpus=4) for i in (1, 2)], NEW, {"pipeline_parallel_size": 2},
     {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "gpus": 8}, None),
    ("TP and PP both given", [node(f"node{i}", f"10.0.0.{i}", gpus=4) for i in (1, 2)], NEW,
     {"tensor_parallel_size": 2, "pipeline_parallel_size": 4}, {"tensor_parallel_size": 2, "pipeline_parallel_size": 4}, None),
    ("hub id accepted", TWO, NEW, {"model_path": "Qwen/Qwen3-0.6B"}, {"mode": "mp-multinode"}, None),
    ("model_dir itself accepted", TWO, NEW, {"model_path": "/srv/models/"}, {"mode": "mp-multinode"}, None),
    ("head last in inventory gets rank 0, the others follow in order",
     [node("a", "10.0.0.1", head="c"), node("b", "10.0.0.2", head="c"), node("c", "10.0.0.3", head="c")], NEW, {},
     {"head": "c", "head_address": "10.0.0.3", "nodes": 3},
     {"c": (0, "head", True, True, None), "a": (1, "worker", True, False, None), "b": (2, "worker", True, False, None)}),
]


@pytest.mark.parametrize(("nodes", "image", "kwargs", "expected", "members"),
                         [case[1:] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_accepted_clusters_get_their_plan(nodes, image, kwargs, expected, members):
    result = plan(nodes, image, **kwargs)
    assert {key: result[key] for key in expected} == expected
    assert result["serve_flags"] == {"tensor_parallel_size": result["tensor_parallel_size"],
                                     "pipeline_parallel_size": result["pipeline_parallel_size"],
                                     "distributed_executor_backend": result["backend"]}
    for name, (rank, role, runs_vllm, serves_http, ray_unit) in (members or {}).items():
        member = result["members"][name]
        assert (member["rank"], member["role"], member["runs_vllm"], member["serves_http"], member["ray_unit"]) == \
            (rank, role, runs_vllm, serves_http, ray_unit), name
    assert sorted(member["rank"] for member in result["members"].values()) == list(range(len(nodes)))
    json.dumps(result)


def test_mp_multinode_flags_point_every_node_at_the_head():
    result = plan([node("node1", "10.88.0.2", gpus=2), node("node2", "10.88.0.3", gpus=2)], NEW, master_port=29600)
    assert flags(result) == {
        "node1": {"nnodes": 2, "node_rank": 0, "master_addr": "10.88.0.2", "master_port": 29600},
        "node2": {"nnodes": 2, "node_rank": 1, "master_addr": "10.88.0.2", "master_port": 29600, "headless": True},
    }
    assert result["ports"] == {"api": 8000, "vllm": 8000, "master": 29600, "ray": 6379}


@pytest.mark.parametrize(("nodes", "image", "kwargs"), [
    (TWO, OLD_RAY, {}),
    ([node("node1", "", gpus=8)], NEW, {}),
])
def test_ray_and_single_node_members_get_no_flags_of_their_own(nodes, image, kwargs):
    assert all(member_flags == {} for member_flags in flags(plan(nodes, image, **kwargs)).values())


def test_the_ray_units_are_named_as_the_settings_say():
    result = plan(TWO, OLD_RAY, ray_units={"head": "ray-h", "worker": "ray-w"})
    assert {name: member["ray_unit"] for name, member in result["members"].items()} == {"node1": "ray-h", "node2": "ray-w"}


def test_the_summary_says_what_runs_where():
    result = plan(TWO, NEW)
    assert result["summary"] == ("mp multi-node: 2 nodes, TP 2 x PP 1 over 2 GPUs, head node1 (10.88.0.2), rank 0 serves http on :8000; "
                                 "image vllm/vllm-openai:v0.32.0 (vLLM 0.32.0)")
    assert "Ray on :6379" in plan(TWO, OLD_RAY)["summary"]
    behind = plan(TWO, NEW, api_port=8000, vllm_port=8001)
    assert behind["ports"]["api"] == 8000 and behind["ports"]["vllm"] == 8001
    assert "rank 0 serves http on :8001 behind the API proxy on :8000;" in behind["summary"]
    assert result["image_id"] == "sha256:new" and result["image"] == NEW["name"] and result["vllm_version"] == "0.32.0"


# (id, nodes, image, kwargs, substrings the message must hold)
REFUSED = [
    ("two heads", [node("node1", "10.0.0.1", head="node1"), node("node2", "10.0.0.2", head="node3")], NEW, {},
     ["node1 names node1 as the head, node2 names node3", "set vllmops_head_host once, in group_vars"]),
    ("head not in the play", [node("a", "10.0.0.1", head="x"), node("b", "10.0.0.2", head="x")], NEW, {},
     ["vllmops_head_host is x, which is not a host of this play (a, b)"]),
    ("no hosts", [], NEW, {}, ["no hosts"]),
    ("missing address", [node("node1", "10.0.0.1"), node("node2", "")], NEW, {},
     ["node2 has no cluster address (VLLM_HOST_IP in /etc/vllmops/cluster.env, written by the nccl role)"]),
    ("missing address, elsewhere", [node("node1", "10.0.0.1"), node("node2", "")], NEW,
     {"address_source": "VLLM_HOST_IP in /srv/env"}, ["node2 has no cluster address (VLLM_HOST_IP in /srv/env)"]),
    ("duplicate address", [node("node1", "10.0.0.1"), node("node2", "10.0.0.1")], NEW, {},
     ["node1 and node2 both have the cluster address 10.0.0.1"]),
    ("no GPU", [node("node1", "10.0.0.1"), node("node2", "10.0.0.2", gpus=0)], NEW, {}, ["node2 has no GPU"]),
    ("no vLLM in the image", TWO, NO_VLLM, {}, ["nvidia/cuda:12.8 holds no vLLM"]),
    ("explicit ray without Ray", TWO, NEW, {"backend": "ray"},
     ["vllm/vllm-openai:v0.32.0 has no Ray", "set vllmops_backend to auto or mp"]),
    ("explicit ray without Ray, one node", [node("node1", "")], NEW, {"backend": "ray"}, ["has no Ray"]),
    ("explicit mp on old vLLM", TWO, OLD_NO_RAY, {"backend": "mp"},
     ["vLLM 0.10.0", "no Ray-free multi-node mode", "set vllmops_backend to ray with an image that has Ray"]),
    ("explicit mp on old vLLM that has Ray", TWO, OLD_RAY, {"backend": "mp"}, ["set vllmops_backend to ray (this image has Ray)"]),
    ("auto with neither", TWO, OLD_NO_RAY, {},
     ["vllm-slim:0.10.0 (vLLM 0.10.0) can serve 2 nodes neither with Ray (not installed)", "use an image with Ray or a newer vLLM"]),
    ("unknown backend", TWO, NEW, {"backend": "k8s"}, ["'k8s' is not one of auto, ray, mp"]),
    ("TP x PP mismatch", TWO, NEW, {"tensor_parallel_size": 4},
     ["tensor_parallel_size 4 x pipeline_parallel_size 1 = 4 GPUs, but the cluster has 2 (2 node(s): node1 1, node2 1)",
      "or leave both 0 to derive them"]),
    ("PP does not divide", TWO, NEW, {"pipeline_parallel_size": 3}, ["pipeline_parallel_size 3 does not divide", "node1 1, node2 1"]),
    ("negative TP", TWO, NEW, {"tensor_parallel_size": -2}, ["tensor_parallel_size is -2"]),
    ("unequal GPUs in mp multi-node", [node("node1", "10.0.0.1", gpus=2), node("node2", "10.0.0.2", gpus=1)], NEW,
     {"tensor_parallel_size": 3}, ["same number of GPUs on every node", "node1 2, node2 1"]),
    ("model outside model_dir", TWO, NEW, {"model_path": "/home/me/qwen"},
     ["the model path /home/me/qwen is outside vllm_serve_model_dir /srv/models", "move the model under /srv/models"]),
    ("model escaping model_dir with ..", TWO, NEW, {"model_path": "/srv/models/../etc"}, ["is outside vllm_serve_model_dir"]),
    ("model in a sibling with the same prefix", TWO, NEW, {"model_path": "/srv/models-old/qwen"}, ["is outside vllm_serve_model_dir"]),
    ("no model", TWO, NEW, {"model_path": ""}, ["no model is set"]),
]


@pytest.mark.parametrize(("nodes", "image", "kwargs", "fragments"),
                         [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_impossible_clusters_are_refused_with_hosts_and_fix(nodes, image, kwargs, fragments):
    with pytest.raises(PlanError) as raised:
        plan(nodes, image, **kwargs)
    for fragment in fragments:
        assert fragment in str(raised.value)


# Ray's token authentication (Ray >= 2.52): on with backend ray when the image's Ray has it, else a warning naming
# the image's Ray version.
@pytest.mark.parametrize(("image", "backend", "expected"), [
    (dict(OLD_RAY, ray_version="2.60.0"), "auto", {"version": "2.60.0", "token_auth": True}),
    (dict(OLD_RAY, ray_version="2.52.0"), "auto", {"version": "2.52.0", "token_auth": True}),
    (dict(OLD_RAY, ray_version="2.53.0rc1"), "auto", {"version": "2.53.0rc1", "token_auth": True}),
    (dict(OLD_RAY, ray_version="3.0.0.dev0"), "auto", {"version": "3.0.0.dev0", "token_auth": True}),
    (dict(OLD_RAY, ray_version="2.51.2"), "auto", {"version": "2.51.2", "token_auth": False}),
    (dict(OLD_RAY, ray_version="2.40.0"), "auto", {"version": "2.40.0", "token_auth": False}),
    (dict(OLD_RAY, ray_version="1.13.0"), "auto", {"version": "1.13.0", "token_auth": False}),
    (OLD_RAY, "auto", {"version": None, "token_auth": False}),                     # Ray present, version unknown
    (dict(NEW_RAY, ray_version="2.60.0"), "auto", {"version": "2.60.0", "token_auth": False}),  # mp: no Ray runs
], ids=["2.60", "2.52 (the first)", "a release candidate", "a dev build", "2.51", "2.40", "1.x", "unknown", "mp backend"])
def test_ray_runs_with_token_auth_where_the_image_has_it(image, backend, expected):
    ray = plan(TWO, image, backend=backend)["ray"]
    assert {key: ray[key] for key in expected} == expected


def test_a_ray_without_auth_is_named_in_a_warning_and_the_summary():
    result = plan(TWO, dict(OLD_RAY, ray_version="2.40.0"), ray_port=6380)
    warning = result["ray"]["warning"]
    assert "vllm/vllm-openai:v0.10.0 has Ray 2.40.0, which has no token authentication (Ray >= 2.52 has it)" in warning
    assert "the GCS on :6380" in warning and "firewall" in warning
    assert "Ray on :6380 (no auth: Ray 2.40.0)" in result["summary"]
    authed = plan(TWO, dict(OLD_RAY, ray_version="2.60.0"))
    assert authed["ray"]["warning"] is None and "Ray on :6379 (token auth)" in authed["summary"]
    assert plan(TWO, NEW)["ray"]["warning"] is None  # no Ray runs: nothing to warn about


# `ray start --head` opens Ray's client server whenever the image has grpcio (Ray Client's dependency), and it cannot
# be turned off then: the plan says so, and the Ray units pin its port (closed to non-members by the firewall).
@pytest.mark.parametrize(("image", "backend", "expected"), [
    (dict(OLD_RAY, ray_version="2.40.0", ray_client=True), "auto", True),
    (dict(OLD_RAY, ray_version="2.60.0", ray_client=True), "auto", True),
    (dict(OLD_RAY, ray_version="2.60.0"), "auto", False),             # Ray without grpcio: no client server
    (dict(NEW_RAY, ray_version="2.60.0", ray_client=True), "auto", False),  # mp: no Ray runs
], ids=["old Ray with grpcio", "new Ray with grpcio", "no grpcio", "mp backend"])
def test_the_plan_says_when_rays_client_server_opens(image, backend, expected):
    assert plan(TWO, image, backend=backend)["ray"]["client_server"] is expected


def test_a_ray_version_alone_says_the_image_has_ray():
    result = plan(TWO, dict(OLD_NO_RAY, ray_version="2.60.0"))
    assert result["backend"] == "ray" and result["ray"]["token_auth"] is True


# Docker's containerd image store gives the same image another ID than the classic store: each node's units start
# its own ID, and the nodes are compared by content ID.
MIXED = [dict(node("node1", "10.88.0.2"), image_id="sha256:classic", image_content_id="sha256:content"),
         dict(node("node2", "10.88.0.3"), image_id="sha256:containerd", image_content_id="sha256:content")]


def test_each_member_starts_its_own_image_id_of_the_same_content():
    result = plan(MIXED, dict(NEW, id="sha256:classic", content_id="sha256:content"))
    assert {name: member["image_id"] for name, member in result["members"].items()} == {
        "node1": "sha256:classic", "node2": "sha256:containerd"}
    assert result["image_id"] == "sha256:classic"
    assert result["image_content_id"] == "sha256:content"


def test_a_node_without_its_own_id_starts_the_images():
    result = plan(TWO, NEW)
    assert {member["image_id"] for member in result["members"].values()} == {"sha256:new"}
    assert result["image_content_id"] is None


def test_a_node_holding_other_content_is_refused_by_name():
    nodes = [MIXED[0], dict(MIXED[1], image_content_id="sha256:othercontent")]
    with pytest.raises(PlanError, match=r"node2 sha256:othercontent holds another image than vllm/vllm-openai:v0.32.0 "
                                        r"\(sha256:content, by content ID\)"):
        plan(nodes, dict(NEW, id="sha256:classic", content_id="sha256:content"))


@pytest.mark.parametrize(("address", "expected"), [("10.88.0.2", "10.88.0.2:6380"), ("fd00:88::2", "[fd00:88::2]:6380")])
def test_the_heads_ray_address_is_derived_once_with_ipv6_in_brackets(address, expected):
    """The Ray workers' --address, the cluster's readiness and status all read plan.ray.address: an IPv6 head
    written bare (fd00:88::2:6380) is an address Ray cannot parse."""
    nodes = [node("node1", address), node("node2", "fd00:88::3" if ":" in address else "10.88.0.3")]
    assert plan(nodes, OLD_RAY, ray_port=6380)["ray"]["address"] == expected
