"""The fleet: several services placed at once, each replica on its nodes and GPUs with its ports, units and vLLM flags,
or the one refusal naming the service, the hosts and the fix."""

import json
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.fleet import FLEET_OWNED, FleetError, make_fleet
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PLAN_OWNED, PlanError

GIB = 1 << 30
SERVE_FLAGS = Path(__file__).parents[3] / "fixtures" / "vllm" / "serve_flags"


def node(name, gpus=1, address=None, memory=0):
    return {"name": name, "gpus": gpus, "address": f"10.0.0.{name[-1]}" if address is None else address,
            "gpu_memory_bytes": memory}


SANDBOX = [node("node1", 2), node("node2", 1)]
SPARKS = [node(f"spark{i}") for i in (1, 2, 3)]
RTX8 = [node("rtx1", 8)]
TWO_BY_FOUR = [node("node1", 4), node("node2", 4)]
TINY = {"name": "tiny", "model": "Qwen/Qwen3-0.6B", "replicas": 2}
TINY_B = {"name": "tiny-b", "model": "/srv/models/qwen3-0.6b"}


def where(fleet):
    """Each service's replicas as 'host[gpus]+host[gpus]'."""
    return {service["name"]: ["+".join(f"{u['host']}{u['gpus']}" for u in replica["units"]) for replica in service["replicas"]]
            for service in fleet["services"]}


def units(fleet, name):
    return [unit for service in fleet["services"] if service["name"] == name for replica in service["replicas"] for unit in replica["units"]]


def test_the_sandbox_fleet_spreads_replicas_then_fills_the_free_gpu():
    fleet = make_fleet([TINY, TINY_B], SANDBOX, reserved_ports={8000: "the API proxy"})
    assert where(fleet) == {"tiny": ["node1[0]", "node2[0]"], "tiny-b": ["node1[1]"]}
    assert [(u["unit"], u["port"]) for u in units(fleet, "tiny") + units(fleet, "tiny-b")] == [
        ("vllmops-vllm-tiny-0", 8100), ("vllmops-vllm-tiny-1", 8100), ("vllmops-vllm-tiny-b-0", 8101)]
    assert fleet["hosts"] == {"node1": ["vllmops-vllm-tiny-0", "vllmops-vllm-tiny-b-0"], "node2": ["vllmops-vllm-tiny-1"]}
    assert fleet["upstreams"] == {"tiny": ["10.0.0.1:8100", "10.0.0.2:8100"], "tiny-b": ["10.0.0.1:8101"]}
    assert fleet["summary"].splitlines() == ["tiny: 2 replicas x TP 1 x PP 1 x DP 1 on node1[0], node2[0], port 8100",
                                             "tiny-b: 1 replica x TP 1 x PP 1 x DP 1 on node1[1], port 8101"]
    [unit] = units(fleet, "tiny-b")
    assert unit["flags"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "served_model_name": "tiny-b",
                             "model": "/srv/models/qwen3-0.6b", "port": 8101}
    assert unit["serves_http"] and unit["node_rank"] == 0


@pytest.mark.parametrize(("order", "expected"), [
    (["big", "coder"], {"big": ["spark1[0]+spark2[0]"], "coder": ["spark3[0]"]}),
    # a replica that fits one node never breaks up a node another needs whole: the span takes the free ones
    (["coder", "big"], {"coder": ["spark1[0]"], "big": ["spark2[0]+spark3[0]"]}),
])
def test_three_sparks_a_tp2_replica_spans_two_nodes_and_the_coder_takes_the_third(order, expected):
    services = {"big": {"name": "big", "model": "Qwen/Qwen3-30B-A3B", "tensor_parallel_size": 2},
                "coder": {"name": "coder", "model": "/srv/models/coder"}}
    fleet = make_fleet([services[name] for name in order], SPARKS)
    assert where(fleet) == expected
    head, worker = units(fleet, "big")
    first = expected["big"][0].split("+")[0][:-3]
    assert head["unit"] == "vllmops-vllm-big-0" and worker["unit"] == "vllmops-vllm-big-0-r1"
    assert head["host"] == first and head["serves_http"] and not worker["serves_http"]
    common = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "served_model_name": "big", "model": "/srv/models/big",
              "port": 8100, "nnodes": 2, "master_addr": f"10.0.0.{first[-1]}", "master_port": 29600}
    assert head["flags"] == {**common, "node_rank": 0}
    assert worker["flags"] == {**common, "node_rank": 1, "headless": True}
    assert fleet["services"][order.index("big")]["replicas"][0]["master_port"] == 29600


