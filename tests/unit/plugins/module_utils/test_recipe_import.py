"""Recipes of sparkrun and spark-vllm-docker turned into ours (schema 1), on sample files in their formats
(tests/fixtures/recipes_foreign) and on small documents written here."""

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.vllmops.cluster.plugins.module_utils.recipe_import import RecipeImportError, detect, to_recipe
from ansible_collections.vllmops.cluster.plugins.module_utils.recipes import from_document, problems

FOREIGN = Path(__file__).resolve().parents[3] / "fixtures" / "recipes_foreign"


def sample(name):
    return yaml.safe_load((FOREIGN / name).read_text())


def dropped(recipe):
    """The flags the notes say were dropped."""
    found = re.search(r"Dropped, as the collection sets them itself: (.*?)\.(?: \d+ import warning|$)", recipe["notes"])
    return found.group(1).split("; ") if found else []


def svd(command, **fields):
    """A spark-vllm-docker recipe around a command."""
    return {"recipe_version": "1", "name": "Test", "container": "ghcr.io/example/vllm-node:1", "model": "org/model",
            "defaults": {"port": 8000, "host": "0.0.0.0", "tensor_parallel": 1}, "command": command, **fields}


def sparkrun(command=None, **fields):
    doc = {"recipe_version": "2", "model": "org/model", "runtime": "vllm", "container": "ghcr.io/x/vllm:1",
           "defaults": {"port": 8000, "host": "0.0.0.0"}, **fields}
    if command is not None:
        doc["command"] = command
    return doc


# -- each sample converts to the recipe expected ----------------------------------------------------------------------

def test_a_sparkrun_cluster_recipe():
    doc = sample("sparkrun-cluster.yaml")
    assert detect(doc) == "sparkrun"
    assert to_recipe(doc, "example-moe-120b-fp8") == {
        "schema": 1,
        "name": "example-moe-120b-fp8",
        "description": "Example MoE 120B in FP8 on two DGX Sparks",
        "model": {"repo": "example-org/Example-MoE-120B-FP8", "revision": "main", "dir": "Example-MoE-120B-FP8",
                  "served_name": "example-moe"},
        "image": "ghcr.io/example/dgx-spark-vllm:2026.06",
        "args": {"gpu_memory_utilization": 0.8, "max_model_len": 131072, "trust_remote_code": True,
                 "enable_auto_tool_choice": True, "tool_call_parser": "qwen3_coder", "reasoning_parser": "qwen3",
                 "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}, "load_format": "fastsafetensors"},
        "env": {"VLLM_MARLIN_USE_ATOMIC_ADD": "1", "NCCL_DEBUG": "WARN"},
        "layouts": {"gb10x2": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}},
        "notes": "Imported from a sparkrun recipe (recipe_version 2). Dropped, as the collection sets them itself: "
                 "--served-model-name example-moe; --host 0.0.0.0; --port 8000; -tp 2; -pp 1; --distributed-executor-backend ray. "
                 "3 import warning(s) under import_warnings.",
        "import_warnings": [
            "mod 'mods/fix-example-chat-template' is not applied: sparkrun copies it into the container and runs it before "
            "vllm serve, which the collection does not do; use an image that already has its fix",
            "sparkrun pre_exec step not carried over: pip install example-plugin==1.2",
            "--distributed-executor-backend ray dropped: the collection chooses the backend (vllmops_backend)",
        ],
    }


