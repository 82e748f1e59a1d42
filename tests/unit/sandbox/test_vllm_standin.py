"""The inference stand-in answers like vLLM from the outside: argparse errors, start-up failures, the HTTP API."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
STANDIN = HERE.parents[2] / "sandbox" / "serving" / "vllm_standin.py"
FLAGS = HERE.parents[2] / "fixtures" / "vllm" / "serve_flags" / "0.33.0.json"


@pytest.fixture(scope="module")
def standin(load_script):
    return load_script("vllm_standin", STANDIN)


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FLAGS.read_text())


def test_known_flags_parse_with_values_abbreviations_and_short_forms(standin, recorded):
    parsed = standin.parse_serve_args(
        ["Qwen/Qwen3", "--tensor-parallel-size", "2", "--max-model-len=8192", "--enable-prefix-caching",
         "-pp", "1", "--gpu-memory-util", "0.5"], recorded)
    assert parsed["model"] == "Qwen/Qwen3"
    assert parsed["options"] == {"--tensor-parallel-size": "2", "--max-model-len": "8192", "--enable-prefix-caching": True,
                                 "-pp": "1", "--gpu-memory-utilization": "0.5"}


def test_a_removed_flag_is_unrecognized_with_its_value(standin, recorded):
    with pytest.raises(standin.UsageError, match=r"^unrecognized arguments: --num-scheduler-steps 10$"):
        standin.parse_serve_args(["m", "--num-scheduler-steps", "10", "--port", "8000"], recorded)


def run(args, env=None, timeout=60):
    full_env = {**os.environ, "VLLMOPS_STANDIN_FLAGS": str(FLAGS), "VLLMOPS_STANDIN_INIT_S": "0", **(env or {})}
    return subprocess.run([sys.executable, str(STANDIN), *args], capture_output=True, text=True, env=full_env, timeout=timeout)


def test_an_unknown_flag_exits_2_with_usage_like_argparse():
    proc = run(["serve", "m", "--num-scheduler-steps", "10"])
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["usage: vllm serve [model_tag] [options]",
                                        "vllm serve: error: unrecognized arguments: --num-scheduler-steps 10"]


@pytest.fixture
def gpu_path(tmp_path):
    """A PATH whose nvidia-smi lists one GPU, as the simulated runtime hook provides in containers."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA GB10 (UUID: GPU-1234)'\n")
    smi.chmod(0o755)
    return f"{tmp_path}:{os.environ['PATH']}"


def test_without_a_gpu_it_fails_like_vllm(tmp_path):
    proc = run(["serve", "m"], env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert proc.returncode == 1
    assert "RuntimeError: Failed to infer device type" in proc.stdout


def test_a_world_size_above_the_gpus_without_ray_is_refused(gpu_path):
    proc = run(["serve", "m", "-tp", "2", "--distributed-executor-backend", "mp"], env={"PATH": gpu_path})
    assert proc.returncode == 1
    assert "World size (2) is larger than the number of available GPUs (1)" in proc.stdout


@pytest.mark.parametrize(("mode", "code", "evidence"), [
    ("usage", 2, "error: unrecognized arguments"),
    ("oom", 1, "torch.OutOfMemoryError: CUDA out of memory"),
    ("nccl_timeout", 1, "Watchdog caught collective operation timeout"),
])
def test_told_failures_end_the_way_vllm_does(gpu_path, mode, code, evidence):
    proc = run(["serve", "m"], env={"PATH": gpu_path, "VLLMOPS_STANDIN_FAIL": mode, "VLLMOPS_STANDIN_FAIL_AFTER_S": "0"})
    assert proc.returncode == code
    assert evidence in proc.stdout


def test_told_to_hang_it_stops_after_the_nccl_lines(gpu_path):
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        run(["serve", "m"], env={"PATH": gpu_path, "VLLMOPS_STANDIN_FAIL": "hang"}, timeout=3)
    out = hung.value.stdout.decode() if isinstance(hung.value.stdout, bytes) else hung.value.stdout
    assert out.rstrip().endswith("CustomAllreduce is disabled because this process group spans across nodes.")


def test_a_model_directory_without_config_is_named(gpu_path, tmp_path):
    proc = run(["serve", str(tmp_path / "missing-model")], env={"PATH": gpu_path})
    assert proc.returncode == 1 and "make sure" in proc.stdout and "config.json" in proc.stdout


def test_an_architecture_vllm_does_not_know_is_refused(gpu_path, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["NotAModelForCausalLM"]}))
    proc = run(["serve", str(tmp_path)], env={"PATH": gpu_path})
    assert proc.returncode == 1 and "Model architectures ['NotAModelForCausalLM'] are not supported" in proc.stdout


@pytest.fixture
def served(gpu_path):
    """A stand-in serving on a free port: (its URL, its process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "VLLMOPS_STANDIN_FLAGS": str(FLAGS), "VLLMOPS_STANDIN_INIT_S": "0",
           "VLLMOPS_STANDIN_TOKENS_PER_S": "200", "PATH": gpu_path}
    proc = subprocess.Popen([sys.executable, str(STANDIN), "serve", "demo-org/demo", "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "demo", "--api-key", "s3cret"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    yield base, proc
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def server(served):
    return served[0]


def children(pid: int) -> dict[int, str]:
    """Child processes of pid: their command lines."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
    return found


def call(url, body=None, key="s3cret"):
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_it_serves_health_models_completions_and_metrics(server):
    assert call(server + "/health") == (200, "")
    models = json.loads(call(server + "/v1/models")[1])
    assert [m["id"] for m in models["data"]] == ["demo"]
    done = json.loads(call(server + "/v1/completions", {"model": "demo", "prompt": "hello there", "max_tokens": 5})[1])
    assert done["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
    _status, stream = call(server + "/v1/completions", {"model": "demo", "prompt": "hi", "max_tokens": 3, "stream": True})
    events = [line[len("data: "):] for line in stream.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) == 4
    metrics = call(server + "/metrics")[1]
    assert 'vllm:generation_tokens_total{model_name="demo"} 8' in metrics


def test_the_api_key_is_required(server):
    with pytest.raises(urllib.error.HTTPError) as refused:
        call(server + "/v1/models", key="wrong")
    assert refused.value.code == 401
    assert call(server + "/health", key="wrong")[0] == 200


def test_once_its_worker_is_killed_health_and_models_answer_but_completions_hang(served):
    server, proc = served
    workers = [pid for pid, cmdline in children(proc.pid).items() if cmdline.startswith("VLLM::Worker_TP0 ")]
    assert len(workers) == 1, children(proc.pid)
    assert call(server + "/v1/completions", {"model": "demo", "prompt": "hi", "max_tokens": 1})[0] == 200
    os.kill(workers[0], signal.SIGKILL)
    time.sleep(0.2)
    assert call(server + "/health") == (200, "")
    assert call(server + "/v1/models")[0] == 200
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        request = urllib.request.Request(server + "/v1/completions", data=json.dumps({"model": "demo", "max_tokens": 1}).encode(),
                                         headers={"Authorization": "Bearer s3cret", "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=2)