def test_one_eight_gpu_host_holds_both_tp4_replicas_on_their_own_gpus_and_ports():
    fleet = make_fleet([{"name": "llama", "model": "meta-llama/Llama-3.1-70B", "tensor_parallel_size": 4, "replicas": 2}], RTX8)
    first, second = units(fleet, "llama")
    assert (first["gpus"], second["gpus"]) == ([0, 1, 2, 3], [4, 5, 6, 7])
    assert (first["unit"], second["unit"]) == ("vllmops-vllm-llama-0", "vllmops-vllm-llama-1")
    assert (first["port"], second["port"]) == (8100, 8101)
    assert "nnodes" not in first["flags"] and fleet["upstreams"]["llama"] == ["10.0.0.1:8100", "10.0.0.1:8101"]
    assert fleet["summary"] == "llama: 2 replicas x TP 4 x PP 1 x DP 1 on rtx1[0-3], rtx1[4-7], ports 8100, 8101"


def test_dp2_with_expert_parallel_over_two_single_gpu_nodes():
    fleet = make_fleet([{"name": "moe", "model": "Qwen/Qwen3-30B-A3B", "data_parallel_size": 2, "enable_expert_parallel": True}],
                       SPARKS[:2], reserved_ports={29700: "the image copy"})
    [replica] = fleet["services"][0]["replicas"]
    head, worker = replica["units"]
    common = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "served_model_name": "moe", "model": "/srv/models/moe",
              "port": 8100, "data_parallel_size": 2, "data_parallel_size_local": 1, "data_parallel_address": "10.0.0.1",
              "data_parallel_rpc_port": 29701, "enable_expert_parallel": True}
    assert head["flags"] == common
    assert worker["flags"] == {**common, "data_parallel_start_rank": 1, "headless": True}
    assert (replica["dp_rpc_port"], replica["master_port"]) == (29701, None)
    assert fleet["services"][0]["layout"]["data_parallel_size_local"] == 1
    assert fleet["summary"] == "moe: 1 replica x TP 1 x PP 1 x DP 2 (EP) on spark1[0]+spark2[0], port 8100"


def test_dp_on_one_node_names_no_address_and_no_rpc_port():
    fleet = make_fleet([{"name": "moe", "model": "a/moe", "data_parallel_size": 2, "tensor_parallel_size": 2,
                         "enable_expert_parallel": True}], TWO_BY_FOUR)
    [unit] = units(fleet, "moe")
    assert unit["gpus"] == [0, 1, 2, 3]
    assert {key: unit["flags"][key] for key in unit["flags"] if key.startswith(("data_", "enable_"))} == {
        "data_parallel_size": 2, "enable_expert_parallel": True}
    assert fleet["services"][0]["layout"]["data_parallel_size_local"] == 2


def test_data_parallel_size_local_fixes_the_ranks_per_node():
    fleet = make_fleet([{"name": "moe", "model": "a/moe", "data_parallel_size": 4, "data_parallel_size_local": 2}], TWO_BY_FOUR)
    head, worker = units(fleet, "moe")
    assert (head["host"], head["gpus"], worker["host"], worker["gpus"]) == ("node1", [0, 1], "node2", [0, 1])
    assert worker["flags"]["data_parallel_start_rank"] == 2 and worker["flags"]["data_parallel_size_local"] == 2


def test_pipeline_stages_span_nodes_with_whole_nodes_each():
    fleet = make_fleet([{"name": "big", "model": "a/big", "tensor_parallel_size": 4, "pipeline_parallel_size": 2}], TWO_BY_FOUR)
    assert where(fleet) == {"big": ["node1[0, 1, 2, 3]+node2[0, 1, 2, 3]"]}
    assert fleet["services"][0]["gpus_per_replica"] == 8


def test_listed_gpus_are_kept_from_services_placed_before():
    fleet = make_fleet([{"name": "any", "model": "a/b"}, {"name": "pinned", "model": "a/c", "gpus": {"rtx1": [0, 1]}}], RTX8)
    assert where(fleet) == {"any": ["rtx1[2]"], "pinned": ["rtx1[0]"]}


def test_an_assigned_port_skips_reserved_ports_and_the_ports_services_set():
    fleet = make_fleet([{"name": "a", "model": "a/a"}, {"name": "b", "model": "a/b", "port": 8101}], RTX8,
                       reserved_ports={"8100": "the API proxy"})
    assert [replica["port"] for service in fleet["services"] for replica in service["replicas"]] == [8102, 8101]


def test_an_unknown_address_is_left_out_of_flags_and_upstreams():
    fleet = make_fleet([{"name": "big", "model": "a/b", "tensor_parallel_size": 2}], [node("n1", address=""), node("n2", address="")])
    assert "master_addr" not in units(fleet, "big")[0]["flags"] and fleet["upstreams"] == {"big": []}


