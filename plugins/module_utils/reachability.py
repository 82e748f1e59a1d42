# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A short-lived listener that proves the workers reach the head, port by port.

Before Ray or vLLM listen, the head binds each cluster port and accepts (and
closes at once) the workers' test connections; it returns as soon as every
port was reached the expected number of times, so the ports are free again
for the service that starts next. A port already in use (our own Ray on a
re-run) answers for itself. Binding a busy port is retried only for a moment
at the start (a listener of a moment ago releasing it), never later: a port
freed later belongs to the service that freed it - Ray restarting must find
its GCS port free, not held by this listener.
"""

from __future__ import annotations

import select
import socket
import time


def listen_until_reached(address, ports, connections, timeout_s, poll_s=0.2, bind_grace_s=2.0):
    """Listen on address:port for each port until each port it bound has accepted `connections`
    connections or timeout_s passed. Returns {"accepted": {port: n}, "never_bound": [port...],
    "complete": bool}; a port never bound was busy for the first bind_grace_s seconds (something else
    answers on it) and is not waited for."""
    started = time.monotonic()
    deadline = started + timeout_s
    pending = set(ports)
    bound = {}
    accepted = {port: 0 for port in ports}
    try:
        while True:
            for port in sorted(pending) if time.monotonic() < started + bind_grace_s else []:
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((address, port))
                    sock.listen(16)
                except OSError:
                    sock.close()
                    continue
                bound[sock] = port
                pending.discard(port)
            if bound:
                ready = select.select(list(bound), [], [], poll_s)[0]
            else:
                ready = []
                time.sleep(poll_s)
            for sock in ready:
                conn, _peer = sock.accept()
                conn.close()
                accepted[bound[sock]] += 1
            binding = bool(pending) and time.monotonic() < started + bind_grace_s
            complete = not binding and all(accepted[port] >= connections for port in bound.values())
            if connections == 0 or complete or time.monotonic() >= deadline:
                return {"accepted": accepted, "never_bound": sorted(pending), "complete": complete or connections == 0}
    finally:
        for sock in bound:
            sock.close()
