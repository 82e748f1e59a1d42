"""The serving containers' memory limit, from a host's /proc/meminfo."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.filter.container_memory import container_memory

GIB = 1024


def meminfo(total_kib: int) -> str:
    return f"MemTotal:       {total_kib} kB\nMemFree:        1024 kB\nMemAvailable:   2048 kB\n"


# A DGX Spark's MemTotal (GB10, 128 GB of unified memory, ~119.7 GiB seen by Linux), the sandbox's VM, a large server.
SPARK, SANDBOX, SERVER = meminfo(125_514_096), meminfo(24 * GIB * GIB), meminfo(512 * GIB * GIB)


@pytest.mark.parametrize(("text", "limit", "percent", "minimum", "mib"), [
    (SPARK, "auto", 10, "4g", 122572 - 12257),       # 10 % of 122572 MiB is more than 4 GiB
    (SANDBOX, "auto", 10, "4g", 24 * GIB - 4 * GIB),  # 10 % is 2.4 GiB: the 4 GiB floor holds
    (SERVER, "auto", 10, "4g", 512 * GIB - 52428),
    (SERVER, "auto", 0, "16g", 512 * GIB - 16 * GIB),
    (SPARK, "AUTO", 10, "4G", 122572 - 12257),
    (SPARK, "96g", 10, "4g", 96 * GIB),
    (SPARK, "98304m", 10, "4g", 96 * GIB),
    (SPARK, "none", 10, "4g", 0),
    (SPARK, "", 10, "4g", 0),
    (SPARK, None, 10, "4g", 0),
])
def test_limit(text, limit, percent, minimum, mib):
    assert container_memory(text, limit, percent, minimum) == mib


def test_defaults_are_auto_with_a_tenth_and_at_least_4_gib():
    assert container_memory(SANDBOX) == 20 * GIB


@pytest.mark.parametrize(("text", "limit", "percent", "minimum", "message"), [
    ("MemFree: 1 kB\n", "auto", 10, "4g", "no MemTotal"),
    (SPARK, "lots", 10, "4g", "is no size"),
    (SPARK, "200g", 10, "4g", "not between 1 MiB and the host's memory"),
    (SPARK, "100", 10, "4g", "not between 1 MiB"),       # bytes, as Docker reads a bare number
    (SPARK, "auto", 100, "4g", "not a percentage below 100"),
    (SPARK, "auto", 10, "lots", "host_memory_container_reserve_min"),
    (meminfo(3 * GIB * GIB), "auto", 10, "4g", "leaves nothing"),
])
def test_refusals_say_which_setting_to_change(text, limit, percent, minimum, message):
    with pytest.raises(AnsibleFilterError, match=message):
        container_memory(text, limit, percent, minimum)
