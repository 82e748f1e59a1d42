"""Secrets given where they would land on a command line, in a unit file and in Ansible's output are found, named
(never echoed) and pointed at the variable that keeps them safe; everything else passes."""

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.secret_arguments import is_secret_name, secret_arguments

SECRET = "s3cr3t-value-never-echoed"

# (id, one host's settings, the settings the message must name (in order), a fragment of the fix)
REFUSED = [
    ("api_key", {"vllm_serve_args": {"api_key": SECRET}}, ["vllm_serve_args.api_key"], "set vllm_serve_api_key instead"),
    ("api-key with dashes", {"vllm_serve_args": {"--api-key": SECRET}}, ["vllm_serve_args.--api-key"], "vllm_serve_api_key"),
    ("an abbreviation argparse resolves", {"vllm_serve_args": {"api_ke": SECRET}}, ["vllm_serve_args.api_ke"], "vllm_serve_api_key"),
    ("hf_token", {"vllm_serve_args": {"hf_token": SECRET}}, ["vllm_serve_args.hf_token"], "vllm_serve_env: {HF_TOKEN: ...}"),
    ("HF-Token in capitals", {"vllm_serve_args": {"HF-Token": SECRET}}, ["vllm_serve_args.HF-Token"], "HF_TOKEN"),
    ("--env NAME=VALUE", {"vllm_serve_docker_args": ["--env", f"HF_TOKEN={SECRET}"]},
     ["vllm_serve_docker_args: --env HF_TOKEN=..."], "put it in vllm_serve_env"),
    ("one item with both words", {"vllm_serve_docker_args": [f"--env HUGGING_FACE_HUB_TOKEN={SECRET}"]},
     ["vllm_serve_docker_args: --env HUGGING_FACE_HUB_TOKEN=..."], "vllm_serve_env"),
    ("-e", {"vllm_serve_docker_args": ["-e", f"WANDB_API_KEY={SECRET}"]}, ["vllm_serve_docker_args: --env WANDB_API_KEY=..."],
     "vllm_serve_env"),
    ("-eNAME=VALUE", {"vllm_serve_docker_args": [f"-eAWS_SECRET_ACCESS_KEY={SECRET}"]},
     ["vllm_serve_docker_args: --env AWS_SECRET_ACCESS_KEY=..."], "vllm_serve_env"),
    ("--env=NAME=VALUE", {"vllm_serve_docker_args": [f"--env=VLLM_API_KEY={SECRET}"]},
     ["vllm_serve_docker_args: --env VLLM_API_KEY=..."], "set vllm_serve_api_key instead"),
    ("Ray's token in Ray's container", {"ray_cluster_docker_args": ["--env", f"RAY_AUTH_TOKEN={SECRET}"]},
     ["ray_cluster_docker_args: --env RAY_AUTH_TOKEN=..."], "Ray's token is ray_cluster_token"),
    ("a password flag of ray start", {"ray_cluster_start_args": [f"--redis-password={SECRET}"]},
     ["ray_cluster_start_args: --redis-password ..."], "Ray's token authentication (ray_cluster_token)"),
    ("a password flag, value apart", {"ray_cluster_start_args": ["--redis-password", SECRET]},
     ["ray_cluster_start_args: --redis-password ..."], "remove it"),
    ("two at once", {"vllm_serve_args": {"api_key": SECRET, "hf_token": SECRET, "max_model_len": 4096}},
     ["vllm_serve_args.api_key", "vllm_serve_args.hf_token"], "instead"),
]


@pytest.mark.parametrize(("settings", "named", "fix"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_secrets_are_named_with_their_fix_and_never_echoed(settings, named, fix):
    problems = secret_arguments({"node1": settings})
    assert [problem.split(" (node1)")[0] for problem in problems] == named
    assert fix in problems[0]
    assert "unit file" in problems[0]
    assert SECRET not in " ".join(problems)


ACCEPTED = [
    ("ordinary flags", {"vllm_serve_args": {"max_model_len": 4096, "max_num_batched_tokens": 8192, "tokenizer": "x",
                                            "tokenizer_mode": "auto", "api_server_count": 2, "ssl_keyfile": "/etc/k.pem"}}),
    ("flags left out", {"vllm_serve_args": {"api_key": None}}),
    ("--hf-token true (the login's token)", {"vllm_serve_args": {"hf_token": True}}),
    ("an ambiguous prefix argparse refuses anyway", {"vllm_serve_args": {"api": "x"}}),
    ("env passed through by name", {"vllm_serve_docker_args": ["--env", "HF_TOKEN"]}),
    ("an env file", {"vllm_serve_docker_args": ["--env-file", "/etc/secret.env", "--env-file=/etc/token.env"]}),
    ("harmless env", {"vllm_serve_docker_args": ["--env", "VLLM_LOGGING_LEVEL=DEBUG", "-e", "NCCL_DEBUG=INFO"]}),
    ("Ray's token path", {"ray_cluster_docker_args": ["--env", "RAY_AUTH_TOKEN_PATH=/etc/vllmops/ray/auth_token"]}),
    ("switch flags", {"ray_cluster_start_args": ["--disable-usage-stats", "--include-log-monitor=false"]}),
    ("nothing set", {}),
]


@pytest.mark.parametrize("settings", [case[1] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_settings_without_secrets_pass(settings):
    assert secret_arguments({"node1": settings}) == []


def test_one_sentence_per_secret_naming_every_host_that_has_it():
    hosts = {"node1": {"vllm_serve_args": {"api_key": SECRET}}, "node2": {"vllm_serve_args": {"api_key": SECRET}},
             "node3": {"vllm_serve_args": {}, "vllm_serve_docker_args": ["-e", f"HF_TOKEN={SECRET}"]}}
    problems = secret_arguments(hosts)
    assert len(problems) == 2
    assert problems[0].startswith("vllm_serve_args.api_key (node1, node2): a value for vLLM's --api-key lands in")
    assert problems[1].startswith("vllm_serve_docker_args: --env HF_TOKEN=... (node3): ")


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("VLLM_API_KEY", True), ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True),
    ("GOOGLE_APPLICATION_CREDENTIALS", True), ("NGC_APIKEY", True), ("--redis-password", True), ("PRIVATE_KEY", True),
    ("RAY_AUTH_TOKEN_PATH", False), ("HF_TOKEN_FILE", False), ("RAY_AUTH_MODE", False),  # they point at a secret
    ("MAX_TOKENS", False), ("TOKENIZERS_PARALLELISM", False), ("NCCL_IB_HCA", False), ("KEYBOARD", False),
    ("--max-num-batched-tokens", False), ("--tokenizer", False), ("--ssl-keyfile", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret
