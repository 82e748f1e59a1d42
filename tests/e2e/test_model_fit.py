"""What vLLM would refuse at start about the model is refused before any rank restarts, with the numbers: a KV cache
far larger than the node's memory (vLLM found it at start: a restart and a rollback, the endpoint down ~65 s), and
a context longer than the model allows. The serving containers stay as they were and the endpoint never fails."""

from __future__ import annotations

import time


def _refused(sandbox, poller, **change):
    before = {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes}
    with poller() as polls:
        began = time.monotonic()
        run = sandbox.deploy(dict(sandbox.serve_vars["vllm_serve_args"], **change), echo=False)
        took = time.monotonic() - began
    assert run.returncode != 0, run.stdout[-3000:]
    assert {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes} == before
    assert polls.failed == 0 and polls.ok > 0, (polls.ok, polls.failed)
    return " ".join(run.stdout.split()), took


def test_a_kv_cache_larger_than_the_node_and_a_context_longer_than_the_model_are_refused_before_a_restart(
        sandbox, poller):
    said, took = _refused(sandbox, poller, kv_cache_memory_bytes=1 << 40)
    assert "one rank of /srv/models/sandbox-tiny needs more than its GPU holds:" in said, said[-3000:]
    assert "+ kv_cache_memory_bytes 1024.0 GiB >" in said and "x gpu_memory_utilization 0.6)" in said
    assert "What would fit: kv_cache_memory_bytes at most" in said and "Nothing was restarted." in said
    print(f"a 1 TiB KV cache refused {took:.1f} s after ansible-playbook started (--tags vllm_serve)")

    said, took = _refused(sandbox, poller, max_model_len=4096)
    assert ("max_model_len 4096 is longer than /srv/models/sandbox-tiny allows (2048 tokens, from its config.json): "
            "vLLM refuses it at start. Set max_model_len to at most 2048.") in said, said[-3000:]
    print(f"max_model_len 4096 refused {took:.1f} s after ansible-playbook started (--tags vllm_serve)")
