#!/usr/bin/env python3
"""Stand-in for the GPU inference process of the serving test image (tests only).

Installed in the image as /usr/local/bin/vllm, it answers `vllm serve MODEL
[flags]` like vLLM does from the outside, without a GPU:

- flags are checked against the option strings recorded from the real vLLM
  parser (tests/fixtures/vllm/serve_flags/<version>.json, baked into the
  image); an unknown one prints usage and `error: unrecognized arguments`
  and exits 2, like argparse;
- GPUs are counted with nvidia-smi (the simulated ones the runtime hook
  injects); a world size (TP x PP) larger than this host's GPUs, or
  `--distributed-executor-backend ray`, joins the Ray cluster of the host
  (RAY_ADDRESS, default "auto") and refuses to start unless the cluster has
  the GPUs;
- it serves /health, /v1/models, /v1/completions (streamed or not, tokens at
  VLLMOPS_STANDIN_TOKENS_PER_S) and /metrics, with --api-key / VLLM_API_KEY;
- VLLMOPS_STANDIN_FAIL makes it fail the way vLLM does: usage (exit 2 with
  usage), hang (stops after the NCCL init lines), oom (CUDA out of memory),
  nccl_timeout (NCCL watchdog timeout);
- while it serves, a child process stands for the engine's worker
  (`VLLM::Worker_TP0` in `ps`; in vLLM the GPU worker, over Ray a Ray
  worker): a test that kills it (`pkill -KILL -f VLLM::Worker_TP0` in the
  container) gets what users report of vLLM when a worker died - /health and
  /v1/models still answer 200, completions hang.

Logs go to stdout in vLLM's format, so journald / docker logs hold what
they would hold with the real server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FLAGS_FILE = Path(os.environ.get("VLLMOPS_STANDIN_FLAGS", "/usr/local/share/vllmops-standin/serve_flags.json"))
USAGE = "usage: vllm serve [model_tag] [options]"
# Flags that take no value in vLLM (store_true / BooleanOptionalAction and friends).
VALUE_LESS_PREFIXES = ("--enable-", "--disable-", "--no-", "--trust-remote-code", "--enforce-eager", "--headless",
                       "--async-scheduling", "--skip-tokenizer-init", "--enable-prefix-caching")


def log(level: str, where: str, message: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{level} {stamp} [{where}] {message}", flush=True)


class UsageError(Exception):
    pass


def load_recorded() -> dict:
    return json.loads(FLAGS_FILE.read_text())


def resolve_flag(name: str, known: set[str], allow_abbrev: bool) -> str | None:
    if name in known:
        return name
    if allow_abbrev and name.startswith("--"):
        matches = [flag for flag in known if flag.startswith(name)]
        if len(matches) == 1:
            return matches[0]
    return None


def parse_serve_args(argv: list[str], recorded: dict) -> dict:
    """argv after `vllm serve`: the model and {flag: value or True}; UsageError for unknown flags."""
    known = set(recorded["flags"])
    options: dict[str, object] = {}
    unknown: list[str] = []
    model = None
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("-") or token == "-":
            if model is None:
                model = token
            else:
                unknown.append(token)
            continue
        name, has_inline, inline = token.partition("=")
        if not has_inline and len(name) > 2 and not name.startswith("--") and name[:2] in known:
            name, inline, has_inline = name[:2], name[2:], True  # -O3, -tp2
        flag = resolve_flag(name, known, recorded.get("allow_abbrev", True))
        if flag is None:
            unknown.append(token)
            while index < len(argv) and not argv[index].startswith("-"):
                unknown.append(argv[index])
                index += 1
            continue
        if has_inline:
            options[flag] = inline
        elif flag.startswith(VALUE_LESS_PREFIXES) or index >= len(argv) or argv[index].startswith("--"):
            options[flag] = True
        else:
            options[flag] = argv[index]
            index += 1
    model = model or options.get("--model")
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
    if not model:
        raise UsageError("the following arguments are required: model_tag")
    return {"model": model, "options": options}


def option(options: dict, *names: str, default=None):
    for name in names:
        if name in options:
            return options[name]
    return default


def local_gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU ")) if proc.returncode == 0 else 0


def fail(lines: list[str], code: int = 1) -> int:
    for line in lines:
        print(line, flush=True)
    return code


def ray_cluster_gpus(world: int, deadline_s: float) -> tuple[float, list[dict]]:
    """GPUs and nodes alive in the Ray cluster, once it has the world size or at the deadline."""
    import ray  # the image's real Ray

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level="ERROR", log_to_driver=False)
    end = time.monotonic() + deadline_s
    nodes = []
    while True:
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        gpus = sum(node.get("Resources", {}).get("GPU", 0) for node in nodes)
        if gpus >= world or time.monotonic() >= end:
            return gpus, nodes
        time.sleep(1)


# What a node's cluster.env pins per node: its address, interfaces and HCAs.
PER_NODE_VARS = ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "NCCL_IB_HCA")


def place_workers(nodes: list[dict]) -> None:
    """vLLM's Ray executor starting its workers, one per node: each gets the driver's variables that the image's
    real vLLM chooses to copy (vllm.ray.ray_env.get_env_vars_to_copy, which leaves out the names listed in
    $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json) in its Ray runtime_env, as vLLM 0.33 starts them. Each
    worker's view of the per-node variables is logged."""
    import importlib.util
    import types

    import ray
    # vllm/__init__.py imports torch, which this image lacks: the package is entered without it (ray_env needs only
    # vllm.envs and vllm.logger, both plain Python).
    if "vllm" not in sys.modules:
        package = types.ModuleType("vllm")
        package.__path__ = list(importlib.util.find_spec("vllm").submodule_search_locations)
        sys.modules["vllm"] = package
    try:
        from vllm.ray.ray_env import get_env_vars_to_copy
    except ImportError:  # a vLLM before the file existed copies nothing the stand-in can show
        return
    copied = {name: os.environ[name] for name in get_env_vars_to_copy(destination="RayWorkerWrapper")
              if name in os.environ}

    @ray.remote(num_cpus=0)
    def seen() -> dict:
        return {name: os.environ.get(name) for name in PER_NODE_VARS}

    for node in nodes:
        address = node["NodeManagerAddress"]
        task = seen.options(resources={f"node:{address}": 0.001}, runtime_env={"env_vars": copied})
        log("INFO", "ray_executor_v2.py:352", f"(RayWorkerWrapper ip={address}) environment: "
            f"{json.dumps(ray.get(task.remote(), timeout=60), sort_keys=True)}")


