"""One owner of "where a local client reaches vLLM": the readiness and rollback checks, the head watchdog's health URL
and the API proxy's upstream. They disagreed before (:: gave 127.0.0.1 in one and ::1 in another; an IPv6 address went
into a URL without brackets)."""

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.local_address import local_address

CASES = [
    ("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"), (None, "127.0.0.1"), ("localhost", "127.0.0.1"),
    ("127.0.0.1", "127.0.0.1"), ("::", "[::1]"), ("[::]", "[::1]"), ("::1", "[::1]"), ("[::1]", "[::1]"),
    ("fd00:88::2", "[fd00:88::2]"), ("10.87.0.2", "10.87.0.2"), (" 10.87.0.2 ", "10.87.0.2"),
]


@pytest.mark.parametrize(("bound", "reached"), CASES, ids=[repr(c[0]) for c in CASES])
def test_a_local_client_reaches_the_server_on_the_loopback_of_its_family_written_for_a_url(bound, reached):
    assert local_address(bound) == reached
