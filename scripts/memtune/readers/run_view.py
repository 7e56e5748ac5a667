"""One view of a training run assembled from every input check_env / regather_config get.

The same knob can be written in many places: a Megatron-LM flag in the launch script, a
key in a Megatron Bridge YAML, a Hydra override on the command line, a Bridge shortcut
(``-tp 4``). Rules should not care which; they ask the view for ``tp`` or ``nccl_ub``
and get the value *and where it came from* (``file:line``), because a finding is only
useful when it points at the line to change.

Precedence, lowest first: Bridge YAML (``--config``), the training command in the
launch script (flags, overrides), the overrides given to the helper itself.
The environment is: this process (``--env``), then ``--env-file`` files, then what the
launch script exports before its training command (its ``VAR=... cmd`` prefixes last).

Note for folding: the YAML-with-line-numbers loader and the Hydra value parser here are
deliberately small; they can be replaced by the estimator's ``bridge_config`` /
``overrides`` modules once those keep source lines.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from memtune.errors import InputError
from memtune.files.data_yaml import load_data_mapping
from memtune.files.paths import DATA_DIR
from memtune.files.textfile import one_line
from memtune.readers.bridge_nested import flat_model_key
from memtune.readers.launch.args import parse_override, split_program_args
from memtune.readers.launch.commands import parse_file
from memtune.readers.launch.script import Command, Flag, LaunchScript, Override, is_branch_guess
from memtune.spec.overrides import refuse_misspelt

ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@dataclass(frozen=True)
class Value:
    """A setting's value with its provenance."""

    value: Any
    source: str  # "file:line" or a description ("--override", "environment")
    text: str  # how it was written, e.g. "--use-nccl-ub" or "ddp.nccl_ub: true"
    origin: str  # flag | config | override | cli | derived | substitution (unresolved only)


@dataclass(frozen=True)
class EnvValue:
    name: str
    value: str
    source: str
    line: int | None = None
    file: str | None = None


@dataclass
class RunView:
    env: dict[str, EnvValue] = field(default_factory=dict)
    env_given: bool = False  # any of --env / --env-file / --script was given
    settings: dict[str, Value] = field(default_factory=dict)
    script: LaunchScript | None = None
    command: Command | None = None  # the training command
    config_path: str | None = None
    config_form: str | None = None  # "yaml" | "hydra" | "megatron" | None
    torch_version: tuple[int, ...] | None = None
    torch_version_text: str | None = None
    mcore_version: tuple[int, ...] | None = None
    compute_capability: float | None = None
    gpu: str | None = None
    notes: list[str] = field(default_factory=list)
    unresolved: dict[str, Value] = field(default_factory=dict)  # e.g. "$TP" left literal
    flat: dict[str, tuple[Any, str, str]] = field(default_factory=dict)  # config key -> (value, source, text)
    flags: dict[str, Flag] = field(default_factory=dict)  # training command's Megatron-LM flags
    crlf_scripts: list[tuple[LaunchScript, Command | None]] = field(default_factory=list)  # CR LF line endings
    misspelt: list[tuple[str, str, str]] = field(default_factory=list)  # (config key, the field meant, source)

    def get(self, name: str, default: Any = None) -> Any:
        item = self.settings.get(name)
        return default if item is None else item.value

    def where(self, name: str) -> str:
        item = self.settings.get(name)
        return item.source if item else "default"

    def text(self, name: str) -> str:
        item = self.settings.get(name)
        return item.text if item else name

    def has(self, name: str) -> bool:
        return name in self.settings


@lru_cache(maxsize=1)
def rules_data() -> Mapping[str, Any]:
    return load_data_mapping(DATA_DIR / "check_rules.yaml")


def switches() -> frozenset[str]:
    data = rules_data()
    names = set(data.get("switches", []))
    for spec in data["settings"].values():
        if spec.get("switch"):
            names.update(spec.get("flags", []))
    return frozenset(names)


# ------------------------------------------------------------------ value parsing


def hydra_value(text: str | None) -> Any:
    """Hydra override value -> Python (YAML scalars / flow lists), via memtune.spec.overrides."""
    from memtune.spec.overrides import parse_value

    return None if text is None else parse_value(text)