def test_a_sparkrun_recipe_without_a_command_takes_the_defaults_sparkrun_would_pass():
    doc = sample("sparkrun-solo-no-command.yaml")
    assert detect(doc) == "sparkrun"
    recipe = to_recipe(doc, "dense-8b")
    assert recipe["model"] == {"repo": "example-org/Example-Dense-8B", "revision": "0123abcd", "dir": "Example-Dense-8B",
                               "served_name": "example-org/Example-Dense-8B"}
    assert recipe["vllm"] == {"min_version": "0.17.1"}
    # enable_prefix_caching: false is a toggle left off, as sparkrun does; reasoning_parser feeds templates only
    assert recipe["args"] == {"gpu_memory_utilization": 0.5, "max_model_len": 32768, "max_num_seqs": 64, "enforce_eager": True}
    assert recipe["layouts"] == {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}
    assert dropped(recipe) == ["--port 8000", "--host 0.0.0.0", "--tensor-parallel-size 1"]
    assert recipe["import_warnings"] == ["defaults sparkrun passes to vLLM only through a command template, and this recipe "
                                         "has none, so they were not imported: reasoning_parser"]


def test_a_spark_vllm_docker_solo_recipe():
    doc = sample("spark-vllm-docker-solo.yaml")
    assert detect(doc) == "spark-vllm-docker"
    assert to_recipe(doc, "example-nano-nvfp4") == {
        "schema": 1,
        "name": "example-nano-nvfp4",
        "description": "vLLM serving Example-Nano-NVFP4 on a single node",
        "model": {"repo": "example-org/Example-Nano-30B-NVFP4", "revision": "main", "dir": "Example-Nano-30B-NVFP4",
                  "served_name": "example-org/Example-Nano-30B-NVFP4"},
        "image": "vllm-node-tf5",
        "args": {"max_model_len": 262144, "trust_remote_code": True, "kv_cache_dtype": "fp8", "enable_prefix_caching": True,
                 "compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE", "custom_ops": ["all"]},
                 "default_chat_template_kwargs": {"thinking": True}, "gpu_memory_utilization": 0.7},
        "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "TORCH_CUDA_ARCH_LIST": "12.1a"},
        "layouts": {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}},
        "notes": "Imported from a spark-vllm-docker recipe (recipe_version 1) named 'Example-Nano-NVFP4'. Dropped, as the "
                 "collection sets them itself: --port 8000; --host 0.0.0.0; -tp 1. 2 import warning(s) under import_warnings.",
        "import_warnings": [
            "mod 'mods/fix-example-nano' is not applied: spark-vllm-docker copies it into the container and runs it before "
            "vllm serve, which the collection does not do; use an image that already has its fix",
            "image 'vllm-node-tf5' is built by spark-vllm-docker's build-and-copy.sh with --tf5; build it there (or use an "
            "equivalent image) and name it in vllm_image",
        ],
    }


def test_a_spark_vllm_docker_cluster_recipe():
    doc = sample("spark-vllm-docker-cluster.yaml")
    assert detect(doc) == "spark-vllm-docker"
    recipe = to_recipe(doc, "example-large-awq")
    assert recipe["model"]["served_name"] == "example-large"
    assert recipe["args"] == {"gpu_memory_utilization": 0.75, "max_model_len": 128000, "max_num_batched_tokens": 4096,
                              "compilation_config": {"cudagraph_mode": "PIECEWISE"}, "swap_space": 0,
                              "load_format": "fastsafetensors", "enable_auto_tool_choice": True, "tool_call_parser": "minimax_m2"}
    assert recipe["env"] == {}  # `env:` with only a comment in it
    assert recipe["layouts"] == {"gb10x2": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}}
    assert dropped(recipe) == ["--served-model-name example-large", "--tensor-parallel-size 2", "--distributed-executor-backend ray",
                                 "--host 0.0.0.0", "--port 8000"]
    assert "vllm" not in recipe  # a local image tag says nothing of the vLLM version
    assert recipe["import_warnings"][0] == "image 'vllm-node' is a local tag of spark-vllm-docker's build-and-copy.sh, not a registry image"


@pytest.mark.parametrize("name", sorted(p.name for p in FOREIGN.glob("*.yaml")))
def test_every_sample_imports_into_a_recipe_the_loader_accepts(name):
    recipe = to_recipe(sample(name), "imported")
    assert problems(recipe) == []
    assert from_document(sample(name), "imported") == recipe


