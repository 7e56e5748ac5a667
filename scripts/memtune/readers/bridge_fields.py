"""Typed field readers for a Megatron Bridge ConfigContainer mapping.

Why a module of its own: every section reader (model, optimizer, ddp, mixed precision, PEFT)
reads its keys through these, and each must say the same thing for the same bad value - the
section and key, what was expected, and that a launcher placeholder (``${TP}``) is a value only
the job knows - so the wording lives in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

from memtune.errors import InputError


def is_placeholder(value: Any) -> bool:
    """Text filled in when the job is launched (``${TP}``, ``${oc.env:X}``), not a value."""
    return isinstance(value, str) and "${" in value


def launch_only_error(where: str, value: Any) -> InputError:
    return InputError(
        f"{where} is {value!r}, a placeholder filled in when the job is launched; "
        f"give the value as an override ({where}=N)"
    )


def config_section(cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = cfg.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        if name in ("mixed_precision", "peft"):
            return {"_name": value}
        raise InputError(f"config section {name!r} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _given(section: Mapping[str, Any], key: str, label: str) -> Any:
    """The key's value, None when it is absent or null; a launcher placeholder is refused here,
    once for every field reader."""
    value = section.get(key)
    if is_placeholder(value):
        raise launch_only_error(label, value)
    return value


# The field readers return the default's type: with a non-None default the result is never None.
@overload
def int_field(section: Mapping[str, Any], key: str, where: str, default: int) -> int: ...
@overload
def int_field(section: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int | None: ...
def int_field(section: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int | None:
    where = f"{where}.{key}" if where else key
    value = _given(section, key, where)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():  # also inf and NaN
        # int() would truncate 4096.5 to 4096 (another run) or raise on inf / NaN
        raise InputError(f"{where}: expected an integer, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected an integer, got {value!r}") from None
    return number


def module_names(value: Any, where: str = "value") -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v for v in value.replace("[", " ").replace("]", " ").replace(",", " ").split() if v)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    raise InputError(f"{where}: expected a list of module names, got {value!r}")


def float_field(section: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = _given(section, key, f"{where}.{key}")
    if value is None:
        return default
    if isinstance(value, bool):
        raise InputError(f"{where}.{key}: expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}.{key}: expected a number, got {value!r}") from None


def bool_field(section: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = _given(section, key, f"{where}.{key}")
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise InputError(f"{where}.{key}: expected true or false, got {value!r}")


@overload
def str_field(section: Mapping[str, Any], key: str, where: str, default: str) -> str: ...
@overload
def str_field(section: Mapping[str, Any], key: str, where: str, default: str | None) -> str | None: ...
def str_field(section: Mapping[str, Any], key: str, where: str, default: str | None) -> str | None:
    value = _given(section, key, f"{where}.{key}")
    if value is None:
        return default
    if isinstance(value, (dict, list, tuple)):
        raise InputError(f"{where}.{key}: expected a name, got {value!r}")
    return str(value)


def names_local_spec(text: str) -> bool:
    """Does a setting name Megatron-Core's local (no Transformer Engine) layer spec? Megatron-LM's
    ``--transformer-impl local``, or a Bridge ``transformer_layer_spec`` target such as
    ``megatron.bridge.models.gpt_provider.local_layer_spec`` / ``get_gpt_layer_local_spec``."""
    low = text.strip().lower()
    return low == "local" or "local_" in low
