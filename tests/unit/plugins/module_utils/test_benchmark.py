"""The benchmark playbook's results: vllm bench serve's result JSON -> rows, the
comparison with the previous run in the directory, the problems that make a
sweep no measurement."""

from __future__ import annotations

import json

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import benchmark


def result(concurrency, tok_s, ttft, completed=16, failed=0):
    """What `vllm bench serve --save-result` writes (the keys the rows read, and some they do not)."""
    return {"max_concurrency": concurrency, "num_prompts": completed + failed, "completed": completed,
            "failed": failed, "duration": 2.5, "total_output_tokens": completed * 16, "output_throughput": tok_s,
            "total_token_throughput": tok_s * 3, "request_throughput": tok_s / 16, "median_ttft_ms": ttft,
            "p99_ttft_ms": ttft * 2, "median_itl_ms": 20.0, "p99_itl_ms": 45.0, "median_tpot_ms": 21.0,
            "p99_tpot_ms": 40.0, "mean_ttft_ms": ttft, "backend": "openai", "date": "20261202-101500"}


def sweep(*levels):
    return [{"concurrency": c, "result": result(c, tok_s, ttft)} for c, tok_s, ttft in levels]


STAMP = {"time": "2026-12-02T10:15:00Z", "model": "Qwen/Qwen3.5-122B-A10B-FP8", "image_id": "sha256:aaaa",
         "vllm_version": "0.33.0", "nodes": ["spark-1", "spark-2"], "backend": "mp",
         "serve_args": ["serve", "/srv/models/qwen", "--max-model-len", "32768", "--tensor-parallel-size", "2"],
         "input_len": 512, "output_len": 128, "gpus": 2, "tensor_parallel_size": 2, "pipeline_parallel_size": 1}


def test_rows_are_ordered_by_concurrency_and_keep_the_figures():
    rows = benchmark.rows(sweep((16, 500.0, 100.0), (1, 27.0, 35.0), (4, 90.0, 60.0)))
    assert [row["concurrency"] for row in rows] == [1, 4, 16]
    assert rows[0] == {"concurrency": 1, "prompts": 16, "completed": 16, "failed": 0, "duration_s": 2.5,
                       "output_tokens": 256, "output_tok_s": 27.0, "total_tok_s": 81.0, "request_s": 27.0 / 16,
                       "ttft_median_ms": 35.0, "ttft_p99_ms": 70.0, "itl_median_ms": 20.0, "itl_p99_ms": 45.0,
                       "tpot_median_ms": 21.0, "tpot_p99_ms": 40.0}


def test_a_result_that_is_not_vllm_bench_serves_is_refused():
    with pytest.raises(benchmark.BenchmarkError, match="concurrency 4"):
        benchmark.rows([{"concurrency": 4, "result": {"error": "connection refused"}}])


def test_failed_requests_empty_levels_and_failed_clients_are_problems_in_concurrency_order():
    rows = benchmark.rows([{"concurrency": 1, "result": result(1, 27.0, 35.0, completed=14, failed=2)},
                           {"concurrency": 4, "result": result(4, 0.0, 0.0, completed=0, failed=16)}])
    failed = [{"concurrency": 16, "rc": 124, "error": ""},
              {"concurrency": 2, "rc": 1, "error": "ValueError: Initial test run failed - Please make sure ..."}]
    assert benchmark.problems(rows, failed) == [
        "concurrency 1: 2 of 16 requests failed",
        "concurrency 2: vllm bench serve exited 1: ValueError: Initial test run failed - Please make sure ...",
        "concurrency 4: no request completed",
        "concurrency 16: timed out"]


def test_the_file_stem_sorts_by_time_and_names_the_model():
    assert benchmark.file_stem(STAMP) == "20261202T101500Z-Qwen_Qwen3.5-122B-A10B-FP8"


def _write(directory, stamp, rows):
    path = directory / (benchmark.file_stem(stamp) + ".json")
    path.write_text(json.dumps({"schema": benchmark.SCHEMA, "stamp": stamp, "rows": rows}))
    return path


def test_the_previous_result_is_the_newest_earlier_one_of_ours(tmp_path):
    assert benchmark.previous(str(tmp_path / "missing")) is None
    old = _write(tmp_path, {**STAMP, "time": "2026-11-30T09:00:00Z"}, [])
    newer = _write(tmp_path, {**STAMP, "time": "2026-12-01T09:00:00Z"}, [])
    (tmp_path / "notes.json").write_text('{"something": "else"}')
    (tmp_path / "broken.json").write_text("{")
    assert benchmark.previous(str(tmp_path))["path"] == str(newer)
    assert benchmark.previous(str(tmp_path), exclude=str(newer))["path"] == str(old)


