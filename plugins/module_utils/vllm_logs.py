# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a vLLM server did not come up, from its log: one class, the evidence, the fix to try.

Measured on a corpus of real logs (tests/fixtures/log_corpus: posted in public
issue threads, and written by real vLLM in the sandbox). Real logs are messy:
docker/compose/journald prefixes, ANSI colours, timestamps, wrapped lines,
excerpts cut in the middle of a traceback. Lines are cleaned first; then:

- every signature is looked for in the whole log; a match on a line of a Ray
  worker on another node (``ip=...``) that says the model is missing is the
  worker's model path, not the head's;
- the cause wins over its consequences: a class that another matched class
  explains (``EXPLAINED_BY``: an OOM explains the dead engine, a driver
  mismatch explains the container toolkit's failing hook) is dropped;
- of the causes left, the one whose first line comes first wins (the first
  fatal error, not the order of the signatures);
- ``none`` only with positive evidence of a healthy start (startup complete,
  the server listening, requests answered) and no error after it; errors
  before the last healthy start belong to an earlier run;
- an error nobody recognised is ``unknown``, with its last error lines.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# "vllm-1  | ", "vllm_head_1 | ", journald "Nov 29 12:00:00 host docker[123]: ", ISO timestamps from docker logs -t
PREFIXES = [
    re.compile(r"^[\w.-]+\s+\|\s?"),
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w./-]+(\[\d+\])?: "),
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z? "),
]

# class -> the one line the operator is told.
HINTS = {
    "unknown_flag": "A flag the image's vLLM does not accept: remove or rename it in vllm_serve_args (image_probe lists "
                    "the flags this vLLM takes).",
    "removed_option": "Python code passed an option this vLLM no longer has (LLM(...)/EngineArgs): remove or rename it "
                      "in the caller, or pin the vLLM version it was written for.",
    "model_unauthorized": "The hub refused the model (gated or private): accept its licence on huggingface.co with the "
                          "account of the token, and give the token (HF_TOKEN) to every node.",
    "model_not_found": "The model is not where the server looks: put config.json and the weights under "
                       "vllm_serve_model_dir, or fix vllm_serve_model (a hub id is owner/name; check the revision).",
    "worker_model_missing": "A worker node lacks the model: copy it to the same path on every node (or share it), "
                            "or let each node download it.",
    "unsupported_architecture": "This vLLM does not know the model's architecture: use an image with a newer vLLM "
                                "(image_probe lists the architectures it registers).",
    "port_in_use": "Another process holds the port: stop it (a stale container of ours is removed by the unit) or "
                   "change vllm_serve_port.",
    "oom": "Out of memory: lower gpu_memory_utilization (on GB10's unified memory 0.7-0.8), max_model_len or "
           "max_num_seqs, or use more GPUs (tensor parallel); check that nothing else holds GPU memory.",
    "kv_cache_too_small": "The KV cache left after the weights cannot hold one sequence of max_model_len: lower "
                          "max_model_len, or raise gpu_memory_utilization / kv_cache_memory_bytes if memory allows.",
    "gpu_unavailable": "The container sees no GPU: run the nvidia_container_toolkit role (gpu_probe tells which part "
                       "is missing) and start the container with the GPUs.",
    "container_toolkit": "The container runtime cannot hand the GPU over: install/configure the NVIDIA container "
                         "toolkit for Docker (nvidia_container_toolkit role), regenerate the CDI spec; a container that "
                         "lost its GPU after `systemctl daemon-reload` needs a restart.",
    "gpu_driver": "The NVIDIA driver is broken or mismatched (kernel module vs libraries, or too old for the image's "
                  "CUDA): reboot after a driver upgrade, or install the driver the image needs.",
    "nccl_failure": "NCCL/Gloo could not talk between the nodes: check the nccl role's cluster.env "
                    "(NCCL_SOCKET_IFNAME, NCCL_IB_HCA), the MTU and that the cluster network is open between the "
                    "nodes; NCCL_DEBUG=INFO shows the transport chosen.",
    "rendezvous_timeout": "A rank never joined the rendezvous: start every node's rank (same nnodes, master address and "
                          "port), and check the master port is reachable from each node.",
    "ray_placement": "Ray lacks the GPUs TP x PP needs: check `ray status` on the head (every node joined, with "
                     "--num-gpus), and that VLLM_HOST_IP matches each node's Ray address.",
    "ray_gcs": "A Ray node cannot reach the head's GCS or was lost: check the head address and port (6379) given to "
               "every node, the firewall, and that all nodes run the same Ray version.",
    "engine_dead": "vLLM's engine process died; no cause recognised in the log: read the lines before the evidence, "
                   "then restart the service.",
}
HANG_HINT = ("vLLM stopped making progress during start-up: typically NCCL/Gloo init across nodes that cannot reach "
             "each other (check the cluster network and cluster.env), a rank that never started, or a node "
             "missing from Ray.")
