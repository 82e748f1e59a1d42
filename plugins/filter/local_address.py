# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: local_address
short_description: The address a client on the same host uses to reach a server bound to an address, as a URL writes it
version_added: 0.1.0
description:
  - A server bound to every address is reached on the loopback of that family - C(0.0.0.0) (or empty) on
    C(127.0.0.1), C(::) on C([::1]) (a server bound to C(::) answers on C(::1) whether or not it also takes IPv4);
    C(localhost) is C(127.0.0.1), as vLLM's default and the API proxy's upstream have it.
  - Any other address is returned as given, an IPv6 one in brackets, ready for C(http://HOST:PORT) and nginx's
    C(server HOST:PORT).
  - The one place this is derived. The readiness and rollback checks, the head watchdog's health URL and the API
    proxy's upstream all use it.
positional: _input
options:
  _input:
    description: The address the server is bound to (C(vllm_serve_host)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: vLLM's own health URL on this node
  ansible.builtin.set_fact:
    health_url: "http://{{ vllm_serve_host | vllmops.cluster.local_address }}:{{ vllm_serve_port }}/health"
    # 0.0.0.0 -> http://127.0.0.1:8001/health; :: -> http://[::1]:8001/health
"""

RETURN = r"""
_value:
  description: The address, IPv6 in brackets.
  type: str
"""

IPV4_LOOPBACK = ("", "0.0.0.0", "localhost", "127.0.0.1")


def local_address(host) -> str:
    text = str(host if host is not None else "").strip()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if bare in IPV4_LOOPBACK:
        return "127.0.0.1"
    if bare == "::":
        return "[::1]"
    return f"[{bare}]" if ":" in bare else bare


class FilterModule:
    def filters(self):
        return {"local_address": local_address}