def coerce(value: Any, kind: str) -> tuple[Any, bool]:
    """Convert to the setting's type; (value, ok). Unresolved shell text is not ok."""
    if value is None:
        return None, True
    try:
        if kind == "int":
            if isinstance(value, bool):
                return int(value), True
            if isinstance(value, float) and not value.is_integer():
                return value, False  # 2.5 layers is a typo, not 2; inf / NaN are not sizes
            if isinstance(value, (int, float)):
                return int(value), True
            return int(str(value).strip()), True
        if kind == "bool":
            if isinstance(value, bool):
                return value, True
            low = str(value).strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True, True
            if low in ("false", "0", "no", "off", "none", "null"):
                return False, True
            return value, False
        if kind == "list":
            if isinstance(value, (list, tuple)):
                return [str(v) for v in value], True
            text = str(value).strip()
            if text.startswith("["):
                parsed = hydra_value(text)
                if isinstance(parsed, list):
                    return [str(v) for v in parsed], True
            return [part for part in re.split(r"[\s,\[\]]+", text) if part], True
        return (value if not isinstance(value, str) else value.strip()), True
    except (TypeError, ValueError):
        return value, False


# ------------------------------------------------------------------ YAML with lines


def load_yaml_lines(path: str) -> dict[str, tuple[Any, int]]:
    """Flatten a YAML mapping to ``{"a.b.c": (value, line)}`` (1-based lines).

    Uses yaml.compose so every key keeps its line; only safe constructors are used.
    """
    import yaml  # lazy

    from memtune.files import yaml_guard
    from memtune.readers.bridge_config import parse_bridge_yaml, python_tag, python_tag_refusal
    from memtune.readers.bridge_recipe import refuse_python_recipe

    refuse_python_recipe(path)
    node = parse_bridge_yaml(path, yaml_guard.compose)
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise InputError(f"{path}: top level is not a mapping; give a Megatron Bridge ConfigContainer YAML")
    constructor = yaml.constructor.SafeConstructor()
    out: dict[str, tuple[Any, int]] = {}

    def walk(current: Any, prefix: str) -> None:
        for key_node, value_node in current.value:
            try:
                key = str(constructor.construct_object(key_node, deep=True))
            except yaml.YAMLError:
                key = str(key_node.value)
            dotted = f"{prefix}.{key}" if prefix else key
            line = key_node.start_mark.line + 1
            tag = python_tag(str(value_node.tag))
            if tag is not None:
                raise python_tag_refusal(path, value_node.start_mark.line + 1, tag, dotted)
            if isinstance(value_node, yaml.MappingNode):
                try:
                    out[dotted] = (constructor.construct_object(value_node, deep=True), line)
                except yaml.YAMLError:
                    out[dotted] = ({}, line)
                walk(value_node, dotted)
            else:
                try:
                    out[dotted] = (constructor.construct_object(value_node, deep=True), line)
                except yaml.YAMLError as exc:
                    problem = one_line(getattr(exc, "problem", None) or exc, 120)
                    raise InputError(f"{path}:{line}: value of {dotted} cannot be read ({problem}); fix it") from None

    try:
        walk(node, "")
    except RecursionError:
        raise InputError(f"{path}: YAML nested too deeply to be a Megatron Bridge config") from None
    return out


# ------------------------------------------------------------------ env files


