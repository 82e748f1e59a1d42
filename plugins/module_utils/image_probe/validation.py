# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`vllm serve` flags and model architectures checked against a probe result."""

from __future__ import annotations

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import (
    describe_unknown,
    settings_to_argv,
    validate_argv,
)


def validate(result: dict, flags=None, model_architectures=None) -> dict:
    """Check flags (argv list or group_vars-style mapping) and model architectures against a probe result."""
    vllm = result.get("vllm")
    validation = {"ok": True, "argv": [], "unknown_flags": [], "deprecated_flags": [],
                  "unsupported_architectures": [], "messages": []}
    if vllm is None:
        validation["ok"] = False
        validation["messages"].append(
            f"image {result['image']['id'][:19]} has no vLLM ({'; '.join(result.get('notes') or [])}): "
            "nothing to validate against")
        return validation
    if flags is not None:
        argv = settings_to_argv(flags, vllm)
        checked = validate_argv(argv, vllm)
        validation.update(argv=argv, unknown_flags=checked["unknown_flags"],
                          deprecated_flags=checked["deprecated_flags"])
        if checked["unknown_flags"]:
            validation["messages"].append(describe_unknown(checked["unknown_flags"], vllm["version"]))
    if model_architectures:
        known = set(vllm["architectures"])
        missing = [a for a in model_architectures if a not in known]
        validation["unsupported_architectures"] = missing
        if missing:
            validation["messages"].append(
                f"vLLM {vllm['version']} in this image does not register the model architecture(s) "
                f"{', '.join(missing)} (from the model's config.json); use an image whose vLLM supports them")
    validation["ok"] = not validation["unknown_flags"] and not validation["unsupported_architectures"]
    return validation
