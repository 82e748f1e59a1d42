"""The static extractor against vLLM's own parser, per version.

Ground truth: tests/fixtures/vllm/serve_flags/<version>.json, recorded from
the real `vllm serve` parser (see the README there). Source: the same
version's sdist from PyPI, laid out as pip installs it.
"""

import json
import sys
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import settings_to_argv, validate_argv
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSource

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests/fixtures/vllm/serve_flags"
sys.path.insert(0, str(ROOT / "tests/sandbox"))
import vllm_sources  # noqa: E402

VERSIONS = sorted(p.stem for p in FIXTURES.glob("*.json"))


def test_every_era_is_covered():
    assert set(VERSIONS) == set(vllm_sources.TESTED_VERSIONS)


@pytest.fixture(scope="module", params=VERSIONS)
def extracted(request, tmp_path_factory):
    version = request.param
    site = vllm_sources.CACHE / f"site-{version}"
    if not (site / "vllm" / "__init__.py").exists():
        vllm_sources.install_layout(version, site)

    def read(rel):
        try:
            return (site / rel).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    source = VllmSource(read)
    truth = json.loads((FIXTURES / f"{version}.json").read_text())
    return version, source, source.serve_flags(), truth


def test_serve_flags_equal_the_real_parser(extracted):
    version, _, flags, truth = extracted
    assert truth["vllm"] == version
    missing = sorted(set(truth["flags"]) - flags.flags)
    extra = sorted(flags.flags - set(truth["flags"]))
    # No residue is tolerated: the extractor finds what vLLM's parser holds, exactly.
    assert (missing, extra) == ([], [])


def test_deprecated_flags_equal_the_real_parser(extracted):
    _, _, flags, truth = extracted
    assert sorted(flags.deprecated) == truth["deprecated"]


def test_architectures_equal_the_registry(extracted):
    _, source, _, truth = extracted
    assert source.architectures() == truth["architectures"]


def test_abbreviation_setting_matches(extracted):
    _, source, _, truth = extracted
    assert source.parser_features()["allow_abbrev"] == truth["allow_abbrev"]


# Not in the recorded fixtures (argparse does not expose them): what each
# version's FlexibleArgumentParser.parse_args rewrites, read from its code.
ARGV_REWRITES = {
    "0.6.3.post1": {"underscores": True, "dash_o": False, "dotted_keys": False},
    "0.10.2": {"underscores": True, "dash_o": True, "dotted_keys": True},
    "0.16.0": {"underscores": True, "dash_o": True, "dotted_keys": True},
    "0.33.0": {"underscores": True, "dash_o": True, "dotted_keys": True},
}


def test_argv_rewrites_per_era(extracted):
    version, source, _, _ = extracted
    features = source.parser_features()
    assert {key: features[key] for key in ARGV_REWRITES[version]} == ARGV_REWRITES[version]


def _info(source, flags):
    return {"flags": sorted(flags.flags), "negatable_flags": sorted(flags.negatable),
            "store_true_flags": sorted(flags.store_true), "value_boolean_flags": sorted(flags.value_booleans),
            "deprecated_flags": sorted(flags.deprecated), "parser_features": source.parser_features()}


def test_num_scheduler_steps_across_eras(extracted):
    version, source, flags, _ = extracted
    checked = validate_argv(["--num-scheduler-steps", "10"], _info(source, flags))
    if version.startswith("0.6."):
        assert checked["unknown_flags"] == []
    else:
        [unknown] = checked["unknown_flags"]
        assert unknown["flag"] == "--num-scheduler-steps"
        if version != "0.10.2":  # --async-scheduling arrived after 0.10
            assert unknown["suggestions"][0] == "--async-scheduling"
        assert "V0 engine" in unknown["reason"]


def test_rendered_settings_pass_validation(extracted):
    """What the filter renders for common settings is accepted by that version."""
    _, source, flags, _ = extracted
    info = _info(source, flags)
    settings = {"tensor_parallel_size": 2, "max_model_len": 8192, "gpu_memory_utilization": 0.8,
                "enable_prefix_caching": True, "trust_remote_code": False, "served_model_name": "m"}
    argv = settings_to_argv(settings, info)
    assert validate_argv(argv, info)["unknown_flags"] == []