# -- detection --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("doc", "expected"), [
    ({"schema": 1, "name": "x", "model": {"repo": "a/b"}}, "vllmops"),
    ({"model": "a/b", "container": "img", "runtime": "vllm"}, "sparkrun"),
    ({"model": "a/b", "container": "img"}, "sparkrun"),  # sparkrun's minimal recipe: no command
    ({"model": "a/b", "container": "img", "min_nodes": 2, "command": "vllm serve a/b"}, "sparkrun"),
    ({"recipe_version": "2", "model": "a/b", "container": "img", "command": "vllm serve a/b"}, "sparkrun"),
    ({"recipe_version": "1", "name": "X", "container": "vllm-node", "command": "vllm serve a/b"}, "spark-vllm-docker"),
    ({"name": "X", "container": "vllm-node", "command": "vllm serve a/b"}, "spark-vllm-docker"),  # before recipe_version
    ({"model": "a/b", "container": "vllm-node", "build_args": ["--tf5"], "command": "vllm serve a/b"}, "spark-vllm-docker"),
], ids=["ours", "sparkrun-runtime", "sparkrun-minimal", "sparkrun-min-nodes", "sparkrun-v2", "svd-v1", "svd-unversioned",
        "svd-build-args"])
def test_detect(doc, expected):
    assert detect(doc) == expected


def test_an_unknown_document_is_refused_saying_what_was_looked_for():
    with pytest.raises(RecipeImportError) as refused:
        detect({"image": "vllm/vllm-openai", "args": {"port": 1}})
    message = str(refused.value)
    assert "not a recipe this collection can read" in message
    assert "`schema: 1`" in message and "sparkrun" in message and "spark-vllm-docker" in message
    assert "This document's top-level keys: args, image" in message
    with pytest.raises(RecipeImportError, match="not a recipe this collection can read"):
        to_recipe({"hello": "world"}, "x")


def test_a_document_that_is_not_a_mapping_or_of_another_schema_is_refused():
    with pytest.raises(RecipeImportError, match="a recipe is a YAML mapping, this is list"):
        detect([1, 2])
    with pytest.raises(RecipeImportError, match="schema: 2 is not a recipe schema"):
        detect({"schema": 2})
    assert issubclass(RecipeImportError, ValueError)


def test_one_of_ours_is_returned_as_a_copy():
    ours = {"schema": 1, "model": {"repo": "a/b"}, "args": {"max_model_len": 1}}
    recipe = to_recipe(ours, "mine")
    assert recipe == {**ours, "name": "mine"}
    recipe["args"]["max_model_len"] = 2
    assert ours["args"]["max_model_len"] == 1


# -- placeholders -----------------------------------------------------------------------------------------------------

def test_placeholders_are_filled_from_the_defaults_and_doubled_braces_are_literal():
    recipe = to_recipe(svd("vllm serve org/model --max-model-len {max_model_len} --kv-transfer-config '{{\"kv_role\":\"{role}\"}}'",
                           defaults={"max_model_len": 4096, "role": "kv_both"}), "x")
    assert recipe["args"] == {"max_model_len": 4096, "kv_transfer_config": {"kv_role": "kv_both"}}


def test_sparkrun_offers_the_model_and_resolves_nested_references():
    recipe = to_recipe(sparkrun("vllm serve {model} --otlp-traces-endpoint {endpoint}",
                                defaults={"port": 4317, "endpoint": "http://collector:{port}"}), "x")
    assert recipe["model"]["repo"] == "org/model"
    assert recipe["args"] == {"otlp_traces_endpoint": "http://collector:4317"}


def test_a_placeholder_spark_vllm_docker_cannot_fill_is_refused():
    with pytest.raises(RecipeImportError, match=r"the command uses \{max_num_seqs\}, which the recipe's defaults do not set"):
        to_recipe(svd("vllm serve org/model --max-num-seqs {max_num_seqs}"), "x")


