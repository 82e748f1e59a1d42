"""Reading ray.nodes() from the head and comparing it with the inventory."""

import json

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.ray_cluster import RayClusterError, compare, describe, parse_nodes


def ray_node(address, alive=True, gpus=1.0, head=False, node_id=None):
    """One entry of ray.nodes() as Ray 2.40 returns it (trimmed to the keys that matter plus some noise)."""
    resources = {"CPU": 20.0, "memory": 8.4e10, "object_store_memory": 1e8, f"node:{address}": 1.0}
    if gpus:
        resources["GPU"] = gpus
    if head:
        resources["node:__internal_head__"] = 1.0
    return {"NodeID": node_id or f"id-{address}", "Alive": alive, "NodeManagerAddress": address,
            "NodeManagerHostname": "spark", "NodeManagerPort": 6800, "ObjectManagerPort": 6801,
            "Resources": resources if alive else {}, "Labels": {"ray.io/node_id": "x"}}


def output(nodes):
    return ("2026-11-29 18:49:33,100\tINFO worker.py:1654 -- Connecting to existing Ray cluster at address: 10.0.0.1:6379...\n"
            "VLLMOPS-RAY-NODES " + json.dumps(nodes) + "\n")


EXPECTED = {"spark-1": {"address": "10.0.0.1", "gpus": 1}, "spark-2": {"address": "10.0.0.2", "gpus": 1}}


def test_parse_skips_ray_logging_around_the_table():
    nodes = parse_nodes(output([ray_node("10.0.0.1", head=True), ray_node("10.0.0.2")]))
    assert [(n["address"], n["alive"], n["gpus"], n["head"]) for n in nodes] == [
        ("10.0.0.1", True, 1.0, True), ("10.0.0.2", True, 1.0, False)]


def test_parse_without_a_table_says_what_ray_printed():
    with pytest.raises(RayClusterError, match="ConnectionError: Could not find any running Ray instance"):
        parse_nodes("ConnectionError: Could not find any running Ray instance. Please specify the one to connect to\n")


def test_every_node_with_its_gpus_is_ready():
    ready, summary = compare(parse_nodes(output([ray_node("10.0.0.1", head=True), ray_node("10.0.0.2")])), EXPECTED)
    assert ready
    assert summary["alive_nodes"] == 2 and summary["gpus"] == 2 and summary["present"] == ["spark-1", "spark-2"]


def test_a_missing_worker_is_named_with_its_address():
    ready, summary = compare(parse_nodes(output([ray_node("10.0.0.1", head=True)])), EXPECTED)
    assert not ready
    assert summary["missing"] == ["spark-2 (10.0.0.2)"]
    message = describe(summary, 180)
    assert "not in the Ray cluster: spark-2 (10.0.0.2)" in message
    assert "1 alive node(s) and 1 GPU(s), expected 2 node(s) and 2 GPU(s)" in message


def test_a_worker_that_died_and_rejoined_counts_once():
    nodes = [ray_node("10.0.0.1", head=True), ray_node("10.0.0.2", alive=False, node_id="old"), ray_node("10.0.0.2", node_id="new")]
    ready, summary = compare(parse_nodes(output(nodes)), EXPECTED)
    assert ready and summary["alive_nodes"] == 2 and summary["dead"] == []


def test_a_dead_worker_is_missing_and_listed_as_dead():
    nodes = [ray_node("10.0.0.1", head=True), ray_node("10.0.0.2", alive=False)]
    ready, summary = compare(parse_nodes(output(nodes)), EXPECTED)
    assert not ready and summary["dead"] == ["10.0.0.2"] and summary["missing"] == ["spark-2 (10.0.0.2)"]


def test_a_node_without_its_gpus_is_short():
    ready, summary = compare(parse_nodes(output([ray_node("10.0.0.1", head=True), ray_node("10.0.0.2", gpus=0)])), EXPECTED)
    assert not ready and summary["short_of_gpus"] == ["spark-2 has 0 of 1 GPU(s)"]


def test_a_node_on_the_wrong_address_is_unexpected_and_the_right_one_missing():
    # Ray picked the management address (the node IP was not pinned).
    nodes = [ray_node("10.0.0.1", head=True), ray_node("192.168.1.102")]
    ready, summary = compare(parse_nodes(output(nodes)), EXPECTED)
    assert not ready and summary["unexpected"] == ["192.168.1.102"] and summary["missing"] == ["spark-2 (10.0.0.2)"]
