"""vllm_source.interpreter: the serve flags found by walking the code that
builds the parser, in the shapes vLLM's eras use (small stand-ins here; the
real versions are in test_vllm_source.py)."""

from textwrap import dedent

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.field_types import TypeModel
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import SourceIndex, VllmSourceError
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.interpreter import serve_flags

HELP = {"-h", "--help"}

# The serve subcommand of newer versions: a class with subparser_init, the
# parser built by a function in another module.
SERVE_SUBCOMMAND = """
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    class ServeSubcommand(CLISubcommand):
        name = "serve"

        def subparser_init(self, subparsers):
            serve_parser = subparsers.add_parser(self.name, help="serve")
            serve_parser.add_argument("model_tag", nargs="?")
            return make_arg_parser(serve_parser)
"""


def flags_of(cli_args: str, inverse_prefixes: dict | None = None, **modules: str):
    files = {"vllm/entrypoints/cli/serve.py": dedent(SERVE_SUBCOMMAND),
             "vllm/entrypoints/openai/cli_args.py": dedent(cli_args),
             **{f"vllm/{name.replace('__', '/')}.py": dedent(text) for name, text in modules.items()}}
    index = SourceIndex(files.get)
    return serve_flags(index, TypeModel(index), inverse_prefixes or {})


def test_explicit_arguments_and_their_actions():
    flags = flags_of("""
        import argparse
        from vllm.engine.arg_utils import StoreBoolean

        def make_arg_parser(parser):
            parser.add_argument("--host", type=str)
            parser.add_argument("--port", "-p", type=int)
            parser.add_argument("--disable-log-requests", action="store_true", deprecated=True)
            parser.add_argument("--enable-auto-tool-choice", action=argparse.BooleanOptionalAction)
            parser.add_argument("--use-v2", action=StoreBoolean)
            parser.add_argument("positional")
            return parser
    """, engine__arg_utils="class StoreBoolean(argparse.Action): ...")
    assert flags.flags == HELP | {"--host", "--port", "-p", "--disable-log-requests", "--enable-auto-tool-choice",
                                  "--no-enable-auto-tool-choice", "--use-v2"}
    assert flags.store_true == {"--disable-log-requests"}
    assert flags.deprecated == {"--disable-log-requests"}
    assert flags.negatable == {"--enable-auto-tool-choice"}
    assert flags.value_booleans == {"--use-v2"}


def test_groups_and_add_cli_args_of_engine_args():
    flags = flags_of("""
        from vllm.engine.arg_utils import AsyncEngineArgs

        def make_arg_parser(parser):
            group = parser.add_argument_group("frontend")
            group.add_argument("--api-key")
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
    """, engine__arg_utils="""
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                exclusive = parser.add_mutually_exclusive_group()
                exclusive.add_argument("--tensor-parallel-size", "-tp", type=int)
                return parser

        class AsyncEngineArgs(EngineArgs):
            @staticmethod
            def add_cli_args(parser):
                parser = EngineArgs.add_cli_args(parser)
                parser.add_argument("--disable-log-requests", action="store_true")
                return parser
    """)
    assert flags.flags == HELP | {"--api-key", "--tensor-parallel-size", "-tp", "--disable-log-requests"}


def test_flags_generated_from_a_config_dataclass():
    flags = flags_of("""
        from vllm.engine.arg_utils import EngineArgs

        def make_arg_parser(parser):
            return EngineArgs.add_cli_args(parser)
    """, inverse_prefixes={"--enable-": "--disable-"}, engine__arg_utils="""
        from dataclasses import dataclass
        from vllm.config import ModelConfig, CacheConfig

        def get_kwargs(cls):
            ...

        @dataclass
        class EngineArgs:
            @classmethod
            def add_cli_args(cls, parser):
                model_kwargs = get_kwargs(ModelConfig)
                model_group = parser.add_argument_group(title="ModelConfig")
                model_group.add_argument("--model", **model_kwargs["model"])
                model_group.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
                model_kwargs["trust_remote_code"]["action"] = "store_true"
                model_group.add_argument("--trust-remote-code", **model_kwargs["trust_remote_code"])
                model_group.add_argument("--old-knob", **model_kwargs["old_knob"], deprecated=True)

                cache_kwargs = get_kwargs(CacheConfig)
                del cache_kwargs["internal"]
                for name, kwargs in cache_kwargs.items():
                    parser.add_argument(f"--{name.replace('_', '-')}", **kwargs)
                return parser
    """, config="""
        from dataclasses import dataclass

        @dataclass
        class ModelConfig:
            model: str = "m"
            enforce_eager: bool = False
            trust_remote_code: bool = False
            old_knob: int | None = None

        @dataclass
        class CacheConfig:
            block_size: int = 16
            enable_prefix_caching: bool | None = None
            internal: bool = False
    """)
    assert flags.flags == HELP | {
        "--model", "--enforce-eager", "--no-enforce-eager", "--trust-remote-code", "--old-knob",
        "--block-size", "--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-prefix-caching"}
    assert flags.negatable == {"--enforce-eager", "--enable-prefix-caching"}
    assert flags.store_true == {"--trust-remote-code"}
    assert flags.deprecated == {"--old-knob"}


def test_constant_conditions_take_one_branch_others_both():
    flags = flags_of("""
        import os
        ENABLED = True

        def make_arg_parser(parser):
            if ENABLED:
                parser.add_argument("--on")
            else:
                parser.add_argument("--off")
            if not True:
                parser.add_argument("--never")
            if os.environ.get("X"):
                parser.add_argument("--maybe")
            else:
                parser.add_argument("--or-else")
            return parser
    """)
    assert flags.flags == HELP | {"--on", "--maybe", "--or-else"}


def test_other_subcommands_flags_are_not_serves():
    index = SourceIndex({"vllm/scripts.py": dedent("""
        from vllm.utils import FlexibleArgumentParser

        def main():
            parser = FlexibleArgumentParser(description="vLLM CLI")
            parser.add_argument("--version")
            subparsers = parser.add_subparsers(required=True)
            serve_parser = subparsers.add_parser("serve")
            serve_parser.add_argument("--model")
            chat_parser = subparsers.add_parser("chat")
            chat_parser.add_argument("--url")
            chat_parser.add_argument_group("g").add_argument("--api-key")
    """)}.get)
    assert serve_flags(index, TypeModel(index), {}).flags == HELP | {"--model"}


def test_recursion_in_the_parser_code_stops():
    flags = flags_of("""
        def make_arg_parser(parser):
            parser.add_argument("--once")
            return make_arg_parser(parser)
    """)
    assert flags.flags == HELP | {"--once"}


def test_neither_serve_module_nor_scripts_is_an_error():
    index = SourceIndex({"vllm/__init__.py": ""}.get)
    with pytest.raises(VllmSourceError, match="cannot tell which flags"):
        serve_flags(index, TypeModel(index), {})
