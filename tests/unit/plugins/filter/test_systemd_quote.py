"""Arguments survive systemd's ExecStart= parsing as one word each."""

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.systemd_quote import systemd_quote


@pytest.mark.parametrize(("arg", "quoted"), [
    ("--tensor-parallel-size", "--tensor-parallel-size"),
    ("/srv/models/qwen3", "/srv/models/qwen3"),
    ("0.85", "0.85"),
    ('{"level":3}', '"{\\"level\\":3}"'),
    ("a b", '"a b"'),
    ("100%", "100%%"),
    ("$HOME", "$$HOME"),
    ("back\\slash", '"back\\\\slash"'),
    (";", '";"'),
    ("", '""'),
])
def test_quote(arg, quoted):
    assert systemd_quote(arg) == quoted


def test_numbers_become_text():
    assert systemd_quote(8000) == "8000"