def test_a_placeholder_sparkrun_leaves_unfilled_drops_its_flag_with_a_warning():
    recipe = to_recipe(sparkrun("vllm serve {model} --chat-template {template} --max-num-seqs 8"), "x")
    assert recipe["args"] == {"max_num_seqs": 8}
    assert recipe["import_warnings"] == ["--chat-template '{template}': the placeholder has no value in the recipe's defaults; "
                                         "the flag was left out"]


# -- the flags the collection sets are dropped and reported -----------------------------------------------------------

def test_every_flag_the_collection_sets_is_dropped_and_reported():
    command = ("vllm serve org/model --host 0.0.0.0 --port=8000 --tensor-parallel-size 2 -pp 1 --data-parallel-size 1 "
               "--served-model-name api-name alias --api-key s3cret --hf-token=hf_s3cret --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 "
               "--master-port 29501 --headless --distributed-executor-backend mp --revision abc123 --max-num-seqs 4")
    recipe = to_recipe(svd(command), "x")
    assert recipe["args"] == {"max_num_seqs": 4}
    assert dropped(recipe) == ["--host 0.0.0.0", "--port 8000", "--tensor-parallel-size 2", "-pp 1", "--data-parallel-size 1",
                                 "--served-model-name api-name alias", "--api-key (value not copied)", "--hf-token (value not copied)", "--nnodes 2",
                                 "--node-rank 0", "--master-addr 10.0.0.1", "--master-port 29501", "--headless",
                                 "--distributed-executor-backend mp", "--revision abc123"]
    assert "s3cret" not in repr(recipe)
    assert "--api-key dropped without its value: a secret belongs in the inventory's vault" in recipe["import_warnings"]
    assert "--hf-token dropped without its value: a secret belongs in the inventory's vault" in recipe["import_warnings"]
    assert recipe["model"] == {"repo": "org/model", "revision": "abc123", "dir": "model", "served_name": "api-name"}
    assert recipe["layouts"] == {"gb10x2": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}}
    assert "--served-model-name aliases alias dropped: the collection serves one name" in recipe["import_warnings"]


def test_short_spellings_of_the_collections_flags_are_dropped_too():
    recipe = to_recipe(svd("vllm serve org/model -tp 2 -n 2 -r 1 -dp 1 -q fp8"), "x")
    assert dropped(recipe) == ["-tp 2", "-n 2", "-r 1", "-dp 1"]
    assert recipe["args"] == {"quantization": "fp8"}


def test_the_model_given_as_a_flag_or_after_a_flag_is_found():
    assert to_recipe(svd("vllm serve --model org/other --max-num-seqs 2"), "x")["model"]["repo"] == "org/other"
    recipe = to_recipe(svd("vllm serve --port 8000 org/model --max-num-seqs 2", model=None), "x")
    assert recipe["model"]["repo"] == "org/model"
    assert dropped(recipe) == ["--port 8000"]


def test_a_local_path_served_falls_back_to_the_declared_repository():
    recipe = to_recipe(svd("vllm serve /models/local-copy --max-num-seqs 2"), "x")
    assert recipe["model"]["repo"] == "org/model"
    assert recipe["import_warnings"][-1] == ("the command serves '/models/local-copy', not a Hugging Face repository; "
                                             "'org/model' was imported instead")
    with pytest.raises(RecipeImportError, match="no Hugging Face repository"):
        to_recipe(svd("vllm serve /models/local-copy", model=None), "x")


# -- values are typed --------------------------------------------------------------------------------------------------

