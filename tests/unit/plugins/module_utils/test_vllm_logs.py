"""The log classifier on realistic vLLM / NCCL / Ray / kernel log excerpts (tests/fixtures/vllm_logs)."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_logs import FAILURE_CLASSES, classify, clean

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "vllm_logs"


def lines(name):
    return (LOGS / name).read_text().splitlines()


@pytest.mark.parametrize(("log", "exited", "expected", "evidence"), [
    ("unknown_flag.log", True, "unknown_flag", "unrecognized arguments: --num-scheduler-steps 10"),
    ("unsupported_architecture.log", True, "unsupported_architecture", "Qwen3_5MoeForConditionalGeneration"),
    ("gpu_unavailable.log", True, "gpu_unavailable", "Failed to infer device type"),
    ("oom_cuda.log", True, "oom", "CUDA out of memory"),
    ("kv_cache_too_small.log", True, "kv_cache_too_small", "No available memory for the cache blocks"),
    ("oom_killed.log", True, "oom", "Killed process 99231"),
    ("nccl_timeout.log", True, "nccl_failure", "Watchdog caught collective operation timeout"),
    ("gloo_mesh.log", True, "nccl_failure", "connectFullMesh"),
    ("nccl_socket.log", True, "nccl_failure", "Connect to 10.0.0.2<45523> failed"),
    ("ray_placement.log", False, "ray_placement", "No available node types can fulfill resource request"),
    ("port_in_use.log", True, "port_in_use", "address already in use"),
    ("model_not_found.log", True, "model_not_found", "Can't load the configuration"),
    ("healthy.log", False, "none", "Application startup complete."),
])
def test_each_log_gets_its_class_and_evidence(log, exited, expected, evidence):
    failure_class, found, hint = classify(lines(log), exited=exited)
    assert failure_class == expected
    assert any(evidence in line for line in found), found
    assert (hint == "") == (expected == "none")


def test_startup_complete_before_the_real_error_is_not_healthy():
    failure_class, _, _ = classify(lines("port_in_use.log"), exited=True)
    assert failure_class == "port_in_use"


def test_init_complete_then_a_hang_is_nccl_not_healthy():
    # NCCL says "Init COMPLETE"; the first collective then times out.
    assert classify(lines("nccl_timeout.log"), exited=True)[0] == "nccl_failure"


def test_an_nccl_fallback_warning_in_a_healthy_log_is_not_a_failure():
    assert classify(lines("healthy.log"), exited=False)[0] == "none"


def test_an_exit_without_a_known_signature_is_unknown_with_the_tail():
    failure_class, evidence, hint = classify(["INFO starting", "Segmentation fault (core dumped)"], exited=True)
    assert failure_class == "unknown" and evidence[-1] == "Segmentation fault (core dumped)" and hint


def test_prefixes_and_colours_are_removed():
    assert clean("vllm-1  | \x1b[31mERROR\x1b[0m boom") == "ERROR boom"
    assert clean("Nov 29 10:20:15 spark-1 docker[4411]: text") == "text"
    assert clean("2026-11-29T10:00:02.523456789Z RuntimeError: x") == "RuntimeError: x"


def test_every_class_is_known():
    for log in LOGS.iterdir():
        assert classify(lines(log.name), exited=True)[0] in FAILURE_CLASSES


def test_vllm_ready_documents_every_class():
    source = (Path(__file__).resolve().parents[4] / "plugins" / "modules" / "vllm_ready.py").read_text()
    returned = yaml.safe_load(source.split('RETURN = r"""', 1)[1].split('"""', 1)[0])
    documented = " ".join(returned["failure_class"]["description"])
    assert [cls for cls in FAILURE_CLASSES if f"C({cls})" not in documented] == []


def test_a_log_that_stops_before_the_server_is_up_without_an_error_is_a_hang_not_healthy():
    log = ["INFO starting", "(Worker pid=35) INFO [parallel_state.py:1906] world_size=2 rank=0 backend=gloo"]
    assert classify(log, exited=None)[0] == "hang"
    assert classify(log, exited=True)[0] == "unknown"


def test_the_cause_wins_over_the_dead_engine_it_leaves():
    log = ["ERROR [core.py:330] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB.",
           "CRITICAL [core_client.py:260] Got fatal signal from worker processes, shutting down."]
    assert classify(log, exited=True)[0] == "oom"
    assert classify(log[1:], exited=True)[0] == "engine_dead"


def test_an_error_before_the_last_healthy_start_belongs_to_an_earlier_run():
    log = ["OSError: [Errno 98] Address already in use", "INFO:     Application startup complete."]
    assert classify(log, exited=False)[0] == "none"
    assert classify([*log, "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."],
                    exited=False)[0] == "engine_dead"


def test_a_model_missing_on_a_ray_worker_is_the_workers():
    line = "Can't load the configuration of '/models/m'. Make sure '/models/m' is the correct path"
    assert classify([line], exited=True)[0] == "model_not_found"
    assert classify([f"(RayWorkerWrapper pid=344, ip=10.2.30.130) ERROR {line}"], exited=True)[0] == "worker_model_missing"


@pytest.mark.parametrize("sign", [
    "(APIServer pid=1) INFO 12-05 10:00:00 [launcher.py:46] Route: /v1/chat/completions, Methods: POST",
    "INFO 12-05 10:00:00 [launcher.py:37] Available routes are:",
    "INFO:     Started server process [12625]",
    "INFO 12-05 10:00:10 [metrics.py:486] Avg prompt throughput: 2.4 tokens/s, Avg generation throughput: 0.2 tokens/s, "
    "Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs",
])
def test_any_positive_sign_of_a_started_server_is_a_healthy_start(sign):
    """Routes listed, the server process started, requests running: a server that started, though the log is cut
    before "Application startup complete"."""
    lines = ["INFO 12-05 09:59:00 [api_server.py:1090] vLLM API server version 0.11.0",
             "WARNING 12-05 09:59:30 [sampling.py:10] Default sampling parameters have been overridden", sign]
    assert classify(lines, exited=None)[0] == "none"


@pytest.mark.parametrize(("line", "expected"), [
    ("(EngineCore_DP0 pid=395) WARNING 10-24 11:23:57 [shm_broadcast.py:466] No available shared memory broadcast "
     "block found in 60 second.", "engine_dead"),
    ("ERROR 02-27 20:44:06 parallel_state.py:1101] Error ignored in is_in_the_same_node: [../third_party/gloo/gloo/"
     "transport/tcp/unbound_buffer.cc:133] Timed out waiting 1800000ms for send operation to complete", "nccl_failure"),
    ("(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
     "  Value error, Model architectures ['Qwen3NextForCausalLM'] failed to be inspected.", "unsupported_architecture"),
    ("ValueError: Invalid repository ID or local directory specified: '/root/models/x'.", "model_not_found"),
    ("RuntimeError: Worker failed with error 'CUDA error: out of memory'", "oom"),
])
def test_the_families_a_frozen_classifier_missed_most(line, expected):
    """The weakest families measured on logs the classifier had never seen (issue 42): unsupported architectures
    in pydantic's wording, store and Gloo timeouts, shared-memory broadcast timeouts, invalid repo ids or paths."""
    assert classify(line.splitlines(), exited=True)[0] == expected