def test_the_table_shows_the_change_against_the_previous_run_and_what_differs(tmp_path):
    before = _write(tmp_path, {**STAMP, "time": "2026-12-01T09:00:00Z", "image_id": "sha256:bbbb"},
                    benchmark.rows(sweep((1, 25.0, 40.0), (4, 100.0, 50.0))))
    rows = benchmark.rows(sweep((1, 27.0, 35.0), (4, 90.0, 60.0), (16, 500.0, 100.0)))
    text = benchmark.markdown({"stamp": STAMP, "rows": rows, "problems": []}, benchmark.previous(str(tmp_path)))
    lines = text.splitlines()
    assert "| concurrency | output tok/s | requests/s | TTFT median ms | TTFT p99 ms | ITL median ms | ITL p99 ms |" in lines
    assert "| 1 | 27.0 (+8 %) | 1.69 (+8 %) | 35.0 (-12 %) | 70.0 (-12 %) | 20.00 (+0 %) | 45.00 (+0 %) |" in lines
    assert "| 4 | 90.0 (-10 %) | 5.62 (-10 %) | 60.0 (+20 %) | 120.0 (+20 %) | 20.00 (+0 %) | 45.00 (+0 %) |" in lines
    assert "| 16 | 500.0 | 31.25 | 100.0 | 200.0 | 20.00 | 45.00 |" in lines  # no earlier figure to compare with
    assert f"against {before.name}" in text
    assert "What differs from it: image_id." in text
    assert "- cluster: mp backend, 2 node(s) (spark-1, spark-2), 2 GPU(s), TP 2 x PP 1" in lines
    assert "- vllm serve serve /srv/models/qwen --max-model-len 32768 --tensor-parallel-size 2" not in lines
    assert "- vllm serve /srv/models/qwen --max-model-len 32768 --tensor-parallel-size 2" in lines


def test_a_first_run_says_there_is_nothing_to_compare_with_and_names_its_problems():
    rows = benchmark.rows([{"concurrency": 1, "result": result(1, 27.0, 35.0, completed=15, failed=1)}])
    text = benchmark.markdown({"stamp": STAMP, "rows": rows, "problems": benchmark.problems(rows)}, None)
    assert "No earlier result in this directory to compare with." in text
    assert text.rstrip().endswith("Problems: concurrency 1: 1 of 16 requests failed.")


# One service of several (vllmops_services): the role stamps it with its name, replicas and layout.
SERVICE = {**STAMP, "service": "chat", "model": "org/chat-model", "model_path": "/srv/models/chat", "replicas": 2,
           "layout": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1,
                      "data_parallel_size_local": 1, "enable_expert_parallel": False},
           "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "gpus": 2}


def test_a_services_report_is_named_after_the_service_and_says_its_replicas_and_layout():
    assert benchmark.file_stem(SERVICE) == "20261202T101500Z-chat"
    rows = benchmark.rows(sweep((1, 27.0, 35.0)))
    lines = benchmark.markdown({"stamp": SERVICE, "rows": rows, "problems": []}, None).splitlines()
    assert lines[0] == "# vLLM benchmark: chat"
    assert "- service: chat, 2 replicas x TP 1 x PP 1 x DP 1" in lines
    assert "- model: org/chat-model (/srv/models/chat)" in lines
    # the plan's one model keeps its report as it was
    assert not any(line.startswith("- service:") for line in benchmark.markdown({"stamp": STAMP, "rows": rows}, None).splitlines())


def test_a_service_compared_with_its_run_on_fewer_replicas_names_what_differs(tmp_path):
    _write(tmp_path, {**SERVICE, "time": "2026-12-01T09:00:00Z", "replicas": 1, "gpus": 1,
                      "layout": {**SERVICE["layout"], "enable_expert_parallel": True}},
           benchmark.rows(sweep((16, 250.0, 100.0))))
    rows = benchmark.rows(sweep((16, 500.0, 100.0)))
    text = benchmark.markdown({"stamp": SERVICE, "rows": rows, "problems": []}, benchmark.previous(str(tmp_path)))
    assert "| 16 | 500.0 (+100 %) |" in text
    assert "What differs from it: replicas, layout." in text


@pytest.mark.parametrize(("stamp", "levels", "problems", "line"), [
    (SERVICE, ((1, 27.04, 35.0), (16, 500.0, 100.0)), [],
     "chat (2 replicas x TP 1 x PP 1 x DP 1): output tok/s at concurrency 1: 27.0, 16: 500.0"),
    ({**SERVICE, "service": "solo", "replicas": 1, "layout": {**SERVICE["layout"], "tensor_parallel_size": 2,
                                                              "enable_expert_parallel": True}},
     ((16, 260.0, 90.0),), ["concurrency 1: timed out"],
     "solo (1 replica x TP 2 x PP 1 x DP 1 (EP)): output tok/s at concurrency 16: 260.0 - 1 problem (see its report)"),
    (SERVICE, (), ["concurrency 1: timed out", "concurrency 4: timed out"],
     "chat (2 replicas x TP 1 x PP 1 x DP 1): no level measured - 2 problems (see its report)"),
    (STAMP, ((1, 27.0, 35.0),), [], "Qwen/Qwen3.5-122B-A10B-FP8: output tok/s at concurrency 1: 27.0"),
])
def test_the_summary_line_sets_a_sweep_beside_the_other_services(stamp, levels, problems, line):
    rows = benchmark.rows(sweep(*levels))
    assert benchmark.summary({"stamp": stamp, "rows": rows, "problems": problems}) == line
