#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: image_probe
short_description: Tell what a Docker image holds (vLLM version, flags, architectures) without running it
version_added: 0.1.0
description:
  - Reads a few files out of an image on the target host's Docker Engine, never starting it, never
    importing vLLM and never needing a GPU. With the overlay2 storage driver it reads the layer directories
    directly; otherwise it copies single files out of a created, never started, container (which it removes).
  - Reports the image (ID, tags, CPU architecture compared with the host's, entrypoint, CUDA/NVIDIA
    environment), its Python, its vLLM (version, every option C(vllm serve) accepts, the model
    architectures its registry knows, multi-node modes) and the versions of Ray, torch, transformers and NCCL.
  - Also torch's build (its version and the CUDA it was built for), the CUDA toolkit (the C(CUDA_VERSION) ENV, else
    the toolkit's files) and the NCCL that torch loads (pip's C(nvidia-nccl-cu*), else the system C(libnccl.so.2)
    NGC images ship), and the network settings the image's ENV bakes (RV(image.network_env)).
  - The flags and architectures are derived statically from the image's own vLLM source with Python's C(ast).
  - Finds vLLM where the image's own Python would import it - the site-packages of the interpreters and venvs its
    C(PATH), C(VIRTUAL_ENV) and C(PYTHONPATH) name, .pth files, setuptools' editable installs (PEP 660
    C(__editable__) finders and .pth files, C(setup.py develop) egg-links), and as a last resort a checkout under
    C(/opt), C(/workspace), C(/app) - parsing these files, never running them.
  - Optionally validates C(vllm serve) flags and model architectures against the image, with close-match
    suggestions for unknown flags; also the names given to C(tool_call_parser) and C(reasoning_parser) against the
    parsers the image's vLLM registers, a C(chat_template) given as a path against the image's files, and the
    image's vLLM version against O(min_vllm_version).
  - Refuses (with O(fail_on_invalid)) an image built for another CPU architecture than the host's, for example
    arm64 on an amd64 host or amd64 on an arm64 DGX Spark, whose containers would die with C(exec format error);
    the message names both architectures and what to do. An image that does not say its architecture is not refused.
  - Results are cached on the host by image ID (C(/var/cache/vllmops/image_probe) as root, also in check
    mode); a new image under the same tag has a new ID and is probed afresh.
