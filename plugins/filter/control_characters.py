# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: control_characters
short_description: The settings whose text holds a control character, before it is written into a unit or environment file
version_added: 0.1.0
description:
  - A line break in a value written into a systemd unit or a C(docker --env-file) file splits its line - the rest
    becomes a directive or a variable of its own; other control characters (below U+0020, and U+007F) corrupt it.
    This filter finds them and returns one sentence per setting, naming the setting and the character, never the
    value (it may be a secret, such as C(vllm_serve_env) values or the API key).
  - Mappings are searched key by key (a key is named as written, with its control characters escaped) and lists item
    by item, to any depth. Numbers, booleans and null hold no text.
positional: _input
options:
  _input:
    description: Setting name to its value (text, a number, a mapping or a list).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse control characters in what goes into the unit and environment files
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' ') }}"
  vars:
    problems: "{{ {'vllm_serve_args': vllm_serve_args, 'vllm_serve_env': vllm_serve_env} | vllmops.cluster.control_characters }}"
    # ["vllm_serve_env.HF_TOKEN holds a control character (U+000A, a line feed), ..."]
"""

RETURN = r"""
_value:
  description: One sentence per setting that holds a control character; empty when none does.
  type: list
  elements: str
"""

from collections.abc import Mapping

_NAMES = {0x00: "a NUL", 0x09: "a tab", 0x0A: "a line feed", 0x0D: "a carriage return", 0x1B: "an escape",
          0x7F: "a delete"}


def _first_control(text: str) -> str | None:
    return next((char for char in text if ord(char) < 0x20 or ord(char) == 0x7F), None)


def _described(char: str) -> str:
    code = ord(char)
    return f"U+{code:04X}" + (f", {_NAMES[code]}" if code in _NAMES else "")


def _sentence(where: str, char: str) -> str:
    return (f"{where} holds a control character ({_described(char)}), which would split or corrupt the line it is "
            "written on in the unit or environment file: remove it.")


def _found(where: str, value) -> list[str]:
    if value is None or isinstance(value, (bool, int, float)):
        return []
    if isinstance(value, Mapping):
        problems = []
        for key, item in value.items():
            key_text = str(key)
            char = _first_control(key_text)
            if char is not None:
                problems.append(_sentence(f"the key {key_text!r} of {where}", char))
                continue
            problems += _found(f"{where}.{key_text}", item)
        return problems
    if isinstance(value, (list, tuple)):
        return [problem for index, item in enumerate(value) for problem in _found(f"{where}[{index}]", item)]
    char = _first_control(str(value))  # str() also reads a vaulted value
    return [] if char is None else [_sentence(where, char)]


def control_characters(settings) -> list[str]:
    return [problem for name, value in (settings or {}).items() for problem in _found(str(name), value)]


class FilterModule:
    def filters(self):
        return {"control_characters": control_characters}