UNKNOWN_HINT = "vLLM failed for a reason not recognised here: read the evidence and the full log."

FAILURE_CLASSES = (*HINTS, "hang", "unknown", "none")

# (class, pattern). Several patterns per class; their order does not decide anything.
SIGNATURES = [
    ("unknown_flag", r"error: unrecognized arguments?:|error: argument --?[\w-]+(/-\w+)?: |"
                     r": error: the following arguments are required|error: ambiguous option: --"),
    ("removed_option", r"TypeError: .*got an unexpected keyword argument '\w+'|"
                       r"__init__\(\) got an unexpected keyword argument '\w+'"),
    ("model_unauthorized", r"GatedRepoError|Cannot access gated repo|You are trying to access a gated repo|"
                           r"Access to model \S+ is restricted|is gated\. You must be authenticated|"
                           r"403 Client Error|Invalid credentials in Authorization header|"
                           r"401 Client Error: Unauthorized|HTTPError: 401 Client Error|not in the authorized list"),
    ("model_not_found", r"Can't load the configuration of|does not appear to have a file named config\.json|"
                        r"(No such file or directory|FileNotFoundError).*(config\.json|/models?/)|"
                        r"Repository Not Found for url|RepositoryNotFoundError|RevisionNotFoundError|Invalid rev id|"
                        r"is not a local folder and is not a valid model identifier|\(invalid repository id\)|"
                        r"Repo id must (be in the form|use alphanumeric)|404 Client Error.*huggingface\.co|"
                        r"Invalid repository ID or local directory specified|No supported config format found in|"
                        r"Could not detect config format for no config file found|The request model: \S+ does not exist"),
    ("unsupported_architecture", r"Model architectures? \[.*\] (are|is) not supported|Unsupported architectures?:|"
                                 r"Cannot find model module.*architectures|No model architectures are specified|"
                                 r"Error in inspecting model architecture|failed to be inspected|"
                                 r"CONFIG_MAPPING\[config_dict\[\"model_type\"\]\]|"
                                 r"Transformers does not recognize this architecture|"
                                 r"GGUF model with architecture \S+ is not supported"),
    ("port_in_use", r"Address already in use|address already in use|error while attempting to bind on address|"
                    r"\[Errno (98|48)\]|EADDRINUSE"),
    ("oom", r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|NV_ERR_NO_MEMORY|"
            r"out of memory: Killed process|oom-kill|Killed process \d+ \(.*\) total-vm|"
            r"running low on memory|ray-oom-prevention"),
    ("kv_cache_too_small", r"No available memory for the cache blocks|Insufficient memory for KV cache|"
                           r"larger than the maximum number of tokens that can be stored in KV cache|"
                           r"larger than the available KV cache memory|reserved for KV Cache is -\d|"
                           r"Available KV cache memory: -\d|# (cuda|GPU) blocks: 0\b|"
                           r"Maximum concurrency for \d+ tokens per request: 0\.00x"),
    ("gpu_unavailable", r"No CUDA GPUs are available|Failed to infer device type|CUDA driver initialization failed|"
                        r"RuntimeError: Found no NVIDIA driver|torch\.cuda\.is_available\(\) (is|returned) False|"
                        r"cudaErrorNoDevice|no CUDA-capable device is detected|"
                        r"No platform detected, vLLM is running on UnspecifiedPlatform"),
    ("container_toolkit", r"could not select device driver|unresolvable CDI devices|CDI device injection failed|"
                          r"nvidia-container-cli: .*error|Failed to initialize NVML: Unknown Error|"
                          r"unknown or invalid runtime name: nvidia|libnvidia-ml\.so\.1: cannot open shared object|"
                          r"error running prestart hook"),
    ("gpu_driver", r"(?i:driver/library version mismatch)|couldn't communicate with the NVIDIA driver|"
                   r"CUDA driver version is insufficient|NVIDIA driver on your system is too old|"
                   r"Failed to initialize NVML: Driver Not Loaded|NVRM: API mismatch|"
                   r"Error 80[34]: system has unsupported display driver|cudaErrorUnsupportedPtxVersion|"
                   r"provided PTX was compiled with an unsupported toolchain|please update your driver to a newer version"),
    ("nccl_failure", r"Watchdog caught collective operation timeout|NCCL WARN .*([Tt]imeout|[Ff]ail|[Ee]rror)|"
                     r"NCCL [Ee]rror|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclRemoteError|"
                     r"DistBackendError|connectFullMesh|NCCL communicator was aborted|"
                     r"NET/Socket : (Connect|connect) to .* failed|NCCL_IB.*(not found|failed)|"
                     r"ProcessGroupNCCL.*collective operation timeout|Application timeout caused pair closure|"
                     r"gloo/transport/tcp/\S+\] (Timed out|Connection)"),
    ("rendezvous_timeout", r"DistStoreError: (Timed out after \d+ seconds waiting for|wait timeout)|"
                           r"client socket has timed out after \S+ while trying to connect to|"
                           r"TCPStore.*(timed out|Timed out)|next\(rendezvous_iterator\)|"
                           r"\[c10d\] waitForInput: socket .* timed out after"),
    ("ray_placement", r"No available node types can fulfill resource request|"
                      r"The number of required GPUs exceeds the total number of available GPUs|"
                      r"Waiting for creating a placement group|placement group.*(infeasible|timed out)|"
                      r"Tensor parallel size \(\d+\) cannot be larger than the number of available GPUs|"
                      r"Ray does not allocate any GPUs on the driver node|Current node has no GPU available|"
                      r"Total available GPUs [\d.]+ is less than total desired GPUs"),
    ("ray_gcs", r"Failed to connect to GCS|Failed to get cluster ID from GCS|Failed to start GCS|GCS may have been killed|"
                r"has been marked dead because the detector has missed too many heartbeats|"
                r"(Failed|Unable) to register (worker|the node|node)|Could not connect to the head node|"
                r"Can't find a .node_ip_address\.json. file|Waiting for nodes to start\.\.\. \d+/\d+ nodes started"),
    ("engine_dead", r"EngineDeadError|EngineCore encountered a fatal error|Engine core proc \S+ died unexpectedly|"
                    r"Engine core initialization failed|Worker proc \S+ died unexpectedly|Worker failed with error|"
                    r"Got fatal signal from worker processes|Scheduler hit an exception|EngineCore failed to start|"
                    r"WorkerProc (failed to start|hit an exception)|MQLLMEngine is already dead|"
                    r"No available shared memory broadcast block found|shm_broadcast\.py\", line \d+, in acquire_read|"
                    r"CUDA error: an illegal memory access was encountered"),
]
_COMPILED = [(cls, re.compile(pattern)) for cls, pattern in SIGNATURES]
# Lines that look like a signature but are something else: a CUDA kernel fault reported by NCCL's watchdog thread.
NOT_NCCL = re.compile(r"illegal memory access|CUDA error: (an )?(illegal|misaligned|unspecified launch)")
# A line of a Ray worker on another node: "(RayWorkerWrapper pid=344, ip=10.2.30.130)".
REMOTE_WORKER = re.compile(r"\(\w+ pid=\d+, ip=[\d.]+\)")

