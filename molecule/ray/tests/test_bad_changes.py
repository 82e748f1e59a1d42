"""Changes that must not take the working endpoint down: a configuration that
hangs at start is rolled back on every node. (A flag the image's vLLM does not
have, refused before anything restarts, is tests/e2e's real vLLM and the
plan role's tests.)"""

from __future__ import annotations

import pytest
from conftest import HEAD


# An out-of-memory start is tested with a new image (test_head_and_image.py), Ray's units rolled back too.
# A start refused for its arguments is tests/e2e's real vLLM (the sandbox gate) and the diagnosis's unit tests.
@pytest.mark.parametrize(("failure", "diagnosis"), [("hang", "hang")])
def test_a_configuration_that_fails_at_start_is_rolled_back(cluster, failure, diagnosis):
    args = cluster.vllm_args()
    run = cluster.deploy("--tags", "vllm_serve", serve_args={"max_num_seqs": 8},
                         extra={"vllm_serve_env": {"VLLMOPS_STANDIN_FAIL": failure}})
    assert run.rc != 0, run
    assert f"new configuration: {diagnosis}" in run.stdout, run
    assert "Rolled back every node to the last working configuration: healthy again." in run.stdout, run
    assert cluster.vllm_args() == args
    assert "VLLMOPS_STANDIN_FAIL" not in cluster.on(HEAD, "cat", "/etc/vllmops/vllm.env")
    assert cluster.healthy()
