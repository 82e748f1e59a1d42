# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # The option of every module that runs the docker client on the host.
    DOCUMENTATION = r"""
options:
  docker_cli:
    description: The docker client to run.
    type: str
    default: docker
"""
