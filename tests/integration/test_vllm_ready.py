"""vllm_ready as an operator runs it on a saved log: `ansible localhost -m vllmops.cluster.vllm_ready -a log_file=...`."""

from pathlib import Path

import pytest
from conftest import run_module

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_logs"


@pytest.mark.parametrize(("log", "failure_class"), [
    ("unknown_flag.log", "unknown_flag"),
    ("oom_cuda.log", "oom"),
    ("nccl_timeout.log", "nccl_failure"),
    ("healthy.log", "none"),
])
def test_a_saved_log_is_diagnosed(log, failure_class):
    rc, result = run_module("vllm_ready", {"log_file": str(LOGS / log)})
    assert rc == 0, result
    assert result["failure_class"] == failure_class
    assert result["ready"] == (failure_class == "none")
    if failure_class != "none":
        assert result["evidence"] and result["hint"]


def test_a_missing_log_file_is_named():
    rc, result = run_module("vllm_ready", {"log_file": "/nonexistent/vllm.log"})
    assert rc != 0 and "/nonexistent/vllm.log" in result["msg"]