def test_an_ipv6_upstream_is_bracketed():
    fleet = make_fleet([{"name": "a", "model": "a/b"}], [node("n1", address="fd00::1")])
    assert fleet["upstreams"] == {"a": ["[fd00::1]:8100"]}


def test_group_picks_the_hosts():
    fleet = make_fleet([{"name": "a", "model": "a/b", "group": "pair", "replicas": 2}], SPARKS, groups={"pair": ["spark3", "spark2"]})
    assert where(fleet) == {"a": ["spark2[0]", "spark3[0]"]}


# --- Memory ----------------------------------------------------------------------------------------------------
SHAPE_70B = {"attention_heads": 64, "kv_heads": 8, "layers": 80, "head_dim": 128, "dtype": "bfloat16", "max_model_len": 131072}
MEMORY_70B = {"llama": {"shape": SHAPE_70B, "weight_bytes": 140 * GIB, "settings": {"max_model_len": 8192}}}


def test_memory_that_fits_passes():
    make_fleet([{"name": "llama", "model": "a/b", "tensor_parallel_size": 8}], [node("h1", 8, memory=80 * GIB)], memory=MEMORY_70B)


def test_memory_that_does_not_fit_names_the_service_and_what_would():
    # the second replica lands on the 16 GiB host: the smallest GPU the service got decides
    with pytest.raises(FleetError) as refused:
        make_fleet([{"name": "llama", "model": "a/b", "tensor_parallel_size": 8, "replicas": 2}],
                   [node("h1", 8, memory=80 * GIB), node("h2", 8, memory=16 * GIB)], memory=MEMORY_70B)
    message = str(refused.value)
    assert message.startswith("vllmops_services: service llama: one rank of llama's model"), message
    assert "(16.0 GiB x gpu_memory_utilization 0.9)" in message and "weights alone do not fit" in message, message


# --- Refusals ----------------------------------------------------------------------------------------------------
def svc(name="tiny", **keys):
    return {"name": name, "model": "Qwen/Qwen3-0.6B", **keys}


REFUSED = [
    ("gpu given twice", [svc("a", gpus={"rtx1": [0, 1]}), svc("b", gpus={"rtx1": [1, 2]})], RTX8, {},
     ["services a and b", "GPU(s) 1 of rtx1", "give each GPU to one service"]),
    ("gpu index out of range", [svc(gpus={"node2": [1]})], SANDBOX, {}, ["service tiny", "node2 has 1 GPU(s)", "indices 0 to 0"]),
    ("gpu twice in one list", [svc(gpus={"rtx1": [3, 3]})], RTX8, {}, ["service tiny", "rtx1", "3 more than once"]),
    ("gpus of a host not its own", [svc(nodes=["node1"], gpus={"node2": [0]})], SANDBOX, {}, ["gpus name node2", "its nodes (node1)"]),
    ("not enough gpus", [TINY, TINY_B, svc("more")], SANDBOX, {},
     ["service more needs 1 GPU(s) per replica x 1", "node1 0 of 2, node2 0 of 1", "only 0 free",
      "after tiny: node1 GPU 0, node2 GPU 0; tiny-b: node1 GPU 1", "give it more nodes or GPUs"]),
    ("free gpus in the wrong shape", [svc("a", replicas=2), svc("big", tensor_parallel_size=2)], [node("n1", 2), node("n2", 2)],
     {}, ["service big needs 2 GPU(s)", "have 2 free", "after a: n1 GPU 0, n2 GPU 0", "but not as a replica takes them"]),
    ("too many replicas", [svc(replicas=3)], SANDBOX[1:], {}, ["x 3 replica(s)", "node2 1 of 1", "only 1 free"]),
    ("port shared on a host", [svc("a", port=8120), svc("b", port=8120)], RTX8, {},
     ["service b", "port 8120 on rtx1", "vllmops-vllm-a-0 (service a) already does"]),
    ("port of own replicas on one host", [svc("a", port=8120, replicas=2)], RTX8, {}, ["replica a-1 would listen on port 8120"]),
    ("reserved port", [svc(port=8000)], SANDBOX, {"reserved_ports": {8000: "the API proxy"}},
     ["service tiny sets port 8000", "which the API proxy uses", "choose another port"]),
    ("duplicate names", [svc(), svc()], SANDBOX, {}, ["services tiny and tiny are both named", "rename one"]),
    ("unit names collide", [svc("a.b"), svc("a_b")], SANDBOX, {}, ["services a.b and a_b would both name their units", "-a-b-"]),
    ("unknown key", [svc(tensor_parallel=2)], SANDBOX, {}, ["service tiny", "unknown key(s) tensor_parallel", "tensor_parallel_size"]),
    ("unknown host", [svc(nodes=["node3"])], SANDBOX, {}, ["service tiny", "node3, which is not a serving node", "node1, node2"]),
    ("unknown group", [svc(group="gpu")], SANDBOX, {"groups": {"all": ["node1", "node2"], "big": ["node1"]}},
     ["group 'gpu'", "all, big"]),
    ("group with a host not serving", [svc(group="big")], SANDBOX, {"groups": {"big": ["node1", "proxy"]}},
     ["its group big holds proxy"]),
    ("nodes and group", [svc(nodes=["node1"], group="big")], SANDBOX, {"groups": {"big": ["node1"]}}, ["both nodes and group"]),
    ("model outside model_dir", [svc(model="/data/qwen")], SANDBOX, {}, ["service tiny", "/data/qwen", "outside", "/srv/models"]),
    ("no model", [{"name": "tiny"}], SANDBOX, {}, ["service tiny has no model"]),
    ("no name", [{"model": "a/b"}], SANDBOX, {}, ["item 1 has no name"]),
    ("bad name", [svc("Tiny")], SANDBOX, {}, ["service Tiny", "a-z, 0-9", "rename it"]),
    ("plan-owned flag in args", [svc(args={"-tp": 2, "max_model_len": 4096})], SANDBOX, {},
     ["service tiny", "--tensor-parallel-size (written '-tp')", "set the service's tensor_parallel_size instead"]),
    ("data parallel flag in args", [svc(args={"data-parallel-size": 2})], SANDBOX, {}, ["--data-parallel-size", "service's data_parallel_size"]),
    ("expert parallel in args", [svc(args={"-ep": True})], SANDBOX, {}, ["--enable-expert-parallel", "service's enable_expert_parallel"]),
    ("port in args", [svc(args={"port": 9000})], SANDBOX, {}, ["--port", "service's port"]),
    ("replicas < 1", [svc(replicas=0)], SANDBOX, {}, ["service tiny sets replicas 0", "1 or more"]),
    ("tp < 1", [svc(tensor_parallel_size=0)], SANDBOX, {}, ["service tiny sets tensor_parallel_size 0", "1 or more"]),
    ("tp not a number", [svc(tensor_parallel_size=True)], SANDBOX, {}, ["tensor_parallel_size True"]),
    ("dp local not dividing dp", [svc(data_parallel_size=4, data_parallel_size_local=3)], SANDBOX, {},
     ["data_parallel_size_local 3 with data_parallel_size 4", "must divide 4"]),
    ("expert parallel on one rank", [svc(enable_expert_parallel=True)], SANDBOX, {}, ["enable_expert_parallel with tensor_parallel_size 1"]),
    ("memory of an unknown service", [svc()], SANDBOX, {"memory": {"other": {}}}, ["memory check names other"]),
    ("one address twice", [svc()], [node("n1", address="10.0.0.9"), node("n2", address="10.0.0.9")], {},
     ["n1 and n2 both have the cluster address 10.0.0.9"]),
]


