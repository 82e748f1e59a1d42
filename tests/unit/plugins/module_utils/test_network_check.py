"""The bandwidth check's groups, its judgement against the link's speed, and the results kept beside the
benchmark's."""

from __future__ import annotations

import json

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.network_check import NetworkCheckError, earlier, groups, markdown, problems, rows


def test_every_pair_then_the_ring():
    assert groups(["a", "b"]) == [["a", "b"]]  # two nodes: the pair is the ring
    assert groups(["a", "b", "c"]) == [["a", "b"], ["a", "c"], ["b", "c"], ["a", "b", "c"]]
    assert groups(["a", "b", "c"], pairs=False) == [["a", "b", "c"]]
    assert groups(["a"]) == [["a"]]


def _measured(nodes, busbw):
    return {"nodes": nodes, "result": {"busbw_gbit": busbw, "algbw_gbit": busbw, "backend": "gloo", "bytes": 1 << 24,
                                       "iterations": 9}}


def test_a_group_is_judged_by_its_slowest_member():
    table = rows([_measured(["spark-1", "spark-2"], 90.0), _measured(["spark-1", "spark-3"], 30.0)],
                 {"spark-1": 200000, "spark-2": 200000, "spark-3": 100000}, 0.5)
    assert [(r["link"], r["link_gbit"], r["ratio"], r["slow"]) for r in table] == [
        ("spark-1 <-> spark-2", 200.0, 0.45, True), ("spark-1 <-> spark-3", 100.0, 0.3, True)]
    [first, _] = problems(table, 0.5)
    assert first.startswith("spark-1 <-> spark-2: 90 Gbit/s of bus bandwidth, 45% of the link's 200 Gbit/s, below "
                            "network_check_min_ratio 0.5")


def test_an_unknown_speed_is_not_judged_and_a_missing_result_is_an_error():
    [row] = rows([_measured(["a", "b"], 5.0)], {"a": 0, "b": 10000}, 0.5)
    assert row["ratio"] is None and not row["slow"] and problems([row], 0.5) == []
    with pytest.raises(NetworkCheckError, match="a <-> b: no result"):
        rows([{"nodes": ["a", "b"], "result": {}}], {}, 0.5)


def test_results_are_kept_and_compared_with_the_newest_earlier_check(tmp_path):
    (tmp_path / "20261201T100000Z-tiny.json").write_text(json.dumps({"schema": "vllmops.benchmark/1"}))  # the benchmark's
    older = {"schema": "vllmops.network-check/1", "stamp": {"time": "2026-12-01T10:00:00Z"}, "min_ratio": 0.5,
             "rows": rows([_measured(["a", "b"], 0.35)], {"a": 400, "b": 400}, 0.5), "problems": []}
    (tmp_path / "20261201T100000Z-network.json").write_text(json.dumps(older))
    [before] = earlier(str(tmp_path))
    now = dict(older, stamp={"time": "2026-12-05T10:00:00Z"}, rows=rows([_measured(["a", "b"], 0.03)], {"a": 400, "b": 400}, 0.5))
    now["problems"] = problems(now["rows"], 0.5)
    text = markdown(now, before)
    assert "| a <-> b | gloo | 0.03 | 0.4 | 8% (slow) | 0.35 |" in text
    assert "Before: 2026-12-01T10:00:00Z (20261201T100000Z-network.json)." in text
