# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # Attributes of the collection's read-only modules (*_probe, *_facts).
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
  idempotent:
    support: full
    description: Never changes the host.
"""
