"""vllm_source: the package's public face, VllmSource over one installation."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import vllm_source
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSource, VllmSourceError

INSTALLATION = {
    "vllm/__init__.py": "",
    "vllm/scripts.py": (
        "from vllm.utils import FlexibleArgumentParser\n"
        "def main():\n"
        "    parser = FlexibleArgumentParser()\n"
        "    serve = parser.add_subparsers().add_parser('serve')\n"
        "    serve.add_argument('--enable-x', action=argparse.BooleanOptionalAction)\n"
    ),
    "vllm/utils/__init__.py": (
        "class _Negating(Action):\n"
        "    _inverse_prefixes = {'--enable-': '--disable-'}\n"
        "class FlexibleArgumentParser(ArgumentParser):\n"
        "    def __init__(self, **kw):\n"
        "        super().__init__(allow_abbrev=False, **kw)\n"
        "        self.register('action', argparse.BooleanOptionalAction, _Negating)\n"
        "    def parse_args(self, args):\n"
        "        return [a.replace('_', '-') for a in args]\n"
    ),
    "vllm/model_executor/models/registry.py": "_VLLM_MODELS = {'OPTForCausalLM': ('opt', 'OPT')}\n",
}


def test_what_other_modules_import_stays_importable():
    assert {"VllmSource", "VllmSourceError", "ServeFlags"} <= set(vllm_source.__all__)
    assert all(hasattr(vllm_source, name) for name in vllm_source.__all__)


def test_one_installation_end_to_end():
    source = VllmSource(INSTALLATION.get)
    flags = source.serve_flags()
    assert flags.flags == {"-h", "--help", "--enable-x", "--no-enable-x", "--disable-x"}
    assert source.architectures() == ["OPTForCausalLM"]
    assert source.parser_features() == {"underscores": True, "dash_o": False, "dotted_keys": False,
                                        "allow_abbrev": False}
    assert source.inverse_prefixes() == {"--enable-": "--disable-"}
    assert source.exists("vllm.scripts")
    assert source.exists("vllm.utils")
    assert not source.exists("vllm.executor.ray_utils")


def test_an_installation_without_vllm_is_an_error():
    source = VllmSource({}.get)
    with pytest.raises(VllmSourceError):
        source.serve_flags()
    with pytest.raises(VllmSourceError):
        source.architectures()