# A class is dropped when one of these, also found, explains it (the cause over its consequences).
_ALL_CAUSES = {cls for cls in HINTS if cls != "engine_dead"}
EXPLAINED_BY = {
    "engine_dead": _ALL_CAUSES,
    "container_toolkit": {"gpu_driver"},
    "gpu_unavailable": {"gpu_driver", "container_toolkit"},
    "model_not_found": {"model_unauthorized"},
    "nccl_failure": {"oom", "gpu_driver", "worker_model_missing", "model_not_found"},
    "rendezvous_timeout": {"worker_model_missing"},
    "ray_placement": {"ray_gcs"},
}

# Positive evidence of a healthy server: it started (STARTED), or it answers requests.
# Any positive sign counts: the routes listed, the server process started, start-up complete, requests answered or
# running (the engine's periodic throughput line).
STARTED = re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM (API )?server( \d+)? on http|"
                     r"Started server process|Available routes are|Route: /\S+, Methods:")
HEALTHY = re.compile(STARTED.pattern + r"|\"(GET|POST) /(v1/\S+|health) HTTP/1\.[01]\" 200|Avg prompt throughput: ")
# What counts as an error when no signature matched (or after a healthy start).
ERRORISH = re.compile(r"Traceback \(most recent call last\)|\bERROR\b|\bCRITICAL\b|\bFATAL\b|Fatal Python error|"
                      r"^\w*(Error|Exception)\b|^[\w.]+(Error|Exception): |\berror: |^Error: |Segmentation fault|"
                      r"core dumped|\[E\d{4} |\bE\d{4} \d\d:|\bexit(ed)? (with )?(code|status) [1-9]")
