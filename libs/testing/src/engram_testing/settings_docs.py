"""The settings reference of a service, written from its settings models into its README.

One row per variable (``ENGRAM_<SERVICE>_<PART>__<FIELD>``): its type, default and the
field's description; a nested model adds a row naming its variables' common prefix. The
table sits between two markers; ``make docs`` rewrites it, and a test fails when the
committed one differs (tools/gen_settings_docs.py).
"""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from engram_platform.settings import engram_home

BEGIN = "<!-- BEGIN GENERATED SETTINGS -->"
END = "<!-- END GENERATED SETTINGS -->"
HEADER = "| Variable | Type | Default | Description |\n|---|---|---|---|"


@dataclass(frozen=True, slots=True)
class Row:
    variable: str
    type: str
    default: str
    description: str

    def line(self) -> str:
        cells = (self.variable, self.type, self.default, self.description)
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for a in typing.get_args(annotation) or (annotation,):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def type_name(annotation: Any) -> str:
    """How the variable's value is written: ``int``, ``path or none``, ``one of a, b``…"""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if args and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return " or ".join(type_name(a) for a in inner) + " or none"
    if origin in (tuple, list, set, frozenset):
        return f"JSON list of {type_name(args[0])}" if args else "JSON list"
    if origin is dict:
        return "JSON object"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    names = {bool: "bool", int: "int", float: "float", str: "str", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(value: Any) -> str:
    """The default as one would write it in the variable (never the environment's)."""
    if value is None:
        return "none"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        home = engram_home()
        value = f"$ENGRAM_HOME/{value.relative_to(home)}" if value.is_relative_to(home) else value
    if isinstance(value, tuple | list | set | frozenset | dict):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return f"`{json.dumps(items, default=str)}`"
    text = str(value)
    return f"`{text}`" if text else '`""`'


def _value(field: FieldInfo, name: str, instance: BaseModel | None) -> Any:
    if instance is not None:
        return getattr(instance, name)
    return field.get_default(call_default_factory=True)


def rows(model: type[BaseModel], prefix: str, instance: BaseModel | None = None) -> Iterator[Row]:
    """The rows of ``model``'s fields; a nested model's defaults are those of the instance
    its parent makes (a step's budget has its own), not its class's."""
    for name, field in model.model_fields.items():
        value = _value(field, name, instance)
        variable = prefix + name.upper()
        nested = _model_of(field.annotation)
        if nested is not None:
            note = "" if value is not None else " Unset by default."
            yield Row(f"`{variable}__…`", "", "", (field.description or "") + note)
            yield from rows(nested, variable + "__", value)
        else:
            description = field.description or ""
            yield Row(
                f"`{variable}`", type_name(field.annotation), default_text(value), description
            )


def settings_table(settings: type[BaseSettings]) -> str:
    prefix = str(settings.model_config.get("env_prefix", ""))
    return "\n".join([HEADER, *(r.line() for r in rows(settings, prefix))])


def with_table(readme: str, table: str) -> str:
    """``readme`` with ``table`` between the markers (the rest untouched)."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} … {END} block")
    return readme[: start + len(BEGIN)] + "\n" + table + "\n" + readme[end:]
