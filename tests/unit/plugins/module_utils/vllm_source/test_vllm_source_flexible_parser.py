"""vllm_source.flexible_parser: what a version's FlexibleArgumentParser does
to argv, read from its class."""

from textwrap import indent

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.flexible_parser import (
    inverse_prefixes,
    parser_features,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import SourceIndex

DEFAULTS = {"underscores": False, "dash_o": False, "dotted_keys": False, "allow_abbrev": True}


def parser_module(body: str, home: str = "vllm/utils/argparse_utils.py") -> SourceIndex:
    text = "class FlexibleArgumentParser(ArgumentParser):\n" + indent(body, "    ")
    return SourceIndex({home: text}.get)


@pytest.mark.parametrize(("body", "changed"), [
    ("pass", {}),
    ("def parse_args(self, args):\n    key = key.replace('_', '-')", {"underscores": True}),
    ("def parse_args(self, args):\n    key = key.replace('-', '_')", {}),
    ("def parse_args(self, args):\n    key = key.replace('_', '-', 1)", {}),
    ("def parse_args(self, args):\n    if arg.startswith('-O'):\n        pass", {"dash_o": True}),
    ("def parse_args(self, args):\n    if arg.startswith('-O3'):\n        pass", {}),
    ("def parse_args(self, args):\n    if '.' in arg:\n        pass", {"dotted_keys": True}),
    ("def parse_args(self, args):\n    if arg.startswith('-') and '.' in arg:\n        pass", {"dotted_keys": True}),
    ("def parse_args(self, args):\n    if '.' not in arg:\n        pass", {}),
    # Text about the rewrite is not the rewrite.
    ('"""Splits on \'.\' in keys and does .replace(\'_\', \'-\')."""', {}),
    ("def __init__(self, **kw):\n    super().__init__(allow_abbrev=False, **kw)", {"allow_abbrev": False}),
    ("def __init__(self, **kw):\n    kw['allow_abbrev'] = False", {"allow_abbrev": False}),
    ("def __init__(self, **kw):\n    self.allow_abbrev = False", {"allow_abbrev": False}),
])
def test_parser_features(body, changed):
    assert parser_features(parser_module(body)) == DEFAULTS | changed


def test_older_versions_keep_the_parser_in_vllm_utils():
    index = parser_module("def f(self):\n    key.replace('_', '-')", home="vllm/utils/__init__.py")
    assert parser_features(index)["underscores"] is True


def test_no_flexible_parser_means_plain_argparse():
    assert parser_features(SourceIndex({"vllm/utils/__init__.py": "class Other: ..."}.get)) == DEFAULTS
    assert inverse_prefixes(SourceIndex({}.get)) == {}


REPLACEMENT = """
import argparse

class _Negating(argparse.Action):
    _inverse_prefixes = {"--enable-": "--disable-", "--disable-": "--enable-"}

class FlexibleArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", argparse.BooleanOptionalAction, _Negating)
"""


def test_inverse_prefixes_of_the_registered_replacement():
    index = SourceIndex({"vllm/utils/argparse_utils.py": REPLACEMENT}.get)
    assert inverse_prefixes(index) == {"--enable-": "--disable-", "--disable-": "--enable-"}


def test_no_registered_replacement_means_no_inverse_prefixes():
    index = SourceIndex({"vllm/utils/argparse_utils.py": REPLACEMENT.replace("self.register", "print")}.get)
    assert inverse_prefixes(index) == {}