options:
  image:
    description: Image name:tag, ID or digest, present on the target host's Docker Engine.
    type: str
    required: true
  flags:
    description:
      - "C(vllm serve) arguments to validate: a list of argv strings such as C([--tensor-parallel-size, '2']),
        or a mapping written like group_vars such as C({tensor_parallel_size: 2, enable_prefix_caching: true})."
      - A mapping is turned into argv exactly as the P(vllmops.cluster.vllm_cli_args#filter) filter does.
      - A C(tool_call_parser) or C(reasoning_parser) (any spelling of the key) must be a parser the image's vLLM
        registers, unless C(tool_parser_plugin) (respectively C(reasoning_parser_plugin)) is given too, which may
        register more at startup. Names are not refused when the probe could not read the registered ones
        (RV(vllm.parsers_known)).
      - A C(chat_template) that is a path (no brace or newline in it) must be a file in the image (a relative
        path is taken from the image's working directory), one of vLLM's built-in templates, or a file on this host
        (reported in RV(validation.notes), as the container sees it only through a mount); otherwise the closest
        C(.jinja) file beside it is suggested.
    type: raw
  model_architectures:
    description: Architectures from the model's C(config.json) (its C(architectures) list) to check.
    type: list
    elements: str
  min_vllm_version:
    description:
      - The oldest vLLM version that serves the recipe (its C(vllm.min_version)), such as C(0.11.1) or C(0.11.1rc2).
      - An image whose vLLM is older fails validation. Versions compare as PEP 440 orders them (C(0.11.1rc2) before
        C(0.11.1), C(0.6.3) before C(0.6.3.post1)), a local part such as C(+cpu) aside.
    type: str
  fail_on_invalid:
    description:
      - Fail, with one paragraph naming each problem, when a flag, a parser name, a chat template, a model
        architecture or the vLLM version is not supported, and
        fail when the image is built for another CPU architecture than the host's (also without O(flags)).
      - C(false) only reports (RV(validation), RV(image.architecture_mismatch)) and warns.
    type: bool
    default: true
  use_cache:
    description: Answer from the per-image-ID cache when it has the image.
    type: bool
    default: true
  backend:
    description:
      - How to read the image's files. C(auto) reads overlay2 layer directories when the engine uses overlay2
        and they are readable (root), otherwise a created container.
    type: str
    choices: [auto, overlay2, container]
    default: auto
extends_documentation_fragment:
  - vllmops.cluster.docker_host
  - vllmops.cluster.info_module
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Probe the serving image
  vllmops.cluster.image_probe:
    image: vllm/vllm-openai:v0.17.1
  register: probe

- name: Refuse flags this vLLM does not accept, before anything is stopped
  vllmops.cluster.image_probe:
    image: "{{ vllm_image }}"
    flags:
      tensor_parallel_size: 2
      enable_prefix_caching: true
      max_model_len: 32768
    model_architectures: "{{ (lookup('file', model_dir ~ '/config.json') | from_json).architectures }}"

- name: Refuse a misspelled tool-call parser and an image older than the recipe wants
  vllmops.cluster.image_probe:
    image: "{{ vllm_image }}"
    flags:
      tool_call_parser: qwen3_coder
      enable_auto_tool_choice: true
      reasoning_parser: qwen3
    min_vllm_version: "0.17.0"

- name: Only report (an image of another CPU architecture too)
  vllmops.cluster.image_probe:
    image: "{{ vllm_image }}"
    flags: [--num-scheduler-steps, "10"]
    fail_on_invalid: false
  register: probe
"""

RETURN = r"""
image:
  description: The image as Docker describes it.
  returned: always
  type: dict
  contains:
    id:
      description: Image ID (sha256:...).
      type: str
    repo_tags:
      description: Tags.
      type: list
      elements: str
    repo_digests:
      description: Digests.
      type: list
      elements: str
    architecture:
      description: CPU architecture of the image, for example amd64 or arm64.
      type: str
    os:
      description: Operating system of the image.
      type: str
    variant:
      description: Architecture variant (v8 ...) or null.
      type: str
    size:
      description: Size in bytes.
      type: int
    created:
      description: Creation time.
      type: str
    entrypoint:
      description: Entrypoint.
      type: list
      elements: str
    working_dir:
      description: The working directory the image's containers start in (its C(Config.WorkingDir)), C(/) when unset.
      type: str
    cmd:
      description: Default command.
      type: list
      elements: str
    env:
      description: CUDA_*, NVIDIA_*, NCCL*, VLLM_*, PYTHON*, TORCH*, VIRTUAL_ENV, LD_LIBRARY_PATH and PATH.
      type: dict
    network_env:
      description:
        - The network settings the image's ENV bakes - C(NCCL_*) (not C(NCCL_VERSION), a package version),
          C(GLOO_*), C(UCX_*), C(TP_SOCKET_IFNAME), C(VLLM_HOST_IP) - which compete with the nccl role's cluster
          environment. The plan replaces or removes, per node and with a warning, those the nccl role pins
          (interfaces, RDMA devices, GID index, address); see the nccl role's README.
      type: dict
      sample: {NCCL_SOCKET_IFNAME: eth0, NCCL_IB_HCA: mlx5_0}
    labels:
      description: Image labels.
      type: dict
    host_architecture:
      description:
        - The host's CPU architecture (C(ansible_facts.architecture)) as Docker spells it, C(x86_64) as C(amd64),
          C(aarch64) as C(arm64).
      type: str
    architecture_mismatch:
      description:
        - True when the image cannot run natively on this host (it would fail with exec format error); the module
          fails then unless O(fail_on_invalid=false).
      type: bool
python:
  description: The image's Python, null when it has none.
  returned: always
  type: dict
  contains:
    version:
      description: Version (3.12, or 3.12.7 when the image's environment says).
      type: str
    executables:
      description: python3 executables found.
      type: list
      elements: str
    site_packages:
      description:
        - The site-packages directory of the Python that imports vLLM (where the packages are read from), or the
          first one found. For an editable install it is the venv's, not the checkout.
      type: str
    searched:
      description: Every site-packages directory looked at.
      type: list
      elements: str
    vllm_install:
      description:
        - How C(import vllm) reaches it - C(site-packages) (installed there), C(editable) (setuptools' PEP 660
          C(__editable__) finder or .pth, or C(setup.py develop)'s egg-link), C(pth) (another .pth line),
          C(pythonpath) (the image's C(PYTHONPATH)) or C(checkout) (a source tree under C(/opt), C(/workspace),
          C(/app) or C(/vllm-workspace) that nothing points at; said in RV(notes)). Null without vLLM.
      type: str
      sample: editable
    vllm_install_via:
      description: The file (.pth, editable finder, egg-link) or C(PYTHONPATH) that points at vLLM, else null.
      type: str
      sample: /opt/vllm-env/lib/python3.11/site-packages/__editable___vllm_0_16_0_finder.py
vllm:
  description: The image's vLLM, null when it has none.
  returned: always
  type: dict
  contains:
    version:
      description:
        - vLLM version, from its install's dist-info (an editable install's too, C(0.16.0+precompiled)) or
          egg-info, else the source's C(vllm/_version.py).
      type: str
    path:
      description: Directory of the vllm package, the checkout's for an editable install (C(/opt/vllm/vllm)).
      type: str
    entrypoint:
      description:
        - How the image starts vLLM. C(vllm serve), C(api_server) (C(python -m vllm.entrypoints.openai.api_server),
          which takes the same options plus C(--model)) or C(other).
      type: str
    flags:
      description: Sorted list of every option string C(vllm serve) accepts (long, short, and generated negations).
      type: list
      elements: str
    negatable_flags:
      description: Flags that have a generated C(--no-...) form.
      type: list
      elements: str
    store_true_flags:
      description: Flags that take no value and are false by default.
      type: list
      elements: str
    value_boolean_flags:
      description: Flags that take C(true) or C(false) as a value.
      type: list
      elements: str
    deprecated_flags:
      description: Flags the version marks deprecated (accepted, with a warning).
      type: list
      elements: str
    parser_features:
      description: What the parser rewrites, C(underscores), C(dash_o) (C(-O3)), C(dotted_keys) (C(--x.y=z)), and C(allow_abbrev).
      type: dict
    architectures:
      description: Sorted model architecture names the model registry knows.
      type: list
      elements: str
    tool_parsers:
      description: Sorted names C(--tool-call-parser) accepts (what vLLM's C(ToolParserManager) registers).
      type: list
      elements: str
      sample: [hermes, llama3_json, mistral, qwen3_coder]
    reasoning_parsers:
      description: Sorted names C(--reasoning-parser) accepts; empty for a vLLM without reasoning parsers.
      type: list
      elements: str
      sample: [deepseek_r1, qwen3]
    parsers_known:
      description:
        - C(tool) and C(reasoning), each false when the probe could not read that kind's registrations from the
          source (its list is then empty and names are not refused).
      type: dict
      sample: {tool: true, reasoning: true}
    multinode:
      description: Multi-node modes, C(ray) (Ray executor), C(native) (C(--nnodes), C(--node-rank), C(--master-addr), C(--headless)), C(data_parallel).
      type: dict
    multinode_modes:
      description: The names of the supported multi-node modes.
      type: list
      elements: str
packages:
  description:
    - Versions of ray, torch, transformers, nvidia-nccl, triton, flashinfer and grpcio (Ray Client's dependency); null
      when absent.
  returned: always
  type: dict
torch:
  description: The image's torch build, from its dist-info and C(torch/version.py); null without torch.
  returned: always
  type: dict
  contains:
    version:
      description: Version, for example C(2.9.0+cu128).
      type: str
    cuda:
      description: The CUDA torch was built for (C(12.8)); null for a CPU build.
      type: str
    git_version:
      description: The torch commit it was built from.
      type: str
    path:
      description: Directory of the torch package.
      type: str
cuda:
  description: The image's CUDA toolkit; null when nothing says.
  returned: always
  type: dict
  contains:
    version:
      description: Version, for example C(12.8.1).
      type: str
    source:
      description:
        - Where it was read - C(env CUDA_VERSION), C(/usr/local/cuda/version.json) (CUDA 11.1 and later),
          C(/usr/local/cuda/version.txt), a C(/usr/local/cuda-X.Y) directory or a C(libcudart.so.X.Y.Z) name (the
          last two only when the image's files can be listed, O(backend=overlay2)).
      type: str
nccl:
  description:
    - The NCCL the image's torch and vLLM load - pip's C(nvidia-nccl-cu*) when installed (torch loads it before
      the system's), else the system library (C(libnccl.so.2) under C(/usr/lib/<arch>-linux-gnu), as NGC and
      nvidia/cuda images ship it); null when the image has neither.
  returned: always
  type: dict
  contains:
    version:
      description: NCCL version, for example C(2.21.5); what the nccl role's C(nccl_image_nccl_version) wants.
      type: str
    source:
      description: C(pip) or C(system).
      type: str
    path:
      description: The library's path in the image.
      type: str
    found_by:
      description:
        - How the version was found - C(nvidia-nccl package), C(file name) (C(libnccl.so.2) ->
          C(libnccl.so.2.21.5)), C(dpkg libnccl2), C(image ENV NCCL_VERSION) or C(library version string) (the
          library read whole, only when nothing cheaper says).
      type: str
    system:
      description: The system library (C(version), C(path), C(found_by)) also when pip's is the one loaded; or null.
      type: dict
validation:
  description: The result of checking O(flags), O(model_architectures) and O(min_vllm_version).
  returned: when flags, model_architectures or min_vllm_version are given
  type: dict
  contains:
    ok:
      description: True when nothing is reported in RV(validation.messages).
      type: bool
    argv:
      description: The argv that was checked (a mapping rendered as the filter renders it).
      type: list
      elements: str
    unknown_flags:
      description: Each unknown flag as C(flag), C(suggestions) (closest accepted flags) and C(reason).
      type: list
      elements: dict
    deprecated_flags:
      description: Given flags the version marks deprecated.
      type: list
      elements: str
    unsupported_architectures:
      description: Given architectures the registry does not know.
      type: list
      elements: str
    unknown_parsers:
      description:
        - Each parser name the image's vLLM does not register, as C(option) (C(tool_call_parser) or
          C(reasoning_parser)), C(name) and C(suggestions) (the closest registered names).
      type: list
      elements: dict
      sample: [{option: tool_call_parser, name: qwen3_codr, suggestions: [qwen3_coder]}]
    vllm_too_old:
      description: True when the image's vLLM is older than O(min_vllm_version).
      type: bool
    chat_template:
      description:
        - The check of a C(chat_template) path, null when none was given - C(value), C(path) (where it was looked
          for), C(found), C(where) (C(image), C(vllm builtin) or C(host)) and C(suggestions) (C(.jinja) files beside
          it, when the directory can be listed cheaply, O(backend=overlay2)).
      type: dict
    messages:
      description: One paragraph per problem.
      type: list
      elements: str
    notes:
      description: What was not checked and why (a parser plugin given, a version that cannot be compared).
      type: list
      elements: str
cached:
  description: True when the answer came from the per-image-ID cache.
  returned: always
  type: bool
backend:
  description: How the files were read, C(overlay2) (layer directories) or C(container) (a created container).
  returned: always
  type: str
notes:
  description: What was not found, and where it was looked for.
  returned: always
  type: list
  elements: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.chat_template import template_path
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.probe import ProbeError, probe_image
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.summary import architecture_refusal
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.validation import validate
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import CliArgsError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            flags=dict(type="raw"),
            model_architectures=dict(type="list", elements="str"),
            min_vllm_version=dict(type="str"),
            fail_on_invalid=dict(type="bool", default=True),
            use_cache=dict(type="bool", default=True),
            backend=dict(type="str", default="auto", choices=["auto", "overlay2", "container"]),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        docker = DockerClient(params["docker_host"])
        result = probe_image(docker, params["image"], use_cache=params["use_cache"], backend=params["backend"],
                             chat_template=template_path(params["flags"]))
        if params["flags"] is not None or params["model_architectures"] or params["min_vllm_version"]:
            result["validation"] = validate(result, params["flags"], params["model_architectures"],
                                            params["min_vllm_version"])
    except (ProbeError, CliArgsError, DockerError) as err:
        module.fail_json(msg=f"probing image {params['image']}: {err}")
    except Exception as err:  # an image laid out in a way the probe did not expect
        module.fail_json(msg=f"probing image {params['image']}: unexpected {type(err).__name__}: {err}",
                         exception=traceback.format_exc())
    refusal = architecture_refusal(params["image"], result["image"])
    if refusal and params["fail_on_invalid"]:
        module.fail_json(msg=refusal, image=result["image"])  # the image's facts, not its hundreds of flags
    if refusal:
        module.warn(refusal)
    validation = result.get("validation")
    if validation:
        for flag in validation["deprecated_flags"]:
            module.warn(f"{flag} is deprecated in vLLM {result['vllm']['version']}")
        if not validation["ok"] and params["fail_on_invalid"]:
            module.fail_json(msg=" ".join(validation["messages"]), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