def check_model(model: str, architectures: set[str]) -> list[str] | None:
    """Error lines when a local model directory is missing or its architecture unknown."""
    if not model.startswith("/"):
        return None
    config = Path(model) / "config.json"
    if not config.is_file():
        return [f"OSError: Can't load the configuration of '{model}'. If you were trying to load it from "
                "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
                f"Otherwise, make sure '{model}' is the correct path to a directory containing a config.json file"]
    wanted = json.loads(config.read_text()).get("architectures", [])
    if wanted and not set(wanted) & architectures:
        return [f"ValueError: Model architectures {wanted!r} are not supported for now. "
                f"Supported architectures: {sorted(architectures)[:8]!r} ..."]
    return None


def startup(served: dict, recorded: dict) -> int | None:
    """vLLM's start-up checks and log lines; an exit code when it fails."""
    options = served["options"]
    version = recorded["vllm"]
    mode = os.environ.get("VLLMOPS_STANDIN_FAIL", "")
    log("INFO", "utils.py:253", f"non-default args: {json.dumps({k.lstrip('-'): v for k, v in options.items()})}")
    log("INFO", "api_server.py:1812", f"vLLM API server version {version}")
    problem = check_model(served["model"], set(recorded.get("architectures", [])))
    if problem:
        return fail(["Traceback (most recent call last):", '  File "/usr/local/bin/vllm", line 8, in <module>', *problem])
    tp = int(option(options, "--tensor-parallel-size", "-tp", default=1))
    pp = int(option(options, "--pipeline-parallel-size", "-pp", default=1))
    world = tp * pp
    gpus = local_gpus()
    backend = option(options, "--distributed-executor-backend", default="ray" if world > gpus else "mp")
    if gpus == 0:  # vLLM finds no platform before it looks at any backend
        return fail(["RuntimeError: Failed to infer device type, please set the environment variable "
                     "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue."])
    log("INFO", "config.py:1604", f"Defaulting to use {backend} for distributed inference")
    if backend == "ray":
        wait_s = float(os.environ.get("VLLMOPS_STANDIN_PLACEMENT_WAIT_S", "20"))
        have, nodes = ray_cluster_gpus(world, wait_s)
        log("INFO", "ray_utils.py:345", f"Connected to Ray cluster: {len(nodes)} node(s), {have:g} GPU(s)")
        if have < world:
            extra_specs = ", {'GPU': 1.0}" * (world - 1)
            for _ in range(2):
                log("INFO", "ray_utils.py:240", f"Waiting for creating a placement group of specs for 10 seconds. "
                    f"specs=[{{'GPU': 1.0, 'node:{os.environ.get('VLLM_HOST_IP', '127.0.0.1')}': 0.001}}"
                    f"{extra_specs}]. Check `ray status` and `ray list nodes` to see if you have "
                    "enough resources, and make sure the IP addresses used by ray cluster are the same as "
                    "VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.")
            print("(autoscaler +10s) Warning: The following resource request cannot be scheduled right now: "
                  "{'GPU': 1.0}. This is likely due to all cluster resources being claimed by actors.", flush=True)
            print("(autoscaler +10s) Error: No available node types can fulfill resource request {'GPU': 1.0}. "
                  "Add suitable node types to this cluster to resolve this issue.", flush=True)
            return fail([f"ValueError: The number of required GPUs exceeds the total number of available GPUs in "
                         f"the placement group. Required: {world}, available: {have:g}"])
        place_workers(nodes)
    elif world > gpus:
        return fail([f"ValueError: World size ({world}) is larger than the number of available GPUs ({gpus}) "
                     "in this node. Use --distributed-executor-backend ray for multi-node serving."])
    if mode == "usage":
        print(USAGE, flush=True)
        print("vllm serve: error: unrecognized arguments: --standin-told-to-fail", flush=True)
        return 2
    log("INFO", "pynccl.py:70", f"vLLM is using nccl==2.27.3 (world size {world})")
    print(f"NCCL INFO cudaDriverVersion 13000\nNCCL INFO NCCL version 2.27.3+cuda13.0\n"
          f"NCCL INFO Comm config Blocking set to 1\nNCCL INFO ncclCommInitRank comm 0x5581 rank 0 nranks {world} "
          "- Init COMPLETE", flush=True)
    log("INFO", "custom_all_reduce.py:136", "CustomAllreduce is disabled because this process group spans across nodes.")
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode == "nccl_timeout":
        time.sleep(float(os.environ.get("VLLMOPS_STANDIN_FAIL_AFTER_S", "2")))
        return fail(["[rank0]:[E1129 12:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
                     "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                     "ran for 600011 milliseconds before timing out.",
                     "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0."])
    log("INFO", "gpu_model_runner.py:2860", f"Model loading took 1.2 GiB and {float(os.environ.get('VLLMOPS_STANDIN_INIT_S', '2')):.1f} seconds")
    time.sleep(float(os.environ.get("VLLMOPS_STANDIN_INIT_S", "2")))
    if mode == "oom":
        return fail(["ERROR 11-29 12:00:00 [core.py:708] EngineCore failed to start.",
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                     "capacity of 119.70 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
                     "has 118.21 GiB memory in use."])
    log("INFO", "kv_cache_utils.py:1087", "GPU KV cache size: 1,048,576 tokens")
    return None