def read_env_file(path: str) -> list[EnvValue]:
    """KEY=VALUE lines (``export`` allowed, ``#`` comments, optional quotes)."""
    from memtune.files.textfile import read_text

    out: list[EnvValue] = []
    text = read_text(path, "a KEY=VALUE env file", strict=False).replace("\r\n", "\n")
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].strip()
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InputError(
                f"{path}:{number}: expected KEY=VALUE, got {raw.strip()[:60]!r}; fix the line or remove it"
            )
        value = value.strip()
        if value[:1] in ("'", '"') and value.count(value[0]) < 2:
            raise InputError(
                f"{path}:{number}: {name}= opens a {value[0]} quote that the line does not close; close it"
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.append(EnvValue(name, value, f"{path}:{number}", number, path))
    return out


# ------------------------------------------------------------------ assembling


@dataclass(frozen=True)
class Inputs:
    use_env: bool = False
    env_files: Sequence[str] = ()
    env_values: Sequence[str] = ()  # NAME=VALUE given on the command line (--set)
    scripts: Sequence[str] = ()
    configs: Sequence[str] = ()
    overrides: Sequence[str] = ()
    torch_version: str | None = None
    mcore_version: str | None = None
    world_size: int | None = None
    gpu: str | None = None  # e.g. H100, B200 (compute capability decides MT003)
    environ: Mapping[str, str] | None = None  # for tests: stands in for os.environ


def build(inputs: Inputs) -> RunView:
    from memtune.readers.alloc_conf import parse_version

    view = RunView()
    view.torch_version_text = inputs.torch_version
    view.torch_version = parse_version(inputs.torch_version, "--torch-version")
    view.mcore_version = parse_version(inputs.mcore_version, "--megatron-core-version")
    if inputs.gpu:
        from memtune.spec.gpus import lookup_gpu  # the one GPU table, shared with estimate/plan

        view.gpu = inputs.gpu
        view.compute_capability = lookup_gpu(
            inputs.gpu, fallback="or leave --gpu out: MT003 then assumes a GPU before Blackwell"
        ).compute_capability
    spec = rules_data()["settings"]

    # --- environment -------------------------------------------------------------
    if inputs.use_env:
        view.env_given = True
        environ = inputs.environ if inputs.environ is not None else os.environ
        for name, value in environ.items():
            view.env[name] = EnvValue(name, value, "environment (--env)")
    for path in inputs.env_files:
        view.env_given = True
        for item in read_env_file(path):
            view.env[item.name] = item
    for text in inputs.env_values:
        name, eq, value = text.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InputError(
                f"--set {text!r}: expected NAME=VALUE, e.g. --set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            )
        view.env_given = True
        view.env[name] = EnvValue(name, value, f"--set {name}")

    # --- Bridge YAML -----------------------------------------------------------------
    flat: dict[str, tuple[Any, str, str]] = {}
    flag_values: dict[str, Flag] = {}
    flag_file: dict[str, str] = {}
    for path in inputs.configs:
        view.config_path = path
        view.config_form = "yaml"
        loaded = load_yaml_lines(path)
        for section in CONFIG_SECTIONS:
            value, line = loaded.get(section, (None, 0))
            if value is not None and not isinstance(value, dict):
                raise InputError(
                    f"{path}:{line}: section {section}: must be a mapping (key: value lines), got {_short(value)}"
                )
        for key, (value, line) in loaded.items():
            if key.startswith("ENV_VARS.") and key.count(".") == 1 and not isinstance(value, (dict, list)):
                # Megatron-LM functional-test configs carry the job environment
                name = key.split(".", 1)[1]
                text = (
                    "" if value is None else (("True" if value else "False") if isinstance(value, bool) else str(value))
                )
                view.env[name] = EnvValue(name, text, f"{path}:{line}", line, path)
                view.env_given = True
                continue
            last = key.rsplit(".", 1)[-1] if not key.startswith("--") else key
            if last.startswith("--") and len(last) > 2:
                # Megatron-LM functional-test style: MODEL_ARGS: {--num-layers: 32, --use-nccl-ub: true}
                if value is not False:
                    flag_values[last[2:]] = _yaml_flag(last[2:], value, line)
                    flag_file[last[2:]] = path
                view.config_form = "megatron"
                continue
            if key == "model.transformer._target_":
                continue  # the class building the nested transformer config; the model's own stays
            key = flat_model_key(key)  # Bridge's nested model.transformer.* is model.* to the rules
            flat[key] = (value, f"{path}:{line}", f"{key}: {_short(value)}")

    # --- launch scripts ----------------------------------------------------------------
    script_overrides: list[Override] = []
    for path in inputs.scripts:
        view.env_given = True
        script = parse_file(path)
        view.script = script
        view.notes.extend(script.notes)
        command = script.training_command()
        view.command = command
        if command is None:
            view.notes.append(
                f"{path}: no python / torchrun training command found (one in a heredoc fed to another program, an eval'd "
                "string or $(...) is not read), so only its exports were checked"
            )
        if script.crlf_line is not None:
            view.crlf_scripts.append((script, command))
        for name, setting in script.env_for(command).items():
            view.env[name] = EnvValue(name, setting.value or "", setting.source, setting.line, setting.file)
        if command is not None:
            flags, overrides = split_program_args(command.program_args, switches())
            flag_values.update(flags)
            flag_file.update({name: path for name in flags})
            script_overrides.extend(overrides)
            if overrides and view.config_form is None:
                view.config_form = "hydra"
            elif flags and view.config_form is None:
                view.config_form = "megatron"
            config_flag = flags.get("config-file") or flags.get("config_file") or flags.get("config")
            if config_flag and config_flag.value and not inputs.configs:
                candidate = config_flag.value
                if not os.path.isabs(candidate):
                    candidate = os.path.join(os.path.dirname(os.path.abspath(path)), candidate)
                if os.path.isfile(candidate):
                    view.config_path = candidate
                    for key, (value, line) in load_yaml_lines(candidate).items():
                        flat.setdefault(key, (value, f"{candidate}:{line}", f"{key}: {_short(value)}"))
                else:
                    view.notes.append(
                        f"{path}:{config_flag.line}: config file {config_flag.value} not found here; pass it with --config"
                    )
        _sbatch_world(view, script, command)

    script_path = view.script.path if view.script else "script"
    for override in script_overrides:
        _apply_override(flat, override, f"{script_path}:{override.line}")
    for text in inputs.overrides:
        given = parse_override(text)
        if given is None:
            raise InputError(
                f"override {text!r} is not KEY=VALUE, +KEY=VALUE, ++KEY=VALUE or ~KEY; e.g. model.tensor_model_parallel_size=4"
            )
        if given.prefix == "" and given.key not in flat:
            # a plain override misspelling a key the rules read would be ignored: refuse it
            refuse_misspelt(given.text or given.key, given.key, known_paths())
        _apply_override(flat, given, "command line")
        if view.config_form is None:
            view.config_form = "hydra"

    _resolve_references(flat)
    view.misspelt.extend(misspelt_config_keys(flat))
    view.flat = flat
    view.flags = flag_values
    # --- canonical settings ------------------------------------------------------------
    assumed_behind: dict[str, list[str]] = {}  # an assumption -> the settings it is behind
    for name, setting_spec in spec.items():
        kind = setting_spec.get("type", "str")
        found: Value | None = None
        guesses: tuple[str, ...] = ()
        for path_key in setting_spec.get("paths", []):
            if path_key in flat:
                raw, source, text = flat[path_key]
                if path_key in ("peft", "peft._target_"):
                    raw = _peft_kind(raw)
                    if raw is None:
                        continue
                origin = "config" if text.startswith(f"{path_key}: ") else "override"
                found = Value(raw, source, text, origin)
        for flag_name in setting_spec.get("flags", []):
            if flag_name in flag_values:
                flag = flag_values[flag_name]
                raw = True if setting_spec.get("switch") else flag.value
                if name in ("peft",):
                    raw = _peft_kind(flag.value)
                text = f"--{flag_name}" + (f" {flag.value}" if flag.value and not setting_spec.get("switch") else "")
                source = f"{flag_file.get(flag_name, view.script.path if view.script else 'line')}:{flag.line}"
                found = Value(raw, source, text, "flag")
                guesses = flag.assumed
        if found is None:
            continue
        if any(is_branch_guess(note) for note in guesses):
            # the value depends on which if/case branch runs: checking the one the reader
            # happened to keep could report a problem the job never has (or miss one)
            view.unresolved[name] = found
            continue
        for note in guesses:
            assumed_behind.setdefault(note, []).append(f"{found.source}: {found.text}")
        converted, ok = coerce(found.value, kind)
        if not ok:
            if not _shell_expansion(found.value):
                # a literal that is no number / switch: Megatron and Bridge would refuse it, and
                # skipping it silently would let every rule that needs it pass
                raise InputError(f"{found.source}: {found.text}: expected {KIND_WORDS.get(kind, kind)}; fix the value")
            view.unresolved[name] = found  # "$TP", "$(nproc)": only known when the job runs
            continue
        least = setting_spec.get("min")
        if least is not None and isinstance(converted, int) and converted < least:
            raise InputError(f"{found.source}: {found.text}: must be at least {least}; fix the value")
        view.settings[name] = Value(converted, found.source, found.text, found.origin)

    view.notes.extend(_assumption_notes(assumed_behind))
    if view.script is not None and view.command is not None:
        _substituted_arguments(view, view.script, view.command, spec)
    view.notes.extend(_unresolved_notes(view))
    # Megatron-LM spells VPP as layers per virtual stage
    if "vpp" not in view.settings and "layers_per_virtual_stage" in view.settings:
        per = view.get("layers_per_virtual_stage")
        layers, pp = view.get("num_layers"), view.get("pp", 1)
        if isinstance(per, int) and per > 0 and isinstance(layers, int) and pp:
            per_item = view.settings["layers_per_virtual_stage"]
            view.settings["vpp"] = Value((layers // pp) // per, per_item.source, per_item.text, "derived")
    if "recompute_granularity" not in view.settings and view.get("recompute_activations"):
        switch = view.settings["recompute_activations"]
        view.settings["recompute_granularity"] = Value("selective", switch.source, switch.text, "derived")
    if inputs.world_size is not None:
        view.settings["world_size"] = Value(
            inputs.world_size, "command line", f"--world-size {inputs.world_size}", "cli"
        )
    return view


def _assumption_notes(behind: Mapping[str, Sequence[str]], shown: int = 3) -> list[str]:
    """One line per assumption, naming the first setting it is behind and counting the rest,
    so a default that feeds many flags does not repeat itself down the screen."""
    lines = []
    for note, places in behind.items():
        places = list(dict.fromkeys(places))
        line = f"{places[0]}: {note}"
        if len(places) > 1:
            more = places[1 : 1 + shown]
            rest = len(places) - 1 - len(more)
            line += " (also behind " + ", ".join(more) + (f" and {rest} more" if rest else "") + ")"
        lines.append(line)
    return lines


def _substituted_arguments(view: RunView, script: LaunchScript, command: Command, spec: Mapping[str, Any]) -> None:
    """Arguments the training command gets from ``$(...)``: never run, so never read.

    The settings such a substitution may pass (override keys or flags in the variables it
    reads) are only known when the job runs, even when the script also spells them out;
    one that passes nothing recognisable still gets a note, so no argument vanishes silently.
    """
    seen: set[str] = set()
    for word in command.program_args:
        for text, (line, keys) in script.substitutions.items():
            if text not in word.text or text in seen:
                continue
            seen.add(text)
            shown = text if len(text) <= 60 else text[:57] + "..."
            hit = False
            for name, setting_spec in spec.items():
                paths, flags = setting_spec.get("paths", []), setting_spec.get("flags", [])
                key = next((k for k in keys if k in paths or k in flags), None)
                if key is None:
                    continue
                hit = True
                view.settings.pop(name, None)
                view.unresolved[name] = Value(None, f"{script.path}:{line}", f"{key} via {shown}", "substitution")
            if not hit:
                view.notes.append(
                    f"{script.path}:{line}: {shown}: a command substitution is never run here; "
                    "whatever arguments it prints were not read"
                )


def _unresolved_notes(view: RunView) -> list[str]:
    """One line per setting the checks could not use, so a clean result is not read as
    "checked and fine" for values only the running job knows."""
    return [
        f"{value.source}: {value.text}: {name} is only known when the job runs "
        + (
            "(it passes through a command substitution, which is never run here)"
            if value.origin == "substitution"
            else "(script arguments, environment, or an if/case branch decided at run time)"
        )
        + "; checks that need it were skipped"
        for name, value in view.unresolved.items()
    ]


KIND_WORDS = {"int": "a whole number", "bool": "true or false"}
# ConfigContainer sections whose keys the rules read (peft may be a scheme name: "peft: lora")
CONFIG_SECTIONS = ("model", "train", "ddp", "optimizer", "dataset")


def _resolve_references(flat: dict[str, tuple[Any, str, str]]) -> None:
    """Replace in-file ``${a.b}`` references (``dataset.sequence_length: ${model.seq_length}``)
    with the value of the key they name, as OmegaConf does; the text keeps how it was written.
    Launcher placeholders (``${TP}``) and resolvers (``${oc.env:USER}``) stay unresolved."""
    from memtune.readers.bridge_config import resolve_reference

    def lookup(dotted: str) -> Any:
        entry = flat.get(dotted)
        return None if entry is None else entry[0]

    for key, (value, source, text) in list(flat.items()):
        if isinstance(value, str) and "${" in value:
            flat[key] = (resolve_reference(value, lookup), source, text)


def misspelt_config_keys(flat: Mapping[str, tuple[Any, str, str]]) -> list[tuple[str, str, str]]:
    """(key, the field it misspells, source) for each config key a letter or a word away from a
    field of its section (``model.tensor_model_paralel_size``): Bridge has no such field, so it
    refuses the config, or the run trains without the setting the user meant."""
    from memtune.readers.bridge_nested import NESTED
    from memtune.spec.model_spec import model_field_names
    from memtune.spec.overrides import typo_of

    # model.transformer is the nested TransformerConfig section itself, not a misspelt field
    known = known_paths() | {f"model.{name}" for name in model_field_names()} | {f"model.{NESTED}"}
    out = []
    for key, (_value, source, text) in flat.items():
        if key in known or not text.startswith(f"{key}: "):
            continue
        section, _, leaf = key.rpartition(".")
        near = sorted(p for p in known if p.rpartition(".")[0] == section and typo_of(leaf, p.rpartition(".")[2]))
        if near:
            out.append((key, near[0], source))
    return out


def _shell_expansion(value: Any) -> bool:
    """Text the shell fills in at run time (``$TP``, ``${A:-4}``, ``$(nproc)``, backticks)."""
    return isinstance(value, str) and ("$" in value or "`" in value)


def known_paths() -> frozenset[str]:
    """Every Bridge config key (``model.tensor_model_parallel_size``) a check reads."""
    return frozenset(path for setting in rules_data()["settings"].values() for path in setting.get("paths", []))


def _yaml_flag(name: str, value: Any, line: int) -> Flag:
    if value is True or value is None:
        values: tuple[str, ...] = ()
    elif isinstance(value, (list, tuple)):
        values = tuple(str(v) for v in value)
    else:
        values = (str(value),)
    return Flag(name, values, line)


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def _peft_kind(value: Any) -> str | None:
    """'lora' / 'dora' from a peft mapping, _target_ or a scheme name."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        target = str(value.get("_target_", ""))
        if target:
            return _peft_kind(target)
        return "lora" if "dim" in value or "target_modules" in value else None
    text = str(value).strip().lower()
    if text in ("", "none", "null", "false"):
        return None
    if text.endswith("dora") or text == "dora":
        return "dora"
    if "lora" in text:
        return "lora"
    return text


def _apply_override(flat: dict[str, tuple[Any, str, str]], override: Override, source: str) -> None:
    if override.prefix == "~":
        for key in [k for k in flat if k == override.key or k.startswith(override.key + ".")]:
            del flat[key]
        return
    value = hydra_value(override.value)
    flat[override.key] = (value, source, override.text or f"{override.key}={override.value}")


def _sbatch_world(view: RunView, script: LaunchScript, command: Command | None) -> None:
    """GPU count from the launcher and the scheduler (memtune.readers.launch.world), with the
    line that says which option decided it."""
    if "world_size" in view.settings:
        return
    from memtune.readers.launch.world import read_world

    reading = read_world(script, command)
    if reading is None:
        return
    view.notes.append(f"{script.path}:{reading.line}: {reading.note}")
    if reading.gpus is not None:
        view.settings["world_size"] = Value(
            reading.gpus, f"{script.path}:{reading.line}", f"launcher GPU count: {reading.decided_by}", "derived"
        )


def alloc_env(view: RunView) -> dict[str, EnvValue]:
    return {name: view.env[name] for name in ALLOC_VARS if name in view.env}


def iter_rule_codes() -> Iterable[str]:
    return list(rules_data()["rules"])
