"""The model role refuses a model directory the serving containers do not mount with the plan's own sentence, before
it downloads or copies anything (it used to download the whole model, then the plan refused the path)."""

from __future__ import annotations

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.model_outside_dir import FilterModule

OUTSIDE_DIR = FilterModule().filters()["model_outside_dir"]


@pytest.mark.parametrize(("path", "refused"), [
    ("/srv/models/qwen", False),
    ("/srv/models/org/qwen", False),
    ("/srv/models/./qwen", False),
    ("Qwen/Qwen3-0.6B", False),  # a hub ID: vLLM downloads it into its own layer
    ("", False),
    ("/home/me/qwen", True),
    ("/srv/models/../etc", True),
    ("/srv/models-old/qwen", True),  # a sibling sharing the prefix is not under it
])
def test_a_model_outside_the_served_directory_is_refused_naming_both(path, refused):
    said = OUTSIDE_DIR(path, "/srv/models")
    assert bool(said) == refused, said
    if refused:
        assert said == (f"the model path {path} is outside vllm_serve_model_dir /srv/models, which is the only "
                        "directory the containers see: move the model under /srv/models or set vllm_serve_model_dir")
