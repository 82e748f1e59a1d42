"""The plan owns the command: a flag it sets is refused in vllm_serve_args in any spelling, naming the setting to use,
and a rank's settings are the inventory's flags, then the plan's, then the name, address and port it serves on."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PlanError, make_plan, owned_flags, serve_settings
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import settings_to_argv

IMAGE = {"id": "sha256:new", "name": "vllm/vllm-openai:v0.32.0", "vllm_version": "0.32.0", "has_ray": False,
         "multinode_modes": ["native", "data_parallel"]}
NODES = [{"name": n, "address": a, "gpus": 1, "head": "node1"} for n, a in (("node1", "10.88.0.2"), ("node2", "10.88.0.3"))]
PLAN = make_plan(NODES, IMAGE, model_path="/srv/models/qwen", api_port=8000, vllm_port=8001)

REFUSED = [
    # (key as written, the flag named, the setting named)
    ("tensor_parallel_size", "--tensor-parallel-size", "vllm_serve_tensor_parallel_size"),
    ("tensor-parallel-size", "--tensor-parallel-size", "vllm_serve_tensor_parallel_size"),
    ("--tensor-parallel-size", "--tensor-parallel-size", "vllm_serve_tensor_parallel_size"),
    ("-tp", "--tensor-parallel-size", "vllm_serve_tensor_parallel_size"),
    ("pipeline_parallel_size", "--pipeline-parallel-size", "vllm_serve_pipeline_parallel_size"),
    ("-pp", "--pipeline-parallel-size", "vllm_serve_pipeline_parallel_size"),
    ("distributed-executor-backend", "--distributed-executor-backend", "vllmops_backend"),
    ("nnodes", "--nnodes", "vllm_nodes group"),
    ("-n", "--nnodes", "vllm_nodes group"),
    ("--node-rank", "--node-rank", "vllm_nodes group"),
    ("-r", "--node-rank", "vllm_nodes group"),
    ("headless", "--headless", "every node but the head runs headless"),
    ("master_addr", "--master-addr", "vllmops_head_host"),
    ("master-port", "--master-port", "vllmops_master_port"),
    ("host", "--host", "vllm_serve_host"),
    ("--port", "--port", "vllm_serve_port"),
    ("served-model-name", "--served-model-name", "vllm_serve_served_model_name"),
    ("model", "--model", "vllm_serve_model"),
]


@pytest.mark.parametrize(("key", "flag", "setting"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_flag_the_plan_sets_is_refused_in_any_spelling_naming_the_setting_to_use(key, flag, setting):
    [sentence] = owned_flags({"max_model_len": 4096, key: 4})
    assert f"vllm_serve_args sets {flag}" in sentence and setting in sentence, sentence
    assert (f"(written {key!r})" in sentence) == (key != flag.lstrip("-").replace("-", "_")), sentence
    with pytest.raises(PlanError) as refused:
        serve_settings({key: 4}, PLAN, "node1", "qwen", "127.0.0.1")
    assert str(refused.value) == sentence


@pytest.mark.parametrize("args", [
    {}, None, {"max_model_len": 4096, "enable_prefix_caching": True, "tool_call_parser": "hermes"},
    # not the plan's: other parallel settings, a flag that only starts like one of them, a short flag of another
    {"data_parallel_size": 2, "enable_expert_parallel": True, "max_num_seqs": 8, "-q": "fp8", "hostname": "x",
     "port_range": 1, "model_impl": "vllm"},
], ids=["empty", "none", "ordinary flags", "near misses"])
def test_flags_the_plan_does_not_set_pass(args):
    assert owned_flags(args) == []


def test_every_refusal_at_once():
    found = owned_flags({"-tp": 4, "port": 9000, "max_model_len": 1})
    assert [s.split(" which")[0] for s in found] == ["vllm_serve_args sets --tensor-parallel-size (written '-tp'),",
                                                    "vllm_serve_args sets --port,"], found


def test_a_rank_gets_the_inventory_flags_then_the_plan_then_where_it_serves_each_flag_once():
    args = {"max_model_len": 4096, "enable_prefix_caching": True}
    head = serve_settings(args, PLAN, "node1", "qwen", "127.0.0.1")
    worker = serve_settings(args, PLAN, "node2", "qwen", "127.0.0.1")
    assert list(head) == ["max_model_len", "enable_prefix_caching", "tensor_parallel_size", "pipeline_parallel_size",
                          "distributed_executor_backend", "nnodes", "node_rank", "master_addr", "master_port",
                          "served_model_name", "host", "port"], head
    assert (head["tensor_parallel_size"], head["node_rank"], head["port"]) == (2, 0, 8001)
    assert (worker["node_rank"], worker["headless"], worker["master_addr"]) == (1, True, "10.88.0.2")
    argv = settings_to_argv(worker)
    assert argv.count("--tensor-parallel-size") == 1 and argv.count("--port") == 1, argv
    assert args == {"max_model_len": 4096, "enable_prefix_caching": True}, "the inventory's settings were changed"
