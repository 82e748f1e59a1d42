# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`vllm serve` flags, parser names, the chat template, model architectures and the oldest vLLM a recipe
needs, checked against a probe result."""

from __future__ import annotations

import difflib
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.chat_template import flag_value
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import (
    describe_unknown,
    settings_to_argv,
    validate_argv,
)

# option -> (the probe's list of names, the option that loads more at runtime, what the names are)
PARSER_OPTIONS = {
    "tool_call_parser": ("tool", "tool_parser_plugin", "tool-call parser"),
    "reasoning_parser": ("reasoning", "reasoning_parser_plugin", "reasoning parser"),
}
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
                      r"(?:[-_.]?(post|rev|r)[-_.]?(\d*))?(?:[-_.]?(dev)[-_.]?(\d*))?(?:\+[a-z0-9.]*)?", re.I)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def version_key(version) -> tuple | None:
    """A sort key for a PEP 440 version (`0.11.1rc2`, `0.10.2+cpu`, `0.6.3.post1`, `0.12.0.dev3`); None when it is
    not one. Release, then dev < pre-release < final < post-release; the local part (+cpu) does not count."""
    match = _VERSION.fullmatch(str(version or "").strip())
    if not match:
        return None
    release, pre, pre_n, post, post_n, dev, dev_n = match.groups()
    numbers = [int(n) for n in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    # 1.0.dev1 < 1.0a1 < 1.0rc1 < 1.0 < 1.0.post1
    pre_key = (0, _PRE_RANK[pre.lower()], int(pre_n or 0)) if pre else (-1,) if dev and not post else (1,)
    post_key = (int(post_n or 0),) if post else (-1,)
    dev_key = (0, int(dev_n or 0)) if dev else (1,)
    return tuple(numbers), pre_key, post_key, dev_key


def check_parsers(flags, vllm: dict) -> tuple[list[dict], list[str], list[str]]:
    """(unknown parser names, messages, notes) for the parsers `flags` name."""
    unknown, messages, notes = [], [], []
    known_flags = set(vllm.get("flags") or [])
    for option, (kind, plugin_option, what) in PARSER_OPTIONS.items():
        name = flag_value(flags, option)
        if not isinstance(name, str) or not name or "--" + option.replace("_", "-") not in known_flags:
            continue  # unset, or an option this vLLM lacks (an unknown flag already)
        names = vllm.get(f"{kind}_parsers")
        if not (vllm.get("parsers_known") or {}).get(kind) or names is None or name in names:
            continue  # a probe that could not read them refuses nothing
        if flag_value(flags, plugin_option):
            notes.append(f"{option} {name!r} is not a {what} vLLM {vllm['version']} registers, but "
                         f"{plugin_option} may register it at startup: not checked")
            continue
        suggestions = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        unknown.append({"option": option, "name": name, "suggestions": suggestions})
        hint = f"; did you mean {suggestions[0]!r}?" if suggestions else ""
        messages.append(f"{option} {name!r} is not a {what} vLLM {vllm['version']} in this image "
                        f"registers{hint} (it has: {', '.join(names) or 'none'})")
    return unknown, messages, notes


def check_min_version(vllm: dict, min_version) -> tuple[bool, list[str], list[str]]:
    """(too old, messages, notes) for the oldest vLLM version a recipe needs."""
    have, want = version_key(vllm.get("version")), version_key(min_version)
    if want is None:
        return False, [f"min_vllm_version {min_version!r} is not a version (such as 0.11.1 or 0.11.1rc2)"], []
    if have is None:
        return False, [], [f"vLLM's version {vllm.get('version')!r} cannot be compared with {min_version}: not checked"]
    if have < want:
        return True, [f"vLLM {vllm['version']} in this image is older than {min_version}, the oldest that serves "
                      "this recipe (vllm.min_version); use an image with a newer vLLM"], []
    return False, [], []


def describe_template(template: dict, working_dir: str | None) -> str:
    relative = "" if template["value"].startswith("/") else f" (relative to the image's working directory {working_dir})"
    hint = f"; did you mean {template['suggestions'][0]}?" if template["suggestions"] else ""
    return (f"chat_template {template['value']}{relative} is not a file in the image, nor one of vLLM's built-in "
            f"templates, nor on this host{hint}")


def validate(result: dict, flags=None, model_architectures=None, min_vllm_version=None) -> dict:
    """Check flags (argv list or group_vars-style mapping), model architectures and the oldest vLLM wanted against
    a probe result (with its `chat_template` check when probe_image made one)."""
    vllm = result.get("vllm")
    validation = {"ok": True, "argv": [], "unknown_flags": [], "deprecated_flags": [], "unknown_parsers": [],
                  "unsupported_architectures": [], "vllm_too_old": False, "chat_template": None,
                  "messages": [], "notes": []}
    if vllm is None:
        validation["ok"] = False
        validation["messages"].append(
            f"image {result['image']['id'][:19]} has no vLLM ({'; '.join(result.get('notes') or [])}): "
            "nothing to validate against")
        return validation
    if min_vllm_version:
        too_old, messages, notes = check_min_version(vllm, min_vllm_version)
        validation["vllm_too_old"] = too_old
        validation["messages"] += messages
        validation["notes"] += notes
    if flags is not None:
        argv = settings_to_argv(flags, vllm)
        checked = validate_argv(argv, vllm)
        validation.update(argv=argv, unknown_flags=checked["unknown_flags"],
                          deprecated_flags=checked["deprecated_flags"])
        if checked["unknown_flags"]:
            validation["messages"].append(describe_unknown(checked["unknown_flags"], vllm["version"]))
        unknown, messages, notes = check_parsers(flags, vllm)
        validation["unknown_parsers"] = unknown
        validation["messages"] += messages
        validation["notes"] += notes
    template = result.get("chat_template")
    if template is not None:
        validation["chat_template"] = template
        if not template["found"]:
            validation["messages"].append(describe_template(template, (result.get("image") or {}).get("working_dir")))
        elif template["where"] == "host":
            validation["notes"].append(f"chat_template {template['value']} is on this host, not in the image: the "
                                       "container sees it only through a mount of its directory")
    if model_architectures:
        known = set(vllm["architectures"])
        missing = [a for a in model_architectures if a not in known]
        validation["unsupported_architectures"] = missing
        if missing:
            validation["messages"].append(
                f"vLLM {vllm['version']} in this image does not register the model architecture(s) "
                f"{', '.join(missing)} (from the model's config.json); use an image whose vLLM supports them")
    validation["ok"] = not validation["messages"]
    return validation
