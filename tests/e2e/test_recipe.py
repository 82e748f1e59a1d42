"""Issue 40 on the sandbox: the tiny model served from its recipe (tests/sandbox/recipes/sandbox-tiny.yml, a
tool-call parser among its flags), parser names checked against the image's own vLLM before anything moves, and the
day-2 verbs: logs, stop and start."""

from __future__ import annotations

import re
import time

import pytest

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_the_recipe_s_model_and_flags_serve_and_answer_a_client_with_tools(sandbox):
    args = sandbox.container(sandbox.head)["args"]
    flags = " ".join(args)
    # the recipe's flags, the inventory's over them (gpu_memory_utilization, kv_cache_memory_bytes), the layout's TP 2
    for flag in ("--tool-call-parser pythonic", "--enable-auto-tool-choice", "--max-model-len 256",
                 "--gpu-memory-utilization 0.6", "--kv-cache-memory-bytes 67108864", "--tensor-parallel-size 2"):
        assert flag in flags, flags
    assert "/srv/models/sandbox-tiny" in args
    models = [model["id"] for model in sandbox.client.json("/v1/models")["data"]]
    assert models == ["tiny-sandbox"]
    reply = sandbox.client.json("/v1/chat/completions", {
        "model": "tiny-sandbox", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
        "tool_choice": "auto", "max_tokens": 8})
    message = reply["choices"][0]["message"]
    assert isinstance(message.get("content"), str) or message.get("tool_calls"), reply


@pytest.mark.parametrize(("flag", "wrong", "right"), [
    ("tool_call_parser", "pythnic", "pythonic"),
    ("reasoning_parser", "deepseek_r2", "deepseek_r1"),
])
def test_a_misspelled_parser_is_refused_before_anything_moves_naming_the_right_one(sandbox, poller, flag, wrong, right):
    before = {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes}
    args = dict(sandbox.serve_vars["vllm_serve_args"], **{flag: wrong})
    with poller() as polls:
        began = time.monotonic()
        run = sandbox.deploy(args, tags="image,model,vllm_serve")
        took = time.monotonic() - began
    said = " ".join(run.stdout.split()).replace("''", "'")  # the yaml callback doubles quotes in quoted scalars
    assert run.returncode != 0
    kind = "tool-call" if flag == "tool_call_parser" else "reasoning"
    assert re.search(rf"{flag} '{wrong}' is not a {kind} parser vLLM 0\.32\.0 in this image registers; "
                     rf"did you mean '{right}'\?", said), said[-3000:]
    # refused in the plan play: the model play, the proxy and vLLM's units were not reached
    assert "PLAY [The model on every node" not in run.stdout, run.stdout[-3000:]
    assert all(changed == "0" for changed in re.findall(r"changed=(\d+)", run.stdout)), run.stdout[-1500:]
    assert {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes} == before
    assert polls.failed == 0 and polls.ok > 0, (polls.ok, polls.failed)
    print(f"{flag} {wrong} refused {took:.1f} s after ansible-playbook started")


def test_a_server_that_refuses_requests_with_tools_is_rolled_back(sandbox):
    """The recipe's --enable-auto-tool-choice dropped (null): vLLM starts with its tool-call parser and answers
    completions, but refuses what a client with tools sends. Readiness asks one request with a tool: the change is
    rolled back on every node, naming why."""
    before = {node: sandbox.container(node)["args"] for node in sandbox.nodes}
    args = dict(sandbox.serve_vars["vllm_serve_args"], enable_auto_tool_choice=None)
    run = sandbox.deploy(args)
    said = " ".join(run.stdout.split()).replace("''", "'")
    assert run.returncode != 0
    assert "vLLM did not come up with the new configuration: tool_calling - " in said, said[-3000:]
    assert "--enable-auto-tool-choice" in said and "HTTP 400" in said
    assert "Rolled back every node to the last working configuration: healthy again." in said
    assert {node: sandbox.container(node)["args"] for node in sandbox.nodes} == before
    assert sandbox.complete()["choices"][0]["text"]


def test_logs_shows_every_rank_with_its_diagnosis(sandbox):
    run = sandbox.playbook("playbooks/logs.yml", {"lines": 20})
    assert run.returncode == 0, run.stdout[-3000:]
    for node in sandbox.nodes:
        assert f"{node} vllmops-vllm: active (running) - no error in these lines" in run.stdout, run.stdout[-4000:]
    assert "last 20 lines:" in run.stdout


def test_stop_keeps_everything_and_start_serves_again_on_the_same_configuration(sandbox):
    kept = {node: (sandbox.unit(node), sandbox.on(node, "sh", "-c", "cat /etc/vllmops/releases/index.json; "
                                                 "ls -l --time-style=+%s /etc/vllmops/releases 2>/dev/null; true"))
            for node in sandbox.nodes}
    images = {node: sandbox.on(node, "docker", "images", "--quiet", "--no-trunc") for node in sandbox.nodes}
    stopped = sandbox.playbook("playbooks/stop.yml")
    assert stopped.returncode == 0, stopped.stdout[-3000:]
    assert not sandbox.healthy()
    for node in sandbox.nodes:
        assert not sandbox.active(node, "vllmops-vllm") and not sandbox.container(node)
        assert sandbox.on(node, "systemctl", "is-enabled", "vllmops-vllm", check=False) == "disabled"
        assert not sandbox.active(node, "vllmops-vllm-health.timer")
        assert sandbox.on(node, "docker", "images", "--quiet", "--no-trunc") == images[node]
        assert sandbox.on(node, "test", "-f", "/srv/models/sandbox-tiny/config.json", check=False) == ""
    # logs says what a stopped rank says: no failure
    logs = sandbox.playbook("playbooks/logs.yml", {"lines": 5})
    assert f"{sandbox.head} vllmops-vllm: inactive (dead)" in logs.stdout, logs.stdout[-3000:]

    began = time.monotonic()
    started = sandbox.playbook("playbooks/start.yml")
    took = time.monotonic() - began
    assert started.returncode == 0, started.stdout[-4000:]
    assert sandbox.complete()["choices"][0]["text"]
    for node in sandbox.nodes:
        assert sandbox.active(node, "vllmops-vllm")
        assert sandbox.on(node, "systemctl", "is-enabled", "vllmops-vllm") == "enabled"
    assert sandbox.active(sandbox.head, "vllmops-vllm-health.timer")
    # the same release: the units as they were, still the last working one, the one before it untouched
    assert {node: (sandbox.unit(node), sandbox.on(node, "sh", "-c", "cat /etc/vllmops/releases/index.json; "
                                                  "ls -l --time-style=+%s /etc/vllmops/releases 2>/dev/null; true"))
            for node in sandbox.nodes} == kept
    print(f"start.yml served again {took:.0f} s after it began")
