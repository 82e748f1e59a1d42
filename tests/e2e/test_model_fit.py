"""What vLLM would refuse at start about the model is refused before any rank restarts, with the numbers: a KV cache
far larger than the node's memory (vLLM found it at start: a restart and a rollback, the endpoint down ~65 s), and
a context longer than the model allows; and a new model on the hub whose attention heads the cluster's tensor
parallel size does not divide, refused by a whole deploy before a byte of its weights is fetched. The serving
containers stay as they were and the endpoint never fails."""

from __future__ import annotations

import time

from test_model import HUB_LOG, publish_tiny_variant


def _refused(sandbox, poller, **deploy):
    """Run deploy.yml (sandbox.deploy's arguments); it must fail with the serving containers and units as they were
    and no failed health poll. Returns the output (lines joined), the seconds it took, and the run."""
    before = {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes}
    with poller() as polls:
        began = time.monotonic()
        run = sandbox.deploy(echo=False, **deploy)
        took = time.monotonic() - began
    assert run.returncode != 0, run.stdout[-3000:]
    assert {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes} == before
    assert polls.failed == 0 and polls.ok > 0, (polls.ok, polls.failed)
    return " ".join(run.stdout.split()), took, run


def _serve_args(sandbox, **change):
    return dict(sandbox.serve_vars["vllm_serve_args"], **change)


def test_a_kv_cache_larger_than_the_node_and_a_context_longer_than_the_model_are_refused_before_a_restart(
        sandbox, poller):
    said, took, _ = _refused(sandbox, poller, serve_args=_serve_args(sandbox, kv_cache_memory_bytes=1 << 40))
    assert "one rank of /srv/models/sandbox-tiny needs more than its GPU holds:" in said, said[-3000:]
    assert "+ kv_cache_memory_bytes 1024.0 GiB >" in said and "x gpu_memory_utilization 0.6)" in said
    assert "What would fit: kv_cache_memory_bytes at most" in said and "Nothing was restarted." in said
    print(f"a 1 TiB KV cache refused {took:.1f} s after ansible-playbook started (--tags vllm_serve)")

    said, took, _ = _refused(sandbox, poller, serve_args=_serve_args(sandbox, max_model_len=4096))
    assert ("max_model_len 4096 is longer than /srv/models/sandbox-tiny allows (2048 tokens, from its config.json): "
            "vLLM refuses it at start. Set max_model_len to at most 2048.") in said, said[-3000:]
    print(f"max_model_len 4096 refused {took:.1f} s after ansible-playbook started (--tags vllm_serve)")


def test_a_new_hub_model_whose_heads_the_layout_does_not_divide_is_refused_by_a_whole_deploy_before_its_weights_move(
        sandbox, poller):
    """A whole deploy (every play, as an operator runs it) with a model whose 3 attention heads TP 2 does not divide:
    the plan play reads its config.json through the hub client and refuses before the model play, so the hub served
    config.json alone, nothing was written under the models directory, and nothing restarted."""
    revision = publish_tiny_variant("sandbox/tiny-heads3", num_attention_heads=3, num_key_value_heads=3)
    served = len(HUB_LOG.read_text().splitlines())
    said, took, run = _refused(sandbox, poller, tags="all", extra={
        "model_hub_repo": "sandbox/tiny-heads3", "model_hub_revision": revision, "vllm_serve_model": "sandbox-heads3"})
    assert ("tensor parallel size 2 does not fit /srv/models/sandbox-heads3: vLLM needs the tensor parallel size to "
            "divide the model's 3 attention heads. Sizes that fit: 1, 3;") in said, said[-3000:]
    assert "Nothing was restarted." in said
    # Refused in the plan play: the model play never began.
    assert "PLAY [The model on every node" not in run.stdout, run.stdout[-3000:]
    fetched = [line.split()[1] for line in HUB_LOG.read_text().splitlines()[served:] if "/resolve/" in line]
    assert fetched and all(path.endswith("/config.json") for path in fetched), fetched
    for node in sandbox.nodes:
        assert sandbox.on(node, "sh", "-c", "ls -d /srv/models/sandbox-heads3* "
                          "/srv/models/.vllmops-staging/sandbox-heads3 2>/dev/null; true") == "", node
    print(f"TP 2 over 3 heads refused {took:.1f} s after ansible-playbook started (a whole deploy, every play); "
          f"the hub's file requests: {len(fetched)}, all for config.json")


def test_a_run_without_the_model_play_refuses_nodes_that_hold_another_model_than_the_one_checked(sandbox, poller):
    """The check reads the model where its weights come from; `--tags vllm_serve` does not run the model play, so a
    source that changed (here another hub repository for the same directory) is not what the nodes hold: refused
    after the check, before any rank restarts, naming the fix."""
    revision = publish_tiny_variant("sandbox/tiny-next", max_position_embeddings=1024)
    said, _, _ = _refused(sandbox, poller, extra={"model_hub_repo": "sandbox/tiny-next", "model_hub_revision": revision})
    assert (f"/srv/models/sandbox-tiny on {sandbox.head} is not the model that was checked before anything moved "
            f"(sandbox/tiny-next@{revision}: their config.json differ)") in said, said[-3000:]
    assert "run it too (--tags model,vllm_serve, or deploy.yml without --tags). Nothing was restarted." in said
