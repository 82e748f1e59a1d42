# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Recipes of the other DGX Spark tools, turned into ours (recipes/README.md, schema 1).

Two formats are read, both YAML that a loader has already parsed into a dict:

- sparkrun's (`sparkrun run <recipe>`; `recipe_version: "2"`, or "1" for the legacy eugr-style recipes it
  still runs): `model`, `model_revision`, `runtime`, `container`, `min_nodes`/`max_nodes` (or the older
  `mode`, `solo_only`, `cluster_only`), `defaults`, `env`, `command` (optional: without it sparkrun builds the
  command from a fixed set of `defaults` keys), `metadata`, `mods`, lifecycle hooks (`pre_exec`, ...);
- spark-vllm-docker's (eugr, `run-recipe.sh`, `recipe_version: "1"`): `name`, `container`, `command`
  (required), `model`, `defaults`, `env`, `mods`, `build_args`, `solo_only`, `cluster_only`.

In both, `command` is a `vllm serve ...` shell template whose `{placeholders}` are filled from `defaults`
(sparkrun also offers `{model}`); `{{` and `}}` stand for literal braces (spark-vllm-docker fills it with
Python's str.format). The filled command is split with shlex and its flags become our `args`, typed; the flags
the collection sets itself are dropped and listed. What cannot be carried over (mods that patch the container,
shell commands around vllm serve, hooks) is listed under `import_warnings` for a person to read.
Pure functions: no file or network access.
"""

from __future__ import annotations

import copy
import json
import re
import shlex

from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PLAN_OWNED, SHORT_FLAGS

FORMATS = ("vllmops", "sparkrun", "spark-vllm-docker")


class RecipeImportError(ValueError):
    """A document that is not a recipe we can read, or that cannot be turned into one of ours."""


# Top-level keys only sparkrun's format has (its recipe loader's known keys, less the ones both formats share).
_SPARKRUN_KEYS = frozenset({
    "sparkrun_version", "runtime", "runtime_version", "mode", "min_nodes", "max_nodes", "metadata", "model_revision",
    "runtime_config", "benchmark", "pre_exec", "post_exec", "post_commands", "stop_after_post", "builder",
    "builder_config", "executor_config", "distribution_config",
})
# Keys spark-vllm-docker's run-recipe.py reads.
_SVD_KEYS = frozenset({"recipe_version", "name", "description", "model", "container", "command", "defaults", "env",
                       "mods", "build_args", "solo_only", "cluster_only"})
# Keys of sparkrun's that need no warning when ignored: metadata is informational, benchmark is for its own bench.
_SPARKRUN_QUIET = frozenset({"sparkrun_version", "recipe_version", "name", "description", "model", "model_revision",
                             "runtime", "runtime_version", "mode", "min_nodes", "max_nodes", "container", "defaults",
                             "env", "command", "metadata", "benchmark", "mods", "solo_only", "cluster_only",
                             "build_args"})

# sparkrun runtimes that serve with vLLM (the others are SGLang, llama.cpp, TensorRT-LLM, Atlas).
_VLLM_RUNTIMES = frozenset({"", "vllm", "vllm-distributed", "vllm-ray", "eugr-vllm"})

# Flags the collection sets on every rank itself (plan.PLAN_OWNED), the data-parallel ones the layouts do not hold,
# and the secrets that belong in the inventory's vault (recipes.SECRET_FLAGS): dropped on import. served_model_name,
# model and revision are not lost: they become model.served_name, model.repo, model.revision.
_DROPPED = frozenset(PLAN_OWNED).union({"revision", "api_key", "hf_token", "data_parallel_size", "data_parallel_rank",
                                        "data_parallel_address", "data_parallel_rpc_port"})

# sparkrun, without a command template, turns only these `defaults` keys into flags (its runtime's flag map):
# key -> (vLLM option name, is a boolean toggle).
_SPARKRUN_DEFAULT_FLAGS = {
    "port": ("port", False), "host": ("host", False), "tensor_parallel": ("tensor_parallel_size", False),
    "pipeline_parallel": ("pipeline_parallel_size", False), "data_parallel": ("data_parallel_size", False),
    "gpu_memory_utilization": ("gpu_memory_utilization", False), "max_model_len": ("max_model_len", False),
    "max_num_batched_tokens": ("max_num_batched_tokens", False), "max_num_seqs": ("max_num_seqs", False),
    "served_model_name": ("served_model_name", False), "dtype": ("dtype", False),
    "quantization": ("quantization", False), "kv_cache_dtype": ("kv_cache_dtype", False),
    "distributed_executor_backend": ("distributed_executor_backend", False),
    "otlp_traces_endpoint": ("otlp_traces_endpoint", False), "api_key": ("api_key", False),
    "enforce_eager": ("enforce_eager", True), "enable_prefix_caching": ("enable_prefix_caching", True),
    "trust_remote_code": ("trust_remote_code", True),
}

_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+|\d+\.\d*[eE][-+]?\d+)")
_NEGATIVE_NUMBER = re.compile(r"-\d|-\.\d")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_HF_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_VERSION = re.compile(r"v?(\d+\.\d+(?:\.\d+)?)")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&"})
_LBRACE, _RBRACE = "\x00", "\x01"


def detect(document: dict) -> str:
    """Which format a parsed recipe is in: 'vllmops' (ours: `schema: 1`), 'sparkrun' or 'spark-vllm-docker'.

    sparkrun is told by a key only it has (runtime, min_nodes, metadata, pre_exec, ...), by `recipe_version: "2"`,
    or by `model` and `container` without a `command` (its minimal recipe); spark-vllm-docker by `build_args`,
    `recipe_version: "1"`, or `name`, `container` and `command` together (its required fields). A document that
    fits none raises RecipeImportError saying what was looked for.
    """
    if not isinstance(document, dict):
        raise RecipeImportError(f"a recipe is a YAML mapping, this is {type(document).__name__}")
    if "schema" in document:
        if document["schema"] == 1:
            return "vllmops"
        raise RecipeImportError(f"schema: {document['schema']!r} is not a recipe schema this collection reads (it reads schema 1)")
    version = str(document.get("recipe_version", document.get("sparkrun_version", "")))
    if _SPARKRUN_KEYS & document.keys() or version == "2":
        return "sparkrun"
    if document.get("build_args") or version == "1" or {"name", "container", "command"} <= document.keys():
        return "spark-vllm-docker"
    if document.get("model") and document.get("container"):
        return "sparkrun"
    keys = ", ".join(sorted(map(str, document))) or "none"
    raise RecipeImportError(
        "not a recipe this collection can read: ours has `schema: 1`; sparkrun's has `model` and `container` "
        "(and often `runtime`, `min_nodes`, `recipe_version: \"2\"`); spark-vllm-docker's has `name`, `container` "
        f"and `command` (and `recipe_version: \"1\"`). This document's top-level keys: {keys}")


def to_recipe(document: dict, name: str) -> dict:
    """A recipe of ours (schema 1) named `name`, from one in any format `detect` knows.

    Ours is returned as a copy. A foreign recipe gives: `model` (repo from the served positional or the recipe's
    `model`, revision from `model_revision`/`--revision` or 'main', dir, served_name from `--served-model-name`,
    else sparkrun's `defaults.served_model_name`, else the repo as vLLM would name it), `vllm.min_version` when
    the recipe states the vLLM version (sparkrun's `runtime_version`, or a vllm/vllm-openai image tag), `args`
    (the command's flags in snake_case, typed: ints, floats, True for a bare flag, JSON values parsed),
    `env`, `layouts` (gb10x1 for one node, gb10x2 for two, from the recipe's solo/cluster settings and its tensor
    and pipeline parallel sizes) and `notes`.

    The flags dropped because the collection sets them itself are named in `notes`, as written in the command
    (an --api-key or --hf-token without its value). Two keys beyond schema 1 say what the import could not settle:
    - `image`: the recipe's container image, as written. A suggestion for the loader (vllm_image), never applied
      blindly: spark-vllm-docker's images are local build tags made by its build-and-copy.sh.
    - `import_warnings`: sentences about what was not carried over (mods patching the container, shell commands,
      hooks, unresolved placeholders, layouts beyond two nodes); empty when nothing was lost.
    """
    fmt = detect(document)
    if fmt == "vllmops":
        recipe = copy.deepcopy(document)
        recipe.setdefault("name", name)
        return recipe
    return _Importer(document, name, fmt).run()


class _Importer:
    def __init__(self, document: dict, name: str, fmt: str):
        self.doc = document
        self.name = name
        self.fmt = fmt
        self.warnings: list[str] = []
        self.dropped: list[str] = []
        self.env: dict[str, str] = {}
        self.args: dict = {}
        self.owned: dict[str, object] = {}  # the dropped flags' values, by option name
        self.positionals: list[str] = []

    # -- the whole import -------------------------------------------------------------------------------------------

    def run(self) -> dict:
        doc = self.doc
        defaults = doc.get("defaults") or {}
        if not isinstance(defaults, dict):
            raise RecipeImportError(f"the {self.fmt} recipe's `defaults` must be a mapping, got {type(defaults).__name__}")
        if self.fmt == "sparkrun":
            runtime = str(doc.get("runtime") or "")
            if runtime not in _VLLM_RUNTIMES:
                raise RecipeImportError(f"the sparkrun recipe runs on runtime {runtime!r}, not vLLM: only vLLM recipes can be imported")
            if ":" in str(doc.get("model") or ""):
                raise RecipeImportError(f"the sparkrun recipe's model {doc['model']!r} is a GGUF quant (repo:quant), which vLLM does not serve here")
        self._env(doc.get("env"))  # first: the command's own exports and VAR=value prefixes come later, and win
        command = doc.get("command")
        if command:
            self._from_command(str(command), defaults)
        elif self.fmt == "sparkrun":
            self._from_defaults(defaults)
        else:
            raise RecipeImportError("the spark-vllm-docker recipe has no `command`, which that format requires")
        self._unsupported()
        recipe = {"schema": 1, "name": self.name, "description": self._description(), "model": self._model(defaults)}
        version = self._min_version()
        if version:
            recipe["vllm"] = {"min_version": version}
        if doc.get("container"):
            recipe["image"] = str(doc["container"])
        recipe["args"] = self.args
        recipe["env"] = self.env
        recipe["layouts"] = self._layouts(defaults)
        recipe["notes"] = self._notes()
        recipe["import_warnings"] = self.warnings
        return recipe

    # -- the command ------------------------------------------------------------------------------------------------

    def _render(self, template: str, defaults: dict) -> str:
        """The template with its placeholders filled: spark-vllm-docker refuses a missing one (as its
        str.format does), sparkrun leaves it in place (and so do we, then warn where it lands)."""
        values = dict(defaults)
        if self.fmt == "sparkrun":
            values.setdefault("model", self.doc.get("model", ""))
        text = template.replace("{{", _LBRACE).replace("}}", _RBRACE)
        missing: list[str] = []

        def fill(match):
            key = match.group(1)
            if key not in values:
                missing.append(key)
                return "{" + key + "}"
            return _text(values[key]).replace("{{", _LBRACE).replace("}}", _RBRACE)

        for _round in range(10):  # sparkrun resolves nested references (a default that names another)
            filled = _PLACEHOLDER.sub(fill, text)
            if filled == text:
                break
            text = filled
        if missing and self.fmt == "spark-vllm-docker":
            names = ", ".join(sorted(set(missing)))
            raise RecipeImportError(f"the command uses {{{names}}}, which the recipe's defaults do not set "
                                    "(run-recipe.sh refuses it too)")
        return text.replace(_LBRACE, "{").replace(_RBRACE, "}")

    def _from_command(self, template: str, defaults: dict) -> None:
        text = _CONTINUATION.sub(" ", self._render(template, defaults))
        serve = None
        for tokens in _shell_commands(text):
            rest = self._leading_assignments(tokens)
            argv = _serve_argv(rest)
            if argv is None:
                self._shell(rest)
            elif serve is not None:
                raise RecipeImportError("the command runs vllm serve twice; only a recipe with one server can be imported")
            else:
                serve = argv
        if serve is None:
            raise RecipeImportError(f"the {self.fmt} recipe's command runs no `vllm serve`: only vLLM recipes can be imported")
        self._parse(serve)

    def _leading_assignments(self, tokens: list[str]) -> list[str]:
        """`VAR=value vllm serve ...`: the variables go to env."""
        index = 0
        while index < len(tokens) and _ASSIGNMENT.match(tokens[index]) and index + 1 < len(tokens):
            key, _eq, value = tokens[index].partition("=")
            self.env[key] = value
            index += 1
        return tokens[index:]

    def _shell(self, tokens: list[str]) -> None:
        if tokens and tokens[0] == "export" and len(tokens) > 1 and all(_ASSIGNMENT.match(t) for t in tokens[1:]):
            for token in tokens[1:]:
                key, _eq, value = token.partition("=")
                self.env[key] = value
            return
        if tokens:
            self.warnings.append(f"shell command not carried over (the collection runs vllm serve alone): {shlex.join(tokens)}")

    def _parse(self, argv: list[str]) -> None:
        index = 0
        while index < len(argv):
            token = argv[index]
            index += 1
            if not _is_option(token):
                self.positionals.append(token)
                continue
            written, has_value, inline = token.partition("=")
            if has_value:
                values = [inline]
            else:
                values = []
                while index < len(argv) and not _is_option(argv[index]):
                    values.append(argv[index])
                    index += 1
            self._flag(written, values)

    def _flag(self, written: str, values: list[str]) -> None:
        spelled = shlex.join([written, *values])
        key, path = self._key(written, values)
        if key is None:
            return
        if any(_PLACEHOLDER.search(v) for v in values):
            self.warnings.append(f"{spelled}: the placeholder has no value in the recipe's defaults; the flag was left out")
            return
        if key in _DROPPED:
            if key != "served_model_name" and len(values) > 1:  # `--port 8000 org/model`: one value, then the positional
                self.positionals.extend(values[1:])
                values = values[:1]
                spelled = shlex.join([written, *values])
            self.owned[key] = values
            self.dropped.append(f"{written} (value not copied)" if key in ("api_key", "hf_token") else spelled)
            return
        value = self._value(spelled, values)
        if path:
            target = self.args.setdefault(key, {})
            if not isinstance(target, dict):
                self.warnings.append(f"{spelled}: {key} is also given whole; the whole value was kept")
                return
            for part in path[:-1]:
                target = target.setdefault(part, {})
            target[path[-1]] = value
            return
        if key in self.args:
            self.warnings.append(f"{spelled}: --{key.replace('_', '-')} is given twice; the last one was kept, as vLLM does")
        self.args[key] = value

    def _key(self, written: str, values: list[str]) -> tuple[str | None, list[str]]:
        """The option's name in snake_case and, for `--json-option.key.sub`, the path into it."""
        if written.startswith("--"):
            head, *path = written[2:].split(".")
            return head.replace("-", "_"), path
        short, *path = written[1:].split(".")
        if short in SHORT_FLAGS:  # vLLM's short spellings we are sure of; any other is kept as written
            return SHORT_FLAGS[short], path
        self.warnings.append(f"{shlex.join([written, *values])}: a short flag this import does not know; kept as written "
                             "under args, check it against the image's vllm serve --help")
        attached = re.fullmatch(r"-O(\d+)", written)
        if attached:  # -O3 is -O 3 (an optimization level, whose meaning moved across vLLM versions)
            written, values = "-O", [attached.group(1)]
        self.args[written] = self._value(written, values)
        return None, []

    def _value(self, spelled: str, values: list[str]):
        if not values:
            return True
        typed = [_typed(v, spelled, self.warnings) for v in values]
        return typed[0] if len(typed) == 1 else typed

    def _from_defaults(self, defaults: dict) -> None:
        """No command: sparkrun passes only its flag map's keys of `defaults`, the others feed templates only."""
        ignored = []
        for key, value in defaults.items():
            if key not in _SPARKRUN_DEFAULT_FLAGS:
                ignored.append(str(key))
                continue
            option, toggle = _SPARKRUN_DEFAULT_FLAGS[key]
            if value is None:
                continue
            written = "--" + option.replace("_", "-")
            if toggle:
                if _truthy(value):
                    self._flag(written, [])
            else:
                self._flag(written, [_text(value)])
        self.positionals.append(str(self.doc.get("model") or ""))
        if ignored:
            self.warnings.append("defaults sparkrun passes to vLLM only through a command template, and this recipe has none, "
                                 "so they were not imported: " + ", ".join(ignored))

    # -- the rest of the recipe -------------------------------------------------------------------------------------

    def _env(self, env) -> None:
        if env is None:
            return
        if not isinstance(env, dict):
            raise RecipeImportError(f"the {self.fmt} recipe's `env` must be a mapping, got {type(env).__name__}")
        for key, value in env.items():
            if value is None:
                continue
            text = str(value)
            self.env[str(key)] = text
            if "$" in text:
                self.warnings.append(f"env {key}={text}: {self.fmt} expands the $ reference at launch; the collection passes it as written")

    def _unsupported(self) -> None:
        doc = self.doc
        for mod in doc.get("mods") or []:
            self.warnings.append(f"mod {mod!r} is not applied: {self.fmt} copies it into the container and runs it before vllm serve, "
                                 "which the collection does not do; use an image that already has its fix")
        if doc.get("build_args"):
            args = " ".join(map(str, doc["build_args"]))
            self.warnings.append(f"image {doc.get('container')!r} is built by spark-vllm-docker's build-and-copy.sh with {args}; "
                                 "build it there (or use an equivalent image) and name it in vllm_image")
        elif self.fmt == "spark-vllm-docker" and doc.get("container") and "/" not in str(doc["container"]):
            self.warnings.append(f"image {doc['container']!r} is a local tag of spark-vllm-docker's build-and-copy.sh, not a registry image")
        if self.fmt != "sparkrun":
            unknown = sorted(str(k) for k in doc if k not in _SVD_KEYS)
        else:
            for hook in ("pre_exec", "post_exec", "post_commands"):
                for entry in doc.get(hook) or []:
                    shown = entry if isinstance(entry, str) else json.dumps(entry, sort_keys=True)
                    self.warnings.append(f"sparkrun {hook} step not carried over: {shown}")
            unknown = sorted(str(k) for k in doc if k not in _SPARKRUN_QUIET and k not in ("pre_exec", "post_exec", "post_commands"))
        if unknown:
            self.warnings.append(f"{self.fmt} settings with no counterpart here, ignored: {', '.join(unknown)}")
        backend = self.owned.get("distributed_executor_backend")
        if backend:
            self.warnings.append(f"--distributed-executor-backend {' '.join(backend)} dropped: the collection chooses the backend (vllmops_backend)")
        for secret in ("api_key", "hf_token"):
            if secret in self.owned:
                self.warnings.append(f"--{secret.replace('_', '-')} dropped without its value: a secret belongs in the inventory's vault")
        dp = _int(self.owned.get("data_parallel_size"))
        if dp and dp > 1:
            self.warnings.append(f"data parallel size {dp} dropped: the layouts hold tensor and pipeline parallel sizes only")

    def _description(self) -> str:
        doc = self.doc
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        text = doc.get("description") or meta.get("description") or doc.get("name")
        return str(text) if text else f"{doc.get('model') or self.name}, imported from a {self.fmt} recipe."

    def _model(self, defaults: dict) -> dict:
        declared = str(self.doc.get("model") or "")
        served = self.positionals[0] if self.positionals else ""
        for extra in self.positionals[1:]:
            self.warnings.append(f"positional argument {extra!r} after the model not carried over")
        flag_model = self.owned.get("model")
        if flag_model:
            served = flag_model[0]
        if served and _HF_REPO.fullmatch(served):
            repo = served
            if declared and declared != served:
                self.warnings.append(f"the recipe downloads {declared!r} but serves {served!r}; the served one was imported")
        elif declared and _HF_REPO.fullmatch(declared):
            repo = declared
            if served and served != declared:
                self.warnings.append(f"the command serves {served!r}, not a Hugging Face repository; {declared!r} was imported instead")
        else:
            raise RecipeImportError(f"no Hugging Face repository (org/name) found for the model: the recipe's model is {declared!r}, "
                                    f"its command serves {served!r}")
        revision = self.doc.get("model_revision")
        if self.owned.get("revision"):
            revision = self.owned["revision"][0]
        names = self.owned.get("served_model_name")
        if names:
            served_name = names[0]
            if len(names) > 1:
                self.warnings.append(f"--served-model-name aliases {', '.join(names[1:])} dropped: the collection serves one name")
        elif self.fmt == "sparkrun" and defaults.get("served_model_name"):
            served_name = str(defaults["served_model_name"])  # sparkrun appends it when the template lacks it
        else:
            served_name = repo  # vLLM's name for a model served without --served-model-name
        return {"repo": repo, "revision": str(revision or "main"), "dir": repo.rsplit("/", 1)[-1], "served_name": str(served_name)}

    def _min_version(self) -> str | None:
        stated = _VERSION.fullmatch(str(self.doc.get("runtime_version") or "").strip())
        if stated:
            return stated.group(1)
        image = str(self.doc.get("container") or "")
        repository, _colon, tag = image.rpartition(":")
        if repository.endswith("vllm/vllm-openai"):
            tagged = _VERSION.fullmatch(tag)
            if tagged:
                return tagged.group(1)
        return None

    def _layouts(self, defaults: dict) -> dict:
        tp = self._size("tensor_parallel_size", defaults.get("tensor_parallel"))
        pp = self._size("pipeline_parallel_size", defaults.get("pipeline_parallel"))
        doc = self.doc
        solo = bool(doc.get("solo_only"))
        cluster = bool(doc.get("cluster_only"))
        if self.fmt == "sparkrun":
            solo = solo or doc.get("mode") == "solo" or _int(doc.get("max_nodes")) == 1
            cluster = cluster or doc.get("mode") == "cluster" or (_int(doc.get("min_nodes")) or 1) > 1
        nodes = tp * pp
        if solo and not cluster:
            if nodes != 1:
                self.warnings.append(f"the recipe runs on one node but asks for tensor parallel {tp} x pipeline parallel {pp}; "
                                     "imported as one GPU (gb10x1)")
            return {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}
        if nodes == 1 and not cluster:
            return {"gb10x1": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}}
        if nodes == 2:
            return {"gb10x2": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}}
        self.warnings.append(f"no layout imported: the recipe needs {nodes} DGX Spark nodes "
                             f"(tensor parallel {tp} x pipeline parallel {pp}{', cluster only' if cluster else ''}); "
                             "only gb10x1 and gb10x2 are made from a foreign recipe")
        return {}

    def _size(self, option: str, default) -> int:
        given = self.owned.get(option)
        value = given[0] if given else default
        if value is None:
            return 1
        number = _int(value)
        if number is None or number < 1:
            self.warnings.append(f"{option} {value!r} is not a positive integer; 1 was assumed")
            return 1
        return number

    def _notes(self) -> str:
        version = self.doc.get("recipe_version")
        source = f"a {self.fmt} recipe" + (f" (recipe_version {version})" if version else "")
        if self.doc.get("name") and self.fmt == "spark-vllm-docker":
            source += f" named {self.doc['name']!r}"
        text = f"Imported from {source}."
        if self.dropped:
            text += " Dropped, as the collection sets them itself: " + "; ".join(self.dropped) + "."
        if self.warnings:
            text += f" {len(self.warnings)} import warning(s) under import_warnings."
        return text


def _shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell text: lines, split at ; && || | &, comments removed."""
    commands = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            tokens = list(lexer)
        except ValueError as error:
            raise RecipeImportError(f"the command cannot be split as shell words ({error}): {line.strip()}") from error
        current: list[str] = []
        for token in tokens:
            if token.startswith("#"):
                break
            if token in _SEPARATORS:
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    return [c for c in commands if c]


def _serve_argv(tokens: list[str]) -> list[str] | None:
    """The arguments after `vllm serve` (or the OpenAI server module), or None for any other command."""
    if tokens[:1] == ["exec"]:
        tokens = tokens[1:]
    if len(tokens) >= 2 and tokens[0].rsplit("/", 1)[-1] == "vllm" and tokens[1] == "serve":
        return tokens[2:]
    if len(tokens) >= 3 and re.fullmatch(r"python[\d.]*", tokens[0].rsplit("/", 1)[-1]) and tokens[1] == "-m" \
            and tokens[2] == "vllm.entrypoints.openai.api_server":
        return tokens[3:]
    return None


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def _typed(text: str, spelled: str, warnings: list[str]):
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            warnings.append(f"{spelled}: the value looks like JSON but does not parse; kept as a string")
    return text


def _text(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _int(value) -> int | None:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if _INT.fullmatch(text) else None


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
