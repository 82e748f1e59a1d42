#!/usr/bin/env bash
# Run vllmops.cluster.gpu_probe against this machine, a real NVIDIA host
# (for example a lent GPU machine), and print its result.
#
#   scripts/gpu-probe-localhost.sh [IMAGE]
#
# Needs the venv (`make venv`, or any Python with ansible-core 2.19) and, for
# the passthrough check, Docker and an image present locally (IMAGE; without
# one only the host, the toolkit and Docker are checked). Exits non-zero with
# the diagnosis when no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
ansible=.venv/bin/ansible
[ -x "$ansible" ] || ansible=ansible
args='{"require_gpus": 1'
if [ $# -ge 1 ]; then args+=", \"image\": \"$1\""; fi
args+='}'
ANSIBLE_CONFIG=ansible.cfg "$ansible" localhost -m vllmops.cluster.gpu_probe -a "$args"