WORKER_NAME = "VLLM::Worker_TP0"


def start_worker() -> subprocess.Popen:
    """The engine's worker: a process that only lives, so that a test can kill it."""
    return subprocess.Popen([WORKER_NAME, "-c", "import time\nwhile True:\n    time.sleep(3600)"],
                            executable=sys.executable, stdin=subprocess.DEVNULL)


class Engine:
    """Counters for /metrics, the token generator and the worker it needs."""

    def __init__(self, served_name: str, model: str, max_model_len: int, rate: float,
                 worker: subprocess.Popen | None = None) -> None:
        self.served_name, self.model, self.max_model_len, self.rate = served_name, model, max_model_len, rate
        self.worker = worker
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests = 0

    def worker_alive(self) -> bool:
        with self.lock:
            return self.worker is None or self.worker.poll() is None

    def wait_for_worker(self) -> None:
        """What a request meets once the worker is gone: nothing, ever (vLLM does not notice either)."""
        while not self.worker_alive():
            time.sleep(3600)

    def tokens(self, count: int):
        for index in range(count):
            time.sleep(1.0 / self.rate)
            with self.lock:
                self.generation_tokens += 1
            yield f" tok{index}"


def make_handler(engine: Engine, api_key: str | None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # vLLM's access log format
            log("INFO", "h11_impl.py:473", f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {args[1]}')

        def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self) -> bool:
            if api_key and self.headers.get("Authorization") != f"Bearer {api_key}":
                self._send(401, json.dumps({"error": "Unauthorized"}).encode())
                return False
            return True

        def do_GET(self):
            if self.path == "/health":
                self._send(200, b"", "text/plain")
            elif self.path == "/v1/models":
                if self._authorized():
                    card = {"id": engine.served_name, "object": "model", "owned_by": "vllm", "root": engine.model,
                            "max_model_len": engine.max_model_len, "created": int(time.time())}
                    self._send(200, json.dumps({"object": "list", "data": [card]}).encode())
            elif self.path == "/metrics":
                with engine.lock:
                    text = "".join(
                        f'{name}{{model_name="{engine.served_name}"}} {value}\n' for name, value in (
                            ("vllm:num_requests_running", engine.running),
                            ("vllm:num_requests_waiting", 0),
                            ("vllm:prompt_tokens_total", engine.prompt_tokens),
                            ("vllm:generation_tokens_total", engine.generation_tokens),
                            ("vllm:request_success_total", engine.requests)))
                self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, json.dumps({"detail": "Not Found"}).encode())

        def do_POST(self):
            if self.path != "/v1/completions":
                self._send(404, json.dumps({"detail": "Not Found"}).encode())
                return
            if not self._authorized():
                return
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if request.get("model") not in (engine.served_name, None):
                self._send(404, json.dumps({"error": {"message": f"The model `{request.get('model')}` does not exist.",
                                                      "type": "NotFoundError", "code": 404}}).encode())
                return
            engine.wait_for_worker()
            count = int(request.get("max_tokens", 16))
            prompt_tokens = len(str(request.get("prompt", "")).split())
            with engine.lock:
                engine.running += 1
                engine.prompt_tokens += prompt_tokens
            try:
                ident = f"cmpl-{time.time_ns():x}"
                if request.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for text in engine.tokens(count):
                        chunk = {"id": ident, "object": "text_completion", "model": engine.served_name,
                                 "choices": [{"index": 0, "text": text, "finish_reason": None}]}
                        self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                else:
                    text = "".join(engine.tokens(count))
                    body = {"id": ident, "object": "text_completion", "model": engine.served_name,
                            "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                                      "total_tokens": prompt_tokens + count}}
                    self._send(200, json.dumps(body).encode())
            finally:
                with engine.lock:
                    engine.running -= 1
                    engine.requests += 1

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def serve(argv: list[str]) -> int:
    recorded = load_recorded()
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        print("\noptions:\n" + "\n".join(f"  {flag}" for flag in recorded["visible_flags"]))
        return 0
    try:
        served = parse_serve_args(argv, recorded)
    except UsageError as err:
        print(USAGE, file=sys.stderr)
        print(f"vllm serve: error: {err}", file=sys.stderr)
        return 2
    code = startup(served, recorded)
    if code is not None:
        return code
    options = served["options"]
    host = str(option(options, "--host", default="0.0.0.0"))
    port = int(option(options, "--port", default=8000))
    name = str(option(options, "--served-model-name", default=served["model"]))
    api_key = option(options, "--api-key") or os.environ.get("VLLM_API_KEY")
    engine = Engine(name, served["model"], int(option(options, "--max-model-len", default=4096)),
                    float(os.environ.get("VLLMOPS_STANDIN_TOKENS_PER_S", "50")))
    try:
        server = ThreadingHTTPServer((host, port), make_handler(engine, api_key))
    except OSError as err:
        return fail([f"OSError: [Errno {err.errno}] error while attempting to bind on address ({host!r}, {port}): "
                     f"{err.strerror.lower()}"])
    engine.worker = start_worker()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    log("INFO", "api_server.py:1857", f"Starting vLLM API server 0 on http://{host}:{port}")
    log("INFO", "launcher.py:29", "Available routes are: /health, /v1/models, /v1/completions, /metrics")
    print("INFO:     Started server process [1]\nINFO:     Waiting for application startup.\n"
          "INFO:     Application startup complete.", flush=True)
    try:
        server.serve_forever()
    finally:
        engine.worker.kill()
        engine.worker.wait()
    log("INFO", "launcher.py:80", "Shutting down FastAPI HTTP server.")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:
        print(load_recorded()["vllm"])
        return 0
    if argv[:1] != ["serve"]:
        print("usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...", file=sys.stderr)
        return 2
    return serve(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
