# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM installation supports, read statically from its source with
``ast``: never imported, never run, no GPU needed.

* ``serve_flags``: every option string ``vllm serve`` accepts (interpreter).
* ``architectures``: the keys of the model registry's ``_VLLM_MODELS`` (registry).
* ``tool_parsers``, ``reasoning_parsers``: the names ``--tool-call-parser``
  and ``--reasoning-parser`` accept (parsers).
* ``parser_features``: what the version's FlexibleArgumentParser rewrites
  (underscores, ``-O3``, dotted JSON keys) and whether it allows
  abbreviations (flexible_parser).

The parts underneath: ``index`` parses modules and resolves names and
classes, ``field_types`` models config-dataclass fields and the flags
generated from them.

Files are read through a ``read_text(relative_path)`` callable, relative to
the site-packages directory that holds ``vllm/``; it returns ``None`` for a
file that does not exist.
"""

from __future__ import annotations

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import flexible_parser, parsers, registry
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.field_types import TypeModel
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import SourceIndex, VllmSourceError
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.interpreter import ServeFlags, serve_flags

__all__ = ["ServeFlags", "VllmSource", "VllmSourceError"]


class VllmSource:
    """Static view of one vLLM installation."""

    def __init__(self, read_text) -> None:
        self.index = SourceIndex(read_text)
        self.types = TypeModel(self.index)

    def exists(self, module: str) -> bool:
        """Whether the installation has this module (``vllm.executor.ray_utils``)."""
        return self.index.exists(module)

    def serve_flags(self) -> ServeFlags:
        return serve_flags(self.index, self.types, flexible_parser.inverse_prefixes(self.index))

    def architectures(self) -> list[str]:
        return registry.architectures(self.index)

    def tool_parsers(self) -> list[str]:
        return parsers.tool_parsers(self.index)

    def reasoning_parsers(self) -> list[str]:
        return parsers.reasoning_parsers(self.index)

    def parser_features(self) -> dict:
        return flexible_parser.parser_features(self.index)

    def inverse_prefixes(self) -> dict:
        return flexible_parser.inverse_prefixes(self.index)
