"""A node that cannot be reached stops deploy.yml at preflight: nothing changes
anywhere, not even on the nodes that can be reached."""

from __future__ import annotations

from ray_cluster import HEAD, WORKER


def test_an_unreachable_node_fails_preflight_and_nothing_changes(cluster):
    before = cluster.state()[HEAD]
    # Existing sessions (Ansible's multiplexed SSH connections) end too: "sshd: user..." up to OpenSSH 9.7,
    # "sshd-session: user..." from 9.8 (Debian 13).
    cluster.on(WORKER, "sh", "-c", "systemctl stop ssh.service ssh.socket; pkill -f '^sshd(-session)?: ' || true")
    try:
        run = cluster.deploy(serve_args={"max_model_len": 2048})
    finally:
        cluster.on(WORKER, "systemctl", "start", "ssh.service")
    assert run.rc != 0 and f"Not reachable: {WORKER}" in run.stdout, run
    assert run.changed(HEAD) == 0, run
    assert cluster.state()[HEAD] == before
