# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # The option of every module that talks to the host's Docker Engine (plugins/module_utils/docker_api.py).
    DOCUMENTATION = r"""
options:
  docker_host:
    description:
      - The Docker Engine's API socket, as C(unix://PATH). The module talks to the engine's API directly, so
        the host needs no docker client and no Python library besides the standard one.
      - When the task does not set it, the E(DOCKER_HOST) environment variable is used, and when that is unset
        too, the default.
      - Only unix sockets are supported; the module runs on the host whose engine it asks.
    type: str
    default: unix:///var/run/docker.sock
"""
