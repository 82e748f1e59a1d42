#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_ready
short_description: Wait until a vLLM server answers, or say in one line why it will not
version_added: 0.1.0
description:
  - Polls the server's C(/health), then checks that C(/v1/models) lists O(served_model_name) and that one short
    completion succeeds, until O(timeout).
  - Fails fast, without waiting out the deadline, when the systemd O(unit) stopped or systemd is restarting it
    (the process exited), and when its log makes no progress for O(hang_window) seconds before the server
    answers (a hang, for example NCCL init across nodes that cannot reach each other). Files written under
    O(progress_paths) count as progress too - a JIT or torch.compile run that logs nothing for minutes while it
    fills its cache is not a hang.
  - On failure reads the unit's log since O(since) and classifies it (RV(failure_class) lists the classes), with the
    matching log lines as evidence and the fix to try. The cause wins over its consequences (an OOM over the engine
    it killed); otherwise the first fatal error in the log wins.
  - With O(log_file) it only classifies a saved log, waiting for nothing - C(none) only for a log that shows a
    healthy start-up with no error after it, C(hang) for one that stops before the server is up without an error.
options:
  url:
    description: Base URL of the server, for example C(http://127.0.0.1:8000).
    type: str
    default: http://127.0.0.1:8000
  served_model_name:
    description: The name C(/v1/models) must list; the completion asks for it.
    type: str
  task:
    description:
      - C(generate) asks for a completion; C(embed) (an embedding model, which serves no completions) for one
        embedding, a list of numbers.
    type: str
    choices: [generate, embed]
    default: generate
  tools:
    description:
      - Also send one chat request with a tool (C(tool_choice) C(auto)), as a client with tools does, once the
        completion answered. The server must accept it and answer in the protocol's shape - a message with text or
        tool calls (functions with a name and string arguments). A refusal or another shape fails at once with
        C(failure_class) C(tool_calling), the server's answer as evidence.
      - For a server started with a tool-call parser.
    type: bool
    default: false
  api_key:
    description: The API key, sent as C(Authorization) C(Bearer KEY) on every request but C(/health).
    type: str
  ca_path:
    description:
      - CA certificate (PEM) that signed an C(https) O(url)'s certificate, for example the API proxy's. Default the
        system's trust store.
    type: path
  validate_certs:
    description: Check an C(https) O(url)'s certificate and name. Leave it on; off only to diagnose.
    type: bool
    default: true
  unit:
    description: The systemd unit running the server; its state and journal are read.
    type: str
    default: vllmops-vllm
  since:
    description: Read the unit's journal from this time (seconds since the epoch); default the unit's last start.
    type: float
  timeout:
    description: Seconds to wait for the server to answer.
    type: int
    default: 900
  hang_window:
    description: Seconds without a new log line (and no answer) after which start-up counts as hung. 0 turns it off.
    type: int
    default: 300
  progress_paths:
    description: Directories whose newest file (by modification time, searched recursively) counts as progress
      like a new log line - the caches a silent compile writes.
    type: list
    elements: path
    default: []
  interval:
    description: Seconds between checks.
    type: int
    default: 2
  log_file:
    description: Classify this saved log instead of waiting for a server.
    type: path
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
    description: Nothing changes.
  idempotent:
    support: full
    description: Never changes the host.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Wait for vLLM after a restart, through the API proxy as a client does
  vllmops.cluster.vllm_ready:
    url: https://127.0.0.1:8000
    ca_path: /etc/vllmops/api-proxy/ca.crt
    served_model_name: qwen3.5-122b
    api_key: "{{ vllm_serve_api_key }}"
    timeout: 900
    hang_window: 300

- name: Why did last night's server die?
  vllmops.cluster.vllm_ready:
    log_file: /tmp/vllm-crash.log
  register: diagnosis
"""

RETURN = r"""
ready:
  description: The server answered health, models and a completion.
  returned: always
  type: bool
failure_class:
  description:
    - C(none) when healthy, else the cause.
    - C(unknown_flag) a flag this vLLM does not take; C(removed_option) an option passed from Python that it no longer
      has (C(unexpected keyword argument)).
    - C(model_not_found) no such model path, hub repo or revision; C(model_unauthorized) the hub refuses it (gated,
      private, bad token); C(worker_model_missing) the model is missing on a Ray worker node.
    - C(unsupported_architecture) the image's vLLM does not know the model's architecture.
    - C(oom) out of GPU or host memory; C(kv_cache_too_small) the KV cache cannot hold one sequence of max_model_len.
    - C(gpu_unavailable) no GPU in the container; C(container_toolkit) the container runtime cannot hand the GPU over
      (device driver, CDI, hook); C(gpu_driver) the NVIDIA driver is mismatched or too old.
    - C(nccl_failure) NCCL/Gloo cannot talk between the nodes; C(rendezvous_timeout) a rank never joined.
    - C(ray_placement) Ray lacks the GPUs TP x PP needs; C(ray_gcs) a node cannot reach Ray's GCS or was lost.
    - C(port_in_use) the port is taken; C(engine_dead) vLLM's engine died of a cause not recognised.
    - C(hang) start-up stopped making progress; C(unknown) an error not recognised (its last lines are the evidence).
    - C(tool_calling) the server answers, but refuses a request with tools or answers it in another shape (O(tools)).
  returned: always
  type: str
evidence:
  description: The log lines that show the cause (cleaned of prefixes and colours).
  returned: always
  type: list
  elements: str
hint:
  description: The fix to try.
  returned: always
  type: str
waited:
  description: Seconds waited.
  returned: always
  type: float
log_tail:
  description: The last lines of the log read.
  returned: always
  type: list
  elements: str
"""

import contextlib
import json
import os
import time
from urllib.error import HTTPError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.vllmops.cluster.plugins.module_utils.api_checks import (
    TOOL_HINT,
    embedding_reply_problem,
    tool_reply_problem,
    tool_request,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_logs import HANG_HINT, classify


class Refused(Exception):
    """The server answers, and refuses what a client asks: no waiting cures it."""


def unit_state(module, unit):
    rc, out, _err = module.run_command(["systemctl", "show", unit, "--property=ActiveState,SubState,NRestarts"])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}
    return props


def newest_write(paths) -> float:
    """The newest modification time of any file or directory under paths (0 when none exists)."""
    newest = 0.0
    for top in paths:
        for root, dirs, files in os.walk(top):
            for name in [*dirs, *files, ""]:
                with contextlib.suppress(OSError):  # gone while walking
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def journal(module, unit, since):
    rc, out, _err = module.run_command(["journalctl", "--unit", unit, "--since", f"@{int(since)}", "--no-pager", "--output", "cat"])
    return out.splitlines() if rc == 0 else []


def answers(module, params):
    headers = {"Authorization": f"Bearer {params['api_key']}"} if params["api_key"] else {}
    tls = {"ca_path": params["ca_path"], "validate_certs": params["validate_certs"]}
    try:
        open_url(params["url"] + "/health", timeout=5, **tls).read()
        models = json.loads(open_url(params["url"] + "/v1/models", headers=headers, timeout=10, **tls).read())
        names = [model.get("id") for model in models.get("data", [])]
        if params["served_model_name"] and params["served_model_name"] not in names:
            return False, f"/v1/models lists {names}, not {params['served_model_name']}"
        model = params["served_model_name"] or names[0]
        post = dict(headers, **{"Content-Type": "application/json"})
        if params["task"] == "embed":
            done = json.loads(open_url(params["url"] + "/v1/embeddings", data=json.dumps({"model": model, "input": "Hello"}),
                                       method="POST", timeout=120, headers=post, **tls).read())
            problem = embedding_reply_problem(done)
            return not problem, problem
        body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 4})
        done = json.loads(open_url(params["url"] + "/v1/completions", data=body, method="POST", timeout=120,
                                   headers=post, **tls).read())
        if not done.get("choices"):
            return False, "completion without choices"
    except Exception as err:  # any failure means: not ready yet
        return False, str(err)
    if params["tools"]:
        tool_answer(params["url"], post, tls, model)
    return True, ""


def tool_answer(url, headers, tls, model):
    """One chat request with a tool; Refused when the server rejects it or answers in another shape."""
    try:
        reply = json.loads(open_url(url + "/v1/chat/completions", data=json.dumps(tool_request(model)), method="POST",
                                    timeout=120, headers=headers, **tls).read())
    except HTTPError as err:
        raise Refused(f"HTTP {err.code}: {err.read()[:500].decode(errors='replace')}") from None
    except ValueError as err:
        raise Refused(f"the reply is not JSON: {err}") from None
    problem = tool_reply_problem(reply)
    if problem:
        raise Refused(f"{problem}: {json.dumps(reply)[:500]}")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:8000"),
            served_model_name=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            ca_path=dict(type="path"),
            validate_certs=dict(type="bool", default=True),
            unit=dict(type="str", default="vllmops-vllm"),
            since=dict(type="float"),
            timeout=dict(type="int", default=900),
            hang_window=dict(type="int", default=300),
            progress_paths=dict(type="list", elements="path", default=[]),
            interval=dict(type="int", default=2),
            log_file=dict(type="path"),
            task=dict(type="str", default="generate", choices=["generate", "embed"]),
            tools=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["log_file"]:
        try:
            with open(params["log_file"], errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError as err:
            module.fail_json(msg=f"cannot read {params['log_file']}: {err}")
        failure_class, evidence, hint = classify(lines, exited=None)
        module.exit_json(changed=False, ready=failure_class == "none", failure_class=failure_class, evidence=evidence,
                         hint=hint, waited=0.0, log_tail=lines[-20:])

    started = time.monotonic()
    first = unit_state(module, params["unit"])
    since = params["since"] or (time.time() - 2)
    restarts = first.get("NRestarts")
    last_lines, last_change = 0, time.monotonic()
    last_write = newest_write(params["progress_paths"])
    why = "no answer yet"
    while True:
        try:
            ready, why = answers(module, params)
        except Refused as refused:
            module.fail_json(msg=f"vLLM answers, but not a request with tools: {refused} - {TOOL_HINT}", ready=False,
                             failure_class="tool_calling", evidence=[str(refused)], hint=TOOL_HINT,
                             waited=round(time.monotonic() - started, 1), log_tail=journal(module, params["unit"], since)[-20:])
        waited = round(time.monotonic() - started, 1)
        lines = journal(module, params["unit"], since)
        if ready:
            module.exit_json(changed=False, ready=True, failure_class="none", evidence=[], hint="", waited=waited,
                             log_tail=lines[-5:])
        state = unit_state(module, params["unit"])
        exited = (state.get("ActiveState") in ("failed", "inactive") or state.get("SubState") == "auto-restart"
                  or state.get("NRestarts") != restarts)
        if len(lines) != last_lines:
            last_lines, last_change = len(lines), time.monotonic()
        written = newest_write(params["progress_paths"])
        if written > last_write:
            last_write, last_change = written, time.monotonic()
        hung = params["hang_window"] and time.monotonic() - last_change >= params["hang_window"]
        if exited or hung or waited >= params["timeout"]:
            failure_class, evidence, hint = classify(lines, exited=exited)
            if not exited and failure_class in ("none", "unknown"):
                failure_class, evidence, hint = "hang", [line for line in lines if line.strip()][-5:], HANG_HINT
            cause = ("the process exited" if exited else
                     f"no new log line for {params['hang_window']} s" if hung else f"no answer within {params['timeout']} s")
            module.fail_json(
                msg=f"vLLM is not ready ({cause}; last answer: {why}): {failure_class} - {hint}",
                ready=False, failure_class=failure_class, evidence=evidence, hint=hint, waited=waited, log_tail=lines[-20:])
        time.sleep(params["interval"])


if __name__ == "__main__":
    main()