@pytest.mark.parametrize(("services", "nodes", "kwargs", "fragments"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_fleet_that_cannot_run_is_refused_naming_the_service_and_the_fix(services, nodes, kwargs, fragments):
    with pytest.raises(FleetError) as refused:
        make_fleet(services, nodes, **kwargs)
    message = str(refused.value)
    assert isinstance(refused.value, PlanError) and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_every_flag_the_plan_owns_is_refused_in_a_services_args():
    assert set(PLAN_OWNED) <= set(FLEET_OWNED)


# --- The flags exist in vLLM ---------------------------------------------------------------------------------------
def _newest_parser():
    files = sorted(SERVE_FLAGS.glob("*.json"), key=lambda path: [int(part) for part in path.stem.split(".")[:3]])
    return json.loads(files[-1].read_text())


EMITTED = {"tensor_parallel_size", "pipeline_parallel_size", "served_model_name", "model", "port", "nnodes", "node_rank",
           "master_addr", "master_port", "headless", "data_parallel_size", "data_parallel_size_local", "data_parallel_address",
           "data_parallel_rpc_port", "data_parallel_start_rank", "enable_expert_parallel"}


def test_every_flag_a_unit_can_get_is_in_vllms_parser():
    fleets = [make_fleet([{"name": "big", "model": "a/b", "tensor_parallel_size": 2}], SPARKS),
              make_fleet([{"name": "moe", "model": "a/b", "data_parallel_size": 2, "enable_expert_parallel": True}], SPARKS)]
    seen = {key for fleet in fleets for service in fleet["services"] for replica in service["replicas"]
            for unit in replica["units"] for key in unit["flags"]}
    assert seen == EMITTED
    parser = _newest_parser()
    missing = sorted(f"--{key.replace('_', '-')}" for key in EMITTED if f"--{key.replace('_', '-')}" not in parser["flags"])
    assert not missing, f"vLLM {parser['vllm']} has no {missing}"