# Errors a running server logs about one request (a client asking for a model it does not serve): not a failure.
REQUEST_ERROR = re.compile(r"code=4\d\d|\" 4\d\d |Error with model object=")


def clean(line):
    line = ANSI.sub("", line.rstrip("\r\n"))
    for prefix in PREFIXES:
        line = prefix.sub("", line, count=1)
    return line


def _matches(cleaned):
    """{class: [line indexes]} of every signature found."""
    found = {}
    for index, line in enumerate(cleaned):
        for cls, pattern in _COMPILED:
            if not pattern.search(line):
                continue
            if cls == "nccl_failure" and NOT_NCCL.search(line):
                continue
            if cls == "model_not_found" and REMOTE_WORKER.search(line):
                cls = "worker_model_missing"
            found.setdefault(cls, []).append(index)
    return found


def _errors(cleaned, start=0):
    return [index for index in range(start, len(cleaned))
            if ERRORISH.search(cleaned[index]) and not REQUEST_ERROR.search(cleaned[index])]


def classify(lines, exited=None):
    """(failure_class, evidence lines, hint) of a log.

    exited: True when the process is known to have ended, False when it is
    known to run, None when unknown (a saved log)."""
    cleaned = [clean(line) for line in lines]
    healthy = [index for index, line in enumerate(cleaned) if HEALTHY.search(line)]
    # After a healthy start only what came later counts: what came before belongs to an earlier run.
    since = healthy[-1] + 1 if healthy else 0
    found = {cls: [i for i in indexes if i >= since] for cls, indexes in _matches(cleaned).items()}
    found = {cls: indexes for cls, indexes in found.items() if indexes}
    causes = [cls for cls in found if not (EXPLAINED_BY.get(cls, set()) & set(found))]
    if causes:
        cls = min(causes, key=lambda c: found[c][0])
        return cls, _evidence(cleaned, found[cls]), HINTS[cls]
    errors = _errors(cleaned, since)
    if healthy and not errors and not exited:
        started = [line for line in cleaned if STARTED.search(line)]
        return "none", (started or [cleaned[healthy[-1]]])[-1:], ""
    if not healthy and not errors and not exited:
        # Neither up nor failed, and not known to have ended: start-up stopped here (a rank waiting for its peer...).
        return "hang", [line for line in cleaned if line.strip()][-3:], HANG_HINT
    tail = [cleaned[i] for i in errors] or [line for line in cleaned if line.strip()]
    return "unknown", tail[-5:], UNKNOWN_HINT


def _evidence(cleaned, indexes, limit=6):
    """The matching lines, first ones first, each once, at most `limit`."""
    seen = []
    for index in indexes:
        if cleaned[index] not in seen:
            seen.append(cleaned[index])
    return seen[:limit]
