#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_source
short_description: Serve a model's files once to the first node of a copy chain
version_added: 0.2.0
description:
  - Serves the bytes of O(names) under O(path), one file after the other, in frames of at most 16 MiB, once to
    each token of O(tokens) on O(address):O(port), then exits. A receiver asks for a ticket derived from its token
    (the token never crosses the network) with a random challenge, and reads nothing before this source proved
    that it holds the token (an HMAC-SHA256 of the challenge keyed by the token). The first node of the chain
    (M(vllmops.cluster.model_receive)) writes the files it lacks and relays the stream to the next node.
  - A file whose size differs from O(reference) fails the copy (the source changed since it was read).
  - Never listens on every address (C(0.0.0.0), C(::)).
options:
  path:
    description: The model directory at the source.
    type: path
    required: true
  names:
    description: The files to stream, in the order every receiver was given.
    type: list
    elements: str
    required: true
  reference:
    description: The model's files (name to C(size) and C(sha256)), as every receiver was given.
    type: dict
    required: true
  tokens:
    description: One-time tokens, one per receiver served from here (the last part of the receiver's URL).
    type: list
    elements: str
    required: true
  address:
    description: The one address to listen on (the one the first receiver connects to).
    type: str
    required: true
  port:
    description: TCP port.
    type: int
    default: 29701
  deadline:
    description: Seconds to serve before giving up.
    type: int
    default: 7200
attributes:
  check_mode:
    support: none
    description: Serves nothing in check mode; do not call it then.
  diff_mode:
    support: none
    description: No diff.
  idempotent:
    support: full
    description: Changes nothing on the source.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Serve the model to node2
  vllmops.cluster.model_source:
    path: /srv/models/Qwen3.5-122B-A10B-FP8
    names: "{{ needed }}"
    reference: "{{ head_model.files }}"
    tokens: ["{{ hostvars['node2'].token }}"]
    address: 10.0.0.11
  async: 7260
  poll: 0
"""

RETURN = r"""
served:
  description: Bytes streamed to each receiver, in the order of O(tokens).
  returned: success
  type: list
  elements: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import TransferError, serve
from ansible_collections.vllmops.cluster.plugins.module_utils.model_files import FileStream


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            names=dict(type="list", elements="str", required=True),
            reference=dict(type="dict", required=True),
            tokens=dict(type="list", elements="str", required=True, no_log=True),
            address=dict(type="str", required=True),
            port=dict(type="int", default=29701),
            deadline=dict(type="int", default=7200),
        ),
    )
    params = module.params
    try:
        source = FileStream(params["path"], params["names"],
                            {name: params["reference"][name]["size"] for name in params["names"]})
        sent = serve(source, params["address"], params["port"], params["tokens"], params["deadline"])
    except (KeyError, TransferError) as err:
        module.fail_json(msg=f"serving the model from {params['path']}: {err}")
    served = [sent[token] if isinstance(sent[token], int) else 0 for token in params["tokens"]]
    problems = sorted({sent[token] for token in params["tokens"] if not isinstance(sent[token], int)})
    if problems:
        module.fail_json(msg="serving the model: " + "; ".join(problems), served=served)
    module.exit_json(changed=False, served=served)


if __name__ == "__main__":
    main()
