"""vllm_ready as an operator runs it on a saved log: `ansible localhost -m vllmops.cluster.vllm_ready -a log_file=...`."""

from pathlib import Path

import pytest
from conftest import run_module

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_logs"
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "log_corpus"


@pytest.mark.parametrize(("log", "failure_class", "evidence", "hint"), [
    ("unknown_flag.log", "unknown_flag", "vllm serve: error: unrecognized arguments: --num-scheduler-steps 10",
     "vllm_serve_args"),
    ("oom_cuda.log", "oom", "torch.OutOfMemoryError: CUDA out of memory", "gpu_memory_utilization"),
    ("nccl_timeout.log", "nccl_failure", "Watchdog caught collective operation timeout", "cluster.env"),
    ("healthy.log", "none", "Application startup complete.", ""),
    # real logs: posted in a public thread, and written by real vLLM in the sandbox
    (CORPUS / "gated-llm2vec-130.log", "model_unauthorized", "Cannot access gated repo", "HF_TOKEN"),
    (CORPUS / "sandbox-removed_option_python.log", "removed_option", "unexpected keyword argument 'num_scheduler_steps'",
     "Python"),
])
def test_a_saved_log_is_diagnosed(log, failure_class, evidence, hint):
    rc, result = run_module("vllm_ready", {"log_file": str(LOGS / log)})  # LOGS / an absolute path is that path
    assert rc == 0, result
    assert (result["failure_class"], result["ready"]) == (failure_class, failure_class == "none")
    # the operator is shown the line of the log that decided, and what to change
    assert any(evidence in line for line in result["evidence"]), result["evidence"]
    assert all(any(ev in line for line in result["log_tail"]) for ev in result["evidence"]), result["log_tail"]
    if hint:
        assert hint in result["hint"]
    else:
        assert result["hint"] == ""


def test_a_missing_log_file_is_named():
    rc, result = run_module("vllm_ready", {"log_file": "/nonexistent/vllm.log"})
    assert rc != 0 and "/nonexistent/vllm.log" in result["msg"]
