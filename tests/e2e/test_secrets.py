"""Secrets on the real-vLLM sandbox: a secret given where it would land on a
command line is refused before anything changes, naming the setting (never
its value) and the variable to use; the API key and a secret in
vllm_serve_env reach vLLM (the key is enforced) through the 0600 environment
file only - a deploy.yml at -vvv prints neither, and neither is in a
unit file, a process's arguments or a journal. That deploy changes one flag
too: each rank restarts once. Leaves the sandbox as the
inventory describes it."""

from __future__ import annotations

import re
import secrets

ENV_FILE = "/etc/vllmops/vllm.env"


def leaks(text: str, found: dict) -> list[str]:
    """The names (never the values) of the secrets the text holds."""
    return [name for name, value in found.items() if value in text]


def exposed(sandbox, node: str) -> str:
    """Where a secret in clear must not be on a node: unit files, every process's arguments, the whole journal, the
    arguments of our containers."""
    return sandbox.on(node, "sh", "-c", "cat /etc/systemd/system/vllmops-*; ps -eo args; journalctl --no-pager --output cat;"
                      " docker inspect --format '{{json .Args}} {{json .Path}}' $(docker ps --quiet --filter label=io.vllmops.unit)")


def status_of(sandbox, key: str | bool | None) -> int:
    """/v1/models through the API proxy, as a client: key None - none, True - the one the deployment generated."""
    return sandbox.client.request("/v1/models", key=key, timeout=30)[0]


def test_a_secret_given_where_it_would_land_on_a_command_line_is_refused_and_nothing_changes(sandbox):
    key, token = "refused-" + secrets.token_hex(12), "hf_refused" + secrets.token_hex(12)
    before = {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes}
    run = sandbox.deploy(dict(sandbox.serve_vars["vllm_serve_args"], api_key=key),
                         extra={"vllm_serve_docker_args": ["--env", f"HF_TOKEN={token}"]})
    assert run.returncode != 0
    assert "vllm_serve_args.api_key (" in run.stdout and "set vllm_serve_api_key instead" in run.stdout, run.stdout[-3000:]
    assert "--env HF_TOKEN=... (" in run.stdout and "put it in vllm_serve_env" in run.stdout, run.stdout[-3000:]
    assert leaks(run.stdout + run.stderr, {"key": key, "token": token}) == []
    assert all(changed == "0" for changed in re.findall(r"changed=(\d+)", run.stdout)), run.stdout[-1500:]
    assert {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes} == before


def test_a_flag_and_two_secrets_changed_restart_each_rank_once_and_at_vvv_no_secret_is_printed(sandbox):
    found = {"API key": "e2e-key-" + secrets.token_hex(16), "HF token": "hf_e2e" + secrets.token_hex(16)}
    env = dict(sandbox.serve_vars["vllm_serve_env"], HF_TOKEN=found["HF token"])
    changed = dict(sandbox.serve_vars["vllm_serve_args"], max_num_seqs=8)
    starts = {node: sandbox.starts(node) for node in sandbox.nodes}
    try:
        # one flag and both secrets in one change (the plays that carry them: preflight, plan, api_proxy,
        # vllm_serve); molecule ray's rotation story runs the whole deploy.yml at -vvv with Ray's token and the API key
        run = sandbox.deploy(changed, extra={"vllm_serve_api_key": found["API key"], "vllm_serve_env": env},
                             args=("-vvv",), echo=False)
        assert run.returncode == 0, run.stdout[-3000:]
        assert {node: sandbox.starts(node) for node in sandbox.nodes} == {n: c + 1 for n, c in starts.items()}
        for node in sandbox.nodes:
            args = sandbox.container(node)["args"]
            assert args[args.index("--max-num-seqs") + 1] == "8", node
        assert len(run.stdout) > 50_000  # -vvv: every task's result, connection and module transfer
        assert leaks(run.stdout + run.stderr, found) == [], "the -vvv run printed a secret"
        for node in sandbox.nodes:
            assert sandbox.on(node, "stat", "--format", "%a %U", ENV_FILE) == "600 root"
            held = sandbox.on(node, "cat", ENV_FILE)
            assert leaks(held, found) == list(found), node  # they were given: the test can fail
            assert leaks(exposed(sandbox, node), found) == [], node
        assert [status_of(sandbox, key) for key in (None, True, found["API key"])] == [401, 401, 200]
    finally:
        # the inventory's flags and the generated key back, in the proxy and in vLLM (the api_proxy play is
        # tagged vllm_serve too)
        back = sandbox.deploy()
    assert back.returncode == 0, back.stdout[-3000:]
    assert [status_of(sandbox, key) for key in (None, True, found["API key"])] == [401, 200, 401]
    assert "--max-num-seqs" not in sandbox.container(sandbox.head)["args"]
    assert sandbox.complete()["choices"][0]["text"]
