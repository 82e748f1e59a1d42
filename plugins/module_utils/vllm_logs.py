# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a vLLM server did not come up, from its log: one class, the evidence, the fix to try.

Real logs are messy: docker/compose prefixes, journald prefixes, ANSI colours,
timestamps; "Application startup complete." can come before the error that
kills the server; NCCL can say "Init COMPLETE" and then hang. Lines are
cleaned first; every failure signature is looked for in the whole log; the
most specific class wins (the order of SIGNATURES).
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

FAILURE_CLASSES = ("unknown_flag", "unsupported_architecture", "gpu_unavailable", "oom", "nccl_failure",
                   "ray_placement", "port_in_use", "model_not_found", "hang", "unknown", "none")

# (class, pattern, hint); searched in this order, the first class with a match wins.
SIGNATURES = [
    ("unknown_flag", r"error: unrecognized arguments?:|error: argument --?[\w-]+: (invalid|expected)|: error: the following arguments are required",
     "A flag the image's vLLM does not accept: remove or rename it in vllm_serve_args (image_probe lists the flags this vLLM takes)."),
    ("model_not_found", r"Can't load the configuration of|does not appear to have a file named config\.json|"
                        r"(No such file or directory|FileNotFoundError).*(config\.json|/models?/)|"
                        r"Repository Not Found for url|is not a local folder and is not a valid model identifier",
     "The model is not where the unit looks: put config.json and the weights under vllm_serve_model_dir on every node, "
     "or fix vllm_serve_model."),
    ("unsupported_architecture", r"Model architectures? \[.*\] (are|is) not supported|"
                                 r"Cannot find model module.*architectures|No model architectures are specified",
     "This vLLM does not know the model's architecture: use an image with a newer vLLM (image_probe lists the "
     "architectures it registers)."),
    ("port_in_use", r"Address already in use|error while attempting to bind on address|\[Errno 98\]",
     "Another process holds the port: stop it (a stale container of ours is removed by the unit) or change vllm_serve_port."),
    ("oom", r"CUDA out of memory|OutOfMemoryError|NV_ERR_NO_MEMORY|No available memory for the cache blocks|"
            r"Insufficient memory for KV cache|out of memory: Killed process|oom-kill|Killed process \d+ \(.*\) total-vm|"
            r"ValueError: .*(KV cache|cache blocks).*(memory|larger than)",
     "Out of memory: lower gpu_memory_utilization (on GB10's unified memory 0.7-0.8), max_model_len or max_num_seqs, "
     "or use more GPUs (tensor parallel)."),
    ("gpu_unavailable", r"No CUDA GPUs are available|Failed to infer device type|CUDA driver initialization failed|"
                        r"Failed to initialize NVML|NVML.*(Driver/library version mismatch|Unknown Error)|"
                        r"RuntimeError: Found no NVIDIA driver|could not select device driver|"
                        r"torch\.cuda\.is_available\(\) (is|returned) False|cudaErrorNoDevice|CUDA error: no CUDA-capable device",
     "The container has no usable GPU: run the nvidia_container_toolkit role (gpu_probe tells which part is missing); "
     "after a driver upgrade, reboot."),
    ("ray_placement", r"No available node types can fulfill resource request|"
                      r"The number of required GPUs exceeds the total number of available GPUs|"
                      r"Waiting for creating a placement group|placement group.*(infeasible|timed out)",
     "Ray lacks the GPUs TP x PP needs: check `ray status` on the head (every node joined, with --num-gpus), "
     "and that VLLM_HOST_IP matches each node's Ray address."),
    ("nccl_failure", r"Watchdog caught collective operation timeout|NCCL WARN .*([Tt]imeout|[Ff]ailed|[Ee]rror)|NCCL error|ncclSystemError|ncclInternalError|"
                     r"ncclUnhandledCudaError|ncclRemoteError|DistBackendError|connectFullMesh|Gloo connectFullMesh failed|"
                     r"NCCL communicator was aborted|NET/Socket : (Connect|connect) to .* failed|"
                     r"NCCL_IB.*(not found|failed)|ProcessGroupNCCL.*(timeout|Timeout)",
     "NCCL/Gloo could not talk between the nodes: check the nccl role's cluster.env (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), "
     "the MTU and that the cluster network is open between the nodes; NCCL_DEBUG=INFO shows the transport chosen."),
]
_COMPILED = [(cls, re.compile(pattern), hint) for cls, pattern, hint in SIGNATURES]

HEALTHY = re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM API server .* on http")
# Lines after which a healthy start moves on; a log that stops here is hung.
HANG_HINT = ("vLLM stopped making progress during start-up: typically NCCL/Gloo init across nodes that cannot reach "
             "each other (check the cluster network and cluster.env), or a node missing from Ray.")


def clean(line):
    line = ANSI.sub("", line.rstrip("\r\n"))
    for prefix in PREFIXES:
        line = prefix.sub("", line, count=1)
    return line


def classify(lines, exited=None):
    """(failure_class, evidence lines, hint) of a log.

    exited: True when the process is known to have ended, False when it is
    known to run, None when unknown (a saved log)."""
    cleaned = [clean(line) for line in lines]
    for cls, pattern, hint in _COMPILED:
        evidence = [line for line in cleaned if pattern.search(line)]
        if evidence:
            return cls, _around(cleaned, evidence), hint
    if any(HEALTHY.search(line) for line in cleaned) and not exited:
        return "none", [line for line in cleaned if HEALTHY.search(line)][-1:], ""
    if exited or any(line.startswith("Traceback") for line in cleaned):
        tail = [line for line in cleaned if line.strip()][-5:]
        return "unknown", tail, "vLLM exited for a reason not recognised here: read the evidence and the full log."
    return "none", [], ""


def _around(cleaned, evidence, limit=6):
    """The matching lines, first ones first, at most `limit`."""
    seen = []
    for line in evidence:
        if line not in seen:
            seen.append(line)
    return seen[:limit]
