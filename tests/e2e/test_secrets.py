"""Secrets on the real-vLLM sandbox: a secret given where it would land on a
command line is refused before anything changes, naming the setting (never
its value) and the variable to use. (The API key and a secret in
vllm_serve_env reaching vLLM through the 0600 environment file only, printed
by no -vvv deploy: test_switch_backend.py's last step, which starts both real
ranks anyway.)"""

from __future__ import annotations

import re
import secrets

from conftest import leaks


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
