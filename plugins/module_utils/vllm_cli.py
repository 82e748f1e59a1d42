# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`vllm serve` arguments: settings -> argv, and argv checked against the
flags one vLLM version really accepts (as image_probe extracted them).

One normalization serves both, so an argv that passes validation is exactly
what a unit will run.
"""

from __future__ import annotations

import difflib
import json
import re

_NEGATIVE_NUMBER = re.compile(r"^-\d")

# Flags vLLM removed, with what replaced them: offered only when the
# replacement exists in the version at hand.
_SUCCESSORS = {
    "--num-scheduler-steps": ("--async-scheduling",
                              "multi-step scheduling was removed with the V0 engine; "
                              "the V1 engine overlaps scheduling with --async-scheduling"),
    "--disable-log-requests": ("--enable-log-requests", "request logging is now off unless enabled"),
    "--use-v2-block-manager": (None, "the v2 block manager became the only one; drop the flag"),
}


class CliArgsError(ValueError):
    """Settings that cannot be turned into vLLM arguments."""


def flag_name(key: str) -> str:
    """`tensor_parallel_size` -> `--tensor-parallel-size`; `-tp` stays."""
    key = str(key)
    return key if key.startswith("-") else "--" + key.replace("_", "-")


def _render_value(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def settings_to_argv(settings, flags_info: dict | None = None) -> list[str]:
    """Structured settings -> argv.

    `settings` is a mapping written like group_vars (`{tensor_parallel_size: 2,
    enable_prefix_caching: true}`) or already a list of argv strings. With
    `flags_info` (image_probe's `vllm` result) booleans are spelled the way
    that version spells them.
    """
    if settings is None:
        return []
    if isinstance(settings, (list, tuple)):
        return [str(item) for item in settings]
    if not isinstance(settings, dict):
        raise CliArgsError(f"vLLM settings must be a mapping or a list of arguments, got {type(settings).__name__}")
    info = flags_info or {}
    negatable = set(info.get("negatable_flags") or [])
    store_true = set(info.get("store_true_flags") or [])
    value_booleans = set(info.get("value_boolean_flags") or [])
    argv: list[str] = []
    for key, value in settings.items():
        name = flag_name(key)
        if value is None:
            continue
        if isinstance(value, bool):
            if name in value_booleans:
                argv += [name, _render_value(value)]
            elif value:
                argv.append(name)
            elif not info or name in negatable:
                argv.append("--no-" + name[2:])
            elif name in store_true:
                continue  # false is the default of a store_true flag
            else:
                raise CliArgsError(f"{key}: false cannot be expressed, this vLLM has no --no-{name[2:]}; "
                                   "leave the setting out")
        elif isinstance(value, (list, tuple)):
            argv += [name, *[_render_value(v) for v in value]]
        else:
            argv += [name, _render_value(value)]
    return argv


def _option_tokens(argv: list[str]) -> list[str]:
    tokens = []
    for token in argv:
        if token == "--":
            break
        if token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token):
            tokens.append(token)
    return tokens


def _normalize(key: str, features: dict) -> str:
    if not key.startswith("--") or not features.get("underscores"):
        return key
    if features.get("dotted_keys") and "." in key:
        head, _dot, rest = key.partition(".")
        return head.replace("_", "-") + "." + rest
    return key.replace("_", "-")


def _suggest(flag: str, long_flags: list[str], known: set[str]) -> list[str]:
    suggestions = []
    successor = _SUCCESSORS.get(flag)
    if successor and successor[0] in known:
        suggestions.append(successor[0])
    for match in difflib.get_close_matches(flag, long_flags, n=3, cutoff=0.6):
        if match not in suggestions:
            suggestions.append(match)
    return suggestions


def check_flag(token: str, info: dict) -> dict:
    """One option token -> {flag, status, resolved, suggestions, reason}."""
    known = set(info.get("flags") or [])
    features = info.get("parser_features") or {}
    result = {"flag": token, "status": "ok", "resolved": None, "suggestions": [], "reason": ""}
    # -O3, -O=3 and -O 3: rewritten by parsers that know -O (the value is checked by vLLM).
    if (token.startswith("-O") and features.get("dash_o")
            and ("-O" in known or "--optimization-level" in known)):
        result["resolved"] = "-O" if "-O" in known else "--optimization-level"
        return result
    name = _normalize(token.split("=", 1)[0], features)
    if features.get("dotted_keys") and name.startswith("--") and "." in name:
        base = name.split(".", 1)[0]
        if base in known:
            result["resolved"] = base
            return result
    if name in known:
        result["resolved"] = name
        return result
    long_flags = sorted(f for f in known if f.startswith("--"))
    if name.startswith("--") and features.get("allow_abbrev", True) and "=" not in name[2:]:
        matches = [f for f in long_flags if f.startswith(name)]
        if len(matches) == 1:
            result["resolved"] = matches[0]
            result["reason"] = f"abbreviation of {matches[0]}"
            return result
        if len(matches) > 1:
            result.update(status="unknown", suggestions=matches[:5],
                          reason=f"ambiguous abbreviation: could be {', '.join(matches[:5])}")
            return result
    successor = _SUCCESSORS.get(name)
    result.update(status="unknown", suggestions=_suggest(name, long_flags, known),
                  reason=successor[1] if successor else "not a `vllm serve` option in this version")
    return result


def validate_argv(argv: list[str], info: dict) -> dict:
    """Check every option in argv; return unknown and deprecated ones."""
    deprecated = set(info.get("deprecated_flags") or [])
    unknown, used_deprecated, resolved = [], [], []
    for token in _option_tokens(argv):
        checked = check_flag(token, info)
        if checked["status"] != "ok":
            unknown.append({"flag": token, "suggestions": checked["suggestions"], "reason": checked["reason"]})
            continue
        resolved.append(checked["resolved"])
        if checked["resolved"] in deprecated:
            used_deprecated.append(token)
    return {"unknown_flags": unknown, "deprecated_flags": used_deprecated, "resolved_flags": resolved}


def describe_unknown(unknown: list[dict], version: str) -> str:
    """One paragraph for an operator."""
    parts = []
    for item in unknown:
        text = f"{item['flag']} ({item['reason']}"
        if item["suggestions"]:
            text += "; did you mean " + " or ".join(item["suggestions"]) + "?"
        parts.append(text + ")")
    noun = "option" if len(unknown) == 1 else "options"
    return (f"vLLM {version} in this image does not accept the {noun} " + "; ".join(parts) +
            ". Nothing was started or stopped: fix the flags (vllm_serve settings) or use an image "
            "whose vLLM accepts them.")
