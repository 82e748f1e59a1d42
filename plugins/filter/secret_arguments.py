# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: secret_arguments
short_description: The secrets given in settings that become command lines
version_added: 0.1.0
description:
  - A value in C(vllm_serve_args), C(vllm_serve_docker_args), C(ray_cluster_docker_args) or C(ray_cluster_start_args)
    lands in a systemd unit file, in the container's arguments (C(docker inspect), the process list) and in Ansible's
    output. This filter finds the secrets among them and returns one sentence per secret, naming the hosts, the
    setting (never its value) and the variable that keeps it safe.
  - Secrets are - the C(vllm serve) flags C(--api-key) and C(--hf-token) (with a value other than true/false) and their
    abbreviations; in argument lists, C(docker run --env NAME=VALUE) (C(-e), C(--env=)) whose NAME, and any
    C(--flag value) whose flag name, holds a word such as TOKEN, PASSWORD, SECRET, CREDENTIALS, or API KEY, ACCESS KEY,
    PRIVATE KEY (not when it ends in PATH, FILE, DIR or MODE, which point at a secret). C(--env NAME) without a value,
    and C(--env-file), are not secrets on the command line.
positional: _input
options:
  _input:
    description:
      - Host name to that host's settings - a mapping of variable name (C(vllm_serve_args), C(vllm_serve_docker_args),
        C(ray_cluster_docker_args), C(ray_cluster_start_args)) to its value (a mapping of flags, or a list of
        arguments). Missing variables are not checked.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse secrets where they would land on a command line (all hosts at once)
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems }}"
  vars:
    problems: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'secret_settings')))
         | vllmops.cluster.secret_arguments }}
    # ["vllm_serve_args.api_key (node1, node2): ... set vllm_serve_api_key instead ...", ...]
"""

RETURN = r"""
_value:
  description: One sentence per secret found, naming the hosts, the setting and the fix; empty when none.
  type: list
  elements: str
"""

import re
from itertools import pairwise

# vLLM flags that take a secret, the shortest abbreviation argparse resolves to them, and where the secret belongs.
SERVE_FLAGS = {
    "api_key": ("api_k", "set vllm_serve_api_key instead (kept in a 0600 environment file as VLLM_API_KEY)"),
    "hf_token": ("hf_t", "set vllm_serve_env: {HF_TOKEN: ...} instead (a 0600 environment file)"),
}
# Words of a variable or flag name that mark a secret; pairs mark one together.
SECRET_WORDS = {"token", "password", "passwd", "secret", "credential", "credentials", "apikey"}
SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("auth", "key")}
# A name ending so points at a secret (RAY_AUTH_TOKEN_PATH, HF_TOKEN_FILE) or configures one: not a secret itself.
POINTER_WORDS = {"path", "file", "dir", "mode"}
SAFE_PLACE = {
    "vllm_serve_docker_args": "put it in vllm_serve_env (a 0600 environment file the container reads)",
    "ray_cluster_docker_args": "remove it: Ray's containers take no secret of yours (Ray's own token is ray_cluster_token)",
    "ray_cluster_start_args": "remove it: Ray's token authentication (ray_cluster_token) guards the cluster",
}
ENV_FIXES = {
    "VLLM_API_KEY": "set vllm_serve_api_key instead (kept in a 0600 environment file)",
    "RAY_AUTH_TOKEN": "remove it: Ray's token is ray_cluster_token (or generated), kept in a 0600 file on each node",
}
LANDS = "lands in the unit file, the container's arguments and Ansible's output"


def _words(name: str) -> list[str]:
    return [word for word in re.split(r"[-_.]+", name.lower()) if word]


def is_secret_name(name: str) -> bool:
    """True for names such as HF_TOKEN, VLLM_API_KEY, AWS_SECRET_ACCESS_KEY, --redis-password."""
    words = _words(name)
    if words and words[-1] in POINTER_WORDS:
        return False
    return bool(SECRET_WORDS.intersection(words)) or any(pair in SECRET_PAIRS for pair in pairwise(words))


def _serve_flag(key: str) -> str | None:
    """The secret vLLM flag a vllm_serve_args key names (exactly, with dashes, or abbreviated)."""
    normalized = str(key).lstrip("-").replace("-", "_").lower()
    for flag, (shortest, _fix) in SERVE_FLAGS.items():
        if normalized == flag or (normalized.startswith(shortest) and flag.startswith(normalized)):
            return flag
    return None


def _serve_args(args) -> list[tuple[str, str]]:
    found = []
    for key, value in (args or {}).items():
        flag = _serve_flag(key)
        if flag is None or value is None or isinstance(value, bool):
            continue  # null leaves the flag out; --hf-token true/false uses the login's token, not a secret
        found.append((f"vllm_serve_args.{key}", f"a value for vLLM's --{flag.replace('_', '-')} {LANDS}: "
                      f"{SERVE_FLAGS[flag][1]}"))
    return found


def _env_assignment(args: list[str], index: int) -> tuple[str | None, int]:
    """(NAME=VALUE, next index) when args[index] is a docker --env / -e with an assignment."""
    arg = args[index]
    if arg in ("--env", "-e"):
        value = args[index + 1] if index + 1 < len(args) else ""
        return value, index + 2
    for prefix in ("--env=", "-e"):
        if arg.startswith(prefix) and arg != "-e":
            return arg[len(prefix):], index + 1
    return None, index + 1


def _argument_list(variable: str, args) -> list[tuple[str, str]]:
    args = [str(arg) for arg in args or []]
    # One list item may hold several words ("--env A=b"): look at the words.
    words = [word for arg in args for word in arg.split()]
    found, index = [], 0
    while index < len(words):
        assignment, following = _env_assignment(words, index)
        if assignment is not None:
            name, has_value, _value = assignment.partition("=")
            if has_value and is_secret_name(name):
                fix = ENV_FIXES.get(name, SAFE_PLACE.get(variable, "remove it"))
                found.append((f"{variable}: --env {name}=...", f"a secret in the environment given on docker's command "
                              f"line {LANDS}: {fix}"))
            index = following
            continue
        word = words[index]
        flag, has_inline, _value = word.partition("=")
        if flag.startswith("-") and is_secret_name(flag):
            takes_value = has_inline or (index + 1 < len(words) and not words[index + 1].startswith("-"))
            if takes_value:
                found.append((f"{variable}: {flag} ...", f"a secret given as an argument {LANDS}: "
                              f"{SAFE_PLACE.get(variable, 'remove it')}"))
        index += 1
    return found


def secret_arguments(hosts) -> list[str]:
    by_problem: dict[tuple[str, str], list[str]] = {}
    for host, settings in (hosts or {}).items():
        for variable, value in (settings or {}).items():
            if isinstance(value, dict):
                problems = _serve_args(value)
            elif isinstance(value, (list, tuple)):
                problems = _argument_list(variable, value)
            else:
                problems = []
            for problem in problems:
                by_problem.setdefault(problem, []).append(str(host))
    return [f"{where} ({', '.join(hosts_with)}): {why}." for (where, why), hosts_with in by_problem.items()]


class FilterModule:
    def filters(self):
        return {"secret_arguments": secret_arguments}
