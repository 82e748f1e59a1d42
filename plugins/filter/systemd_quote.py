# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_quote
short_description: Quote one argument for a systemd unit's ExecStart= line
version_added: 0.1.0
description:
  - Returns the argument so that systemd passes it through unchanged, as one word.
  - C(%) becomes C(%%) and C($) becomes C($$) (systemd would expand specifiers and variables); an argument
    with whitespace, quotes, backslashes or C(;) is put in double quotes with C(\\) and C(") escaped.
positional: _input
options:
  _input:
    description: The argument.
    type: str
    required: true
"""

EXAMPLES = r"""
exec_start: "vllm serve {{ argv | map('vllmops.cluster.systemd_quote') | join(' ') }}"
"""

RETURN = r"""
_value:
  description: The quoted argument.
  type: str
"""

import re

_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./$-]+$")


def systemd_quote(value):
    text = str(value).replace("%", "%%").replace("$", "$$")
    if text and _PLAIN.match(text) and text != ";":
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class FilterModule:
    def filters(self):
        return {"systemd_quote": systemd_quote}