def test_values_are_typed():
    command = ("vllm serve org/model --max-model-len 32768 --gpu-memory-utilization .85 --swap-space=0 --seed -1 "
               "--enforce-eager --no-enable-log-requests --dtype bfloat16 --limit-mm-per-prompt '{\"image\": 2}' "
               "--allowed-origins '[\"a\", \"b\"]' --middleware m1 m2 --hf-overrides '{broken' --trust-request-chat-template true "
               "--rope-scaling.factor 4.0 --rope-scaling.type yarn")
    recipe = to_recipe(svd(command), "x")
    assert recipe["args"] == {
        "max_model_len": 32768, "gpu_memory_utilization": 0.85, "swap_space": 0, "seed": -1,
        "enforce_eager": True,  # a bare flag
        "no_enable_log_requests": True,  # kept as written: it renders back to the same flag
        "dtype": "bfloat16", "limit_mm_per_prompt": {"image": 2}, "allowed_origins": ["a", "b"],
        "middleware": ["m1", "m2"], "hf_overrides": "{broken", "trust_request_chat_template": "true",
        "rope_scaling": {"factor": 4.0, "type": "yarn"},
    }
    assert recipe["import_warnings"] == ["--hf-overrides '{broken': the value looks like JSON but does not parse; kept as a string"]
    for key in ("max_model_len", "swap_space", "seed"):
        assert type(recipe["args"][key]) is int
    assert type(recipe["args"]["gpu_memory_utilization"]) is float
    assert recipe["args"]["enforce_eager"] is True


def test_json_from_a_sparkrun_default_is_parsed():
    recipe = to_recipe(sparkrun("vllm serve {model} --speculative-config '{spec}'",
                                defaults={"spec": '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'}), "x")
    assert recipe["args"] == {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}}


def test_a_flag_given_twice_keeps_the_last_one_as_vllm_does():
    recipe = to_recipe(svd("vllm serve org/model --max-num-seqs 4 --max-num-seqs 8"), "x")
    assert recipe["args"] == {"max_num_seqs": 8}
    assert recipe["import_warnings"] == ["--max-num-seqs 8: --max-num-seqs is given twice; the last one was kept, as vLLM does"]


def test_a_short_flag_of_unsure_meaning_is_kept_as_written_with_a_warning():
    recipe = to_recipe(svd("vllm serve org/model -O3 -xyz 5 --max-num-seqs 2"), "x")
    assert recipe["args"] == {"-O": 3, "-xyz": 5, "max_num_seqs": 2}
    assert recipe["import_warnings"] == [
        f"{flag}: a short flag this import does not know; kept as written under args, check it against the image's vllm serve --help"
        for flag in ("-O3", "-xyz 5")]


# -- what cannot be carried over ----------------------------------------------------------------------------------------

def test_shell_around_vllm_serve_becomes_env_or_a_warning():
    command = ("export HF_HUB_OFFLINE=1 && pip install example-plugin; \\\n"
               "  NCCL_DEBUG=INFO exec vllm serve org/model --max-num-seqs 2  # the server\n")
    recipe = to_recipe(svd(command), "x")
    assert recipe["env"] == {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "INFO"}
    assert recipe["args"] == {"max_num_seqs": 2}
    assert recipe["import_warnings"] == ["shell command not carried over (the collection runs vllm serve alone): pip install example-plugin"]


def test_the_openai_server_module_is_vllm_serve_too():
    recipe = to_recipe(svd("python3 -m vllm.entrypoints.openai.api_server --model org/model --max-num-seqs 2"), "x")
    assert recipe["model"]["repo"] == "org/model" and recipe["args"] == {"max_num_seqs": 2}


@pytest.mark.parametrize(("doc", "message"), [
    (sparkrun(runtime="sglang"), "runs on runtime 'sglang', not vLLM"),
    (sparkrun("llama-server -hf {model} --port {port}", runtime=""), "runs no `vllm serve`"),
    (sparkrun(model="org/model-GGUF:Q4_K_M", runtime="llama-cpp"), "not vLLM"),
    (sparkrun(model="org/model-GGUF:Q4_K_M"), "GGUF"),
    (svd("vllm serve org/a && vllm serve org/b"), "runs vllm serve twice"),
    (svd("vllm serve org/model --chat-template 'unterminated"), "cannot be split as shell words"),
], ids=["sglang", "llama-server", "llama-cpp", "gguf", "two-servers", "bad-quoting"])
def test_a_recipe_that_is_not_one_vllm_server_is_refused(doc, message):
    with pytest.raises(RecipeImportError, match=message):
        to_recipe(doc, "x")


