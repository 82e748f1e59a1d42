# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Docker image holds, read from its files, one concern per module:

* ``probe``: the probe itself (inspect through docker_api, open the files, cache, assemble the answer).
* ``summary``: the image as the engine describes it (architecture, entrypoint, environment).
* ``site``: where the image's Python keeps its packages, and which Python it is.
* ``imports``: where ``import vllm`` lands (site-packages, .pth, editable installs, PYTHONPATH, checkouts).
* ``packages``: versions of the packages that matter for serving (and torch's build, from torch/version.py).
* ``native``: what lies outside pip: the system NCCL (libnccl.so.2) and the CUDA toolkit's version.
* ``vllm_facts``: the image's vLLM (flags, architectures, multi-node modes), through vllm_source.
* ``cache``: results kept on the host by image ID.
* ``validation``: flags and model architectures checked against a probe result.
"""
