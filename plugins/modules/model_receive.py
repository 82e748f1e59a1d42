#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_receive
short_description: Receive a model's files from model_source (or the previous node), relaying them to the next node
version_added: 0.2.0
description:
  - Compares the version O(path) serves with O(reference) (every file's size and sha256). The files this node lacks
    or holds differently are read from O(url), the stream of O(names) served by M(vllmops.cluster.model_source) or by
    the previous node's relay, each checked against its sha256 as it arrives.
  - Never writes into the version that is served, nor changes which one O(path) serves. The new version is built
    beside it (in C(PARENT/.vllmops-staging/NAME), with hard links to the files the served version already holds
    right), checked whole, and then kept as a version of its own, C(PARENT/.vllmops-versions/NAME/HEX) (HEX the first
    16 hex digits of its digest), its manifest beside it; the release switch serves it. Only where nothing was at
    O(path) yet does O(path) become a link to it. A copy that fails removes its staging directory; one interrupted
    (the process killed) leaves only that directory, which the next run discards.
  - The token (the last part of O(url)) never leaves this node. It asks for a ticket derived from the token with a
    random challenge, and writes and relays nothing before the upstream proved that it holds the token (an
    HMAC-SHA256 of the challenge keyed by the token); a program that took the port first is refused. A frame of the
    stream holds at most 16 MiB; a bigger one fails the copy.
  - With O(relay_token), serves the whole stream, as it arrives, to the next node of the chain (one request on
    O(relay_address):O(relay_port)), holding at most 64 MiB in memory.
  - Writes its progress (bytes, seconds, MB/s, bytes relayed) as JSON to O(progress_file) about once a second.
options:
  path:
    description: The model directory on this node (the link to the version served).
    type: path
    required: true
  reference:
    description: The files the node must end up with (name to C(size) and C(sha256)).
    type: dict
    required: true
  source:
    description: Where the model came from, recorded in the manifest.
    type: dict
    default: {}
  names:
    description: The files the stream carries, in its order (those some node of the chain lacks).
    type: list
    elements: str
    required: true
  url:
    description: Where this node's copy is served (C(http://ADDRESS:PORT/TOKEN)); the TOKEN itself is never sent.
    type: str
    required: true
  upstream:
    description: Who serves O(url), for messages.
    type: str
    default: the model source
  relay_token:
    description: The next node's one-time token; empty for the last node of a chain.
    type: str
    default: ""
  relay_to:
    description: The next node's name, for messages.
    type: str
    default: the next node
  relay_address:
    description: The one address the relay listens on (this node's cluster address). Required with O(relay_token).
    type: str
  relay_port:
    description: TCP port the relay listens on.
    type: int
    default: 29701
  progress_file:
    description: Where to write progress; empty for none.
    type: str
    default: /run/vllmops/model-receive.json
  connect_deadline:
    description: Seconds to keep trying to reach the upstream.
    type: int
    default: 60
  idle_timeout:
    description: Seconds the upstream may send nothing, or the next node read nothing, before that hop is broken.
    type: int
    default: 120
  deadline:
    description: Seconds the whole copy, relay included, may take.
    type: int
    default: 7200
attributes:
  check_mode:
    support: full
    description: Reports the files it would copy, copies nothing.
  diff_mode:
    support: none
    description: No diff.
  idempotent:
    support: full
    description: Copies nothing when the node holds the reference.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Receive the model from node1, relaying it to node3
  vllmops.cluster.model_receive:
    path: /srv/models/Qwen3.5-122B-A10B-FP8
    reference: "{{ head_model.files }}"
    names: "{{ stream }}"
    url: "http://10.0.0.11:29701/{{ token }}"
    upstream: node1
    relay_token: "{{ hostvars['node3'].token }}"
    relay_to: node3
    relay_address: 10.0.0.12
  no_log: true
"""

RETURN = r"""
copied:
  description: Files written on this node.
  returned: success
  type: list
  elements: str
bytes:
  description: Bytes written on this node.
  returned: success
  type: int
received_bytes:
  description: Bytes read from the upstream (the whole stream, also what was only relayed).
  returned: success
  type: int
relayed_bytes:
  description: Bytes the next node read from this node's relay.
  returned: success
  type: int
seconds:
  description: Seconds the copy took.
  returned: success
  type: float
digest:
  description: The digest of RV(version), the model this node holds now.
  returned: success
  type: str
version:
  description:
    - The directory of that version - the new one when files were copied, else the one O(path) serves (empty when
      there is none).
  returned: success
  type: str
discarded_staging:
  description: Whether an interrupted earlier copy was discarded.
  returned: success
  type: bool
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils import model_files
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import (
    Relay,
    TransferError,
    receive_stream,
    receiver_argument_spec,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            reference=dict(type="dict", required=True),
            source=dict(type="dict", default={}),
            names=dict(type="list", elements="str", required=True),
            **receiver_argument_spec(29701, 7200, "/run/vllmops/model-receive.json", "the model source"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path, reference, names = params["path"].rstrip("/"), params["reference"], params["names"]
    relay_wanted = bool(params["relay_token"])
    if relay_wanted and not params["relay_address"]:
        module.fail_json(msg="relaying the model: no relay_address: give this node's address the next node connects to")
    copy = None
    try:
        base = model_files.served_version(path) or path  # the new version links the files it keeps from there
        kept = model_files.read_manifest(base)
        have = model_files.identity(model_files.scan(base, kept["files"] if kept else {}, "stat")[0])
        wanted = model_files.needed(have, reference)
        extra = sorted(set(have) - set(reference))
        result = dict(changed=bool(wanted or extra), copied=wanted, bytes=0, received_bytes=0, relayed_bytes=0,
                      seconds=0.0, digest=model_files.digest(have) if have else "",
                      version=base if os.path.isdir(base) else "", discarded_staging=False)
        unreachable = sorted(set(wanted) - set(names))
        if unreachable:
            module.fail_json(msg=f"{path} lacks {', '.join(unreachable[:5])}, which the stream does not carry: the node "
                                 "changed since it was read; re-run", **result)
        # A node in the middle of a chain receives even when it lacks nothing: the next node waits for its relay.
        if module.check_mode or (not result["changed"] and not relay_wanted):
            module.exit_json(**result)
        copy = model_files.StagedCopy(path, reference, names, wanted)
        copy.prepare(have)
        result["discarded_staging"] = copy.discarded
        progress = params["progress_file"] or None
        if progress:
            os.makedirs(os.path.dirname(progress), exist_ok=True)
        relay = None
        if relay_wanted:
            relay = Relay(params["relay_to"], params["relay_address"], params["relay_port"], params["relay_token"],
                          params["deadline"], params["idle_timeout"])
        try:
            received, seconds, written = receive_stream(
                copy.write, "writing the model", params["url"], params["connect_deadline"], progress,
                sum(reference[name]["size"] for name in names), params["upstream"], relay, params["idle_timeout"])
        finally:
            relay_failed = relay.wait(params["deadline"]) if relay else None
        if result["changed"]:
            manifest = copy.commit(params["source"])
            result.update(digest=manifest["digest"], version=manifest["path"])
        else:
            shutil.rmtree(copy.staging, ignore_errors=True)
    except (OSError, TransferError) as err:
        if copy:
            copy.discard()
        module.fail_json(msg=f"copying the model to {path} from {params['upstream']}: {err}. The model served here "
                             "was not touched; a re-run starts the copy again.")
    result.update(bytes=written, received_bytes=received, relayed_bytes=relay.sent if relay else 0,
                  seconds=round(seconds, 2))
    if relay_failed:
        module.fail_json(msg=f"the model was copied here, but relaying it to {params['relay_to']} failed: {relay_failed}",
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