def test_sparkrun_hooks_and_settings_with_no_counterpart_are_listed():
    doc = sparkrun("vllm serve {model}", post_exec=["curl -s localhost:{port}/v1/models"],
                   post_commands=["python3 warmup.py"], executor_config={"shm_size": "20gb"},
                   pre_exec=[{"copy": "/local/mods", "dest": "/workspace/mods"}], env={"TOKEN": "${HF_TOKEN}"})
    warnings = to_recipe(doc, "x")["import_warnings"]
    assert warnings == [
        "env TOKEN=${HF_TOKEN}: sparkrun expands the $ reference at launch; the collection passes it as written",
        'sparkrun pre_exec step not carried over: {"copy": "/local/mods", "dest": "/workspace/mods"}',
        "sparkrun post_exec step not carried over: curl -s localhost:{port}/v1/models",
        "sparkrun post_commands step not carried over: python3 warmup.py",
        "sparkrun settings with no counterpart here, ignored: executor_config",
    ]


# -- layouts -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "layouts"), [
    ({"max_nodes": 1, "defaults": {"tensor_parallel": 1}}, {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}),
    ({"mode": "solo"}, {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}),
    ({"defaults": {"tensor_parallel": 2}}, {"gb10x2": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}}),
    ({"cluster_only": True, "defaults": {"pipeline_parallel": 2}}, {"gb10x2": {"tensor_parallel_size": 1, "pipeline_parallel_size": 2}}),
    ({"min_nodes": 2, "defaults": {"tensor_parallel": 4}}, {}),
    ({"min_nodes": 2}, {}),
], ids=["max-nodes-1", "mode-solo", "tp2", "pp2-cluster-only", "tp4", "cluster-of-one-gpu"])
def test_sparkrun_layouts(fields, layouts):
    recipe = to_recipe(sparkrun(**fields), "x")
    assert recipe["layouts"] == layouts
    if not layouts:
        assert recipe["import_warnings"][-1].startswith("no layout imported: the recipe needs")


def test_a_solo_recipe_asking_for_two_gpus_is_imported_for_one():
    recipe = to_recipe(svd("vllm serve org/model -tp {tensor_parallel}", solo_only=True,
                           defaults={"tensor_parallel": 2}), "x")
    assert recipe["layouts"] == {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}
    assert "imported as one GPU (gb10x1)" in recipe["import_warnings"][-1]


def test_data_parallel_is_reported_as_not_carried():
    recipe = to_recipe(svd("vllm serve org/model -dp 2"), "x")
    assert recipe["layouts"] == {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}
    assert "data parallel size 2 dropped" in recipe["import_warnings"][-1]


# -- the vLLM version --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "version"), [
    ({"container": "vllm/vllm-openai:v0.18.0"}, "0.18.0"),
    ({"container": "docker.io/vllm/vllm-openai:v0.19.1"}, "0.19.1"),
    ({"container": "vllm/vllm-openai:latest"}, None),
    ({"container": "ghcr.io/x/vllm:0.18.0"}, None),  # another image's tag is not vLLM's version
    ({"runtime_version": "v0.20"}, "0.20"),
    ({"runtime_version": "nightly"}, None),
], ids=["official", "official-docker-io", "latest", "other-image", "runtime-version", "runtime-version-not-a-version"])
def test_min_version_only_when_the_recipe_states_it(fields, version):
    recipe = to_recipe(sparkrun(**fields), "x")
    assert recipe.get("vllm") == ({"min_version": version} if version else None)
