import socket
import threading
import time

from ansible_collections.vllmops.cluster.plugins.module_utils.reachability import listen_until_reached


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def connect_later(port, times, delay=0.3):
    def run():
        time.sleep(delay)
        for _ in range(times):
            for _attempt in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_returns_as_soon_as_every_port_was_reached_by_every_worker():
    ports = [free_port(), free_port()]
    workers = [connect_later(port, 2) for port in ports]
    started = time.monotonic()
    result = listen_until_reached("127.0.0.1", ports, connections=2, timeout_s=20)
    assert result["complete"] and result["never_bound"] == []
    assert result["accepted"] == {ports[0]: 2, ports[1]: 2}
    assert time.monotonic() - started < 10  # did not wait for the timeout
    for worker in workers:
        worker.join()


def test_ports_are_free_again_when_it_returns():
    port = free_port()
    connect_later(port, 1)
    listen_until_reached("127.0.0.1", [port], connections=1, timeout_s=20)
    with socket.socket() as sock:
        # As the services that take the port over bind it (Ray, uvicorn: SO_REUSEADDR, which a connection closed
        # moments ago in TIME_WAIT does not block); still EADDRINUSE while the listener holds the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(1)


def test_a_port_nobody_reaches_is_reported_incomplete_at_the_timeout():
    reached, silent = free_port(), free_port()
    connect_later(reached, 1)
    result = listen_until_reached("127.0.0.1", [reached, silent], connections=1, timeout_s=1.5)
    assert not result["complete"]
    assert result["accepted"] == {reached: 1, silent: 0}


def test_a_port_freed_at_once_is_taken_over():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]

    def free_then_connect():
        time.sleep(0.5)  # a listener of a moment ago letting go
        busy.close()
        connect_later(port, 1, delay=0.5)

    threading.Thread(target=free_then_connect, daemon=True).start()
    result = listen_until_reached("127.0.0.1", [port], connections=1, timeout_s=20, bind_grace_s=2)
    assert result == {"accepted": {port: 1}, "never_bound": [], "complete": True}


def test_a_busy_port_answers_for_itself_and_is_never_taken_later():
    """Ray running on a re-run holds its ports; when it restarts after the check began, its new GCS must find
    the port free (a listener that took it over made Ray's GCS fail with 'Address already in use')."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port, free = busy.getsockname()[1], free_port()
    connect_later(free, 1, delay=1.5)
    threading.Timer(0.8, busy.close).start()  # Ray restarting: its port is free for a moment
    started = time.monotonic()
    result = listen_until_reached("127.0.0.1", [port, free], connections=1, timeout_s=20, bind_grace_s=0.5)
    assert result == {"accepted": {port: 0, free: 1}, "never_bound": [port], "complete": True}
    assert time.monotonic() - started < 10  # the busy port was not waited for
    with socket.socket() as ray:
        ray.bind(("127.0.0.1", port))  # free for Ray again


def test_no_workers_means_nothing_to_wait_for():
    port = free_port()
    started = time.monotonic()
    result = listen_until_reached("127.0.0.1", [port], connections=0, timeout_s=30)
    assert result["complete"] and time.monotonic() - started < 5
