"""The cluster env file the nccl role writes reads back as the variables it holds."""

from ansible_collections.vllmops.cluster.plugins.filter.env_file_vars import env_file_vars

CLUSTER_ENV = """\
# Ansible managed
# Cluster network of spark-1: enp1s0f0np0
# (10.66.0.11/24, ib).
GLOO_SOCKET_IFNAME=enp1s0f0np0
NCCL_IB_HCA=rocep1s0f0:1
VLLM_HOST_IP=10.66.0.11
"""


def test_cluster_env():
    assert env_file_vars(CLUSTER_ENV) == {
        "GLOO_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_HCA": "rocep1s0f0:1", "VLLM_HOST_IP": "10.66.0.11"}


def test_quotes_comments_and_repeats():
    text = "; comment\nA='x y'\nB=\"z\"\nnot a variable\n  C = 1 \nA=2\nD=\n"
    assert env_file_vars(text) == {"A": "2", "B": "z", "C": "1", "D": ""}


def test_missing_file_reads_empty():
    assert env_file_vars("") == {}
    assert env_file_vars(None) == {}
