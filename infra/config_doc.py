"""infra/rtrl.toml, generated: every key of `RtrlConfig` with its default value and, above it, its description.

    python -m infra.config_doc --write        # regenerate infra/rtrl.toml (after adding or changing a field)
    python -m infra.config_doc                # print it
    rtrl config --write-defaults PATH         # the same document, from the CLI

A key's documentation lives once, on its pydantic field (`description`, bounds); this module only lays it out:
top-level keys first, then each section in the order `RtrlConfig` declares it, a section's own keys before its
sub-tables (`[gate.users]` after `[gate]`'s keys). A section's comment is its field's description, else its class's
docstring. A non-empty table of values (`[ab.monitors]`) gets its own table; an empty one is `key = {}`. A default
TOML cannot hold (None) is written as a commented-out key, `# key = <type>`.

`load_config(DEFAULT_CONFIG) == RtrlConfig()` holds for the rendered file, and tests/unit/infra/test_config_doc.py
fails when the checked-in file is not what `render()` makes now or when a field has no description.
"""

from __future__ import annotations

import sys
import textwrap
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from infra.config import _BARE_KEY, DEFAULT_CONFIG, RtrlConfig, toml_value

WIDTH = 120
REGENERATE = "python -m infra.config_doc --write"

HEADER = f"""\
rtrl configuration: the embedded default (one machine, no GPU). Every key is optional; the values below are the
defaults, and `rtrl` loads this file when no --config is given. Override any key on the command line:
`rtrl --set kafka.port=29092 up`, or write your own file of the keys you change and pass `rtrl --config FILE`.
The same keys scale to a cluster: set kafka.bootstrap_servers and mlflow.tracking_uri to your services
(docs/deployment.md). Configuration for a purpose is an overlay of the keys it changes (infra/configs/: the
demo's, the model profiles).

A key written `# key = <type>` has no default value (TOML has no null): uncomment it with a value to set it.

Generated from the configuration classes' field descriptions (infra/config_doc.py): edit those, then run
`{REGENERATE}`; a unit test fails while this file differs from what that command writes."""


def render(model: type[BaseModel] = RtrlConfig) -> str:
    """The documented default configuration of `model` (RtrlConfig) as a TOML document."""
    out = [f"# {line}".rstrip() for line in HEADER.splitlines()] + [""]
    out += _table(model, model(), [])
    return "\n".join(out).rstrip() + "\n"


def field_keys(model: type[BaseModel] = RtrlConfig, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every key of `model` by dotted name with its field, sections included (a section before its keys)."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield key, field
        sub = _model_of(field)
        if sub is not None:
            yield from field_keys(sub, key + ".")


def undocumented(model: type[BaseModel] = RtrlConfig) -> list[str]:
    """Dotted keys whose field has no description (a section may instead have a class docstring)."""
    missing = []
    for key, field in field_keys(model):
        sub = _model_of(field)
        if not (field.description or "").strip() and not (sub is not None and (sub.__doc__ or "").strip()):
            missing.append(key)
    return missing


# --- layout -----------------------------------------------------------------------------------------------------

def _table(model: type[BaseModel], value: BaseModel, path: list[str]) -> list[str]:
    """The keys of one table, then its sub-tables (sections, and non-empty tables of values)."""
    lines: list[str] = []
    later: list[tuple[str, FieldInfo, Any]] = []
    for name, field in model.model_fields.items():
        v = getattr(value, name)
        if _model_of(field) is not None or (isinstance(v, Mapping) and v):
            later.append((name, field, v))
            continue
        lines += _described(field)
        lines += _key_line(name, field, v)
        lines.append("")
    for name, field, v in later:
        sub_path = [*path, name]
        lines += _described(field, _model_of(field))
        lines.append(f"[{'.'.join(_key(p) for p in sub_path)}]")
        if isinstance(v, BaseModel):
            lines += _table(type(v), v, sub_path)
        else:
            lines += [f"{_key(k)} = {toml_value(_plain(x))}" for k, x in v.items()]
            lines.append("")
        if lines[-1] != "":
            lines.append("")
    return lines


def _key_line(name: str, field: FieldInfo, value: Any) -> list[str]:
    if value is None:
        return [f"# {_key(name)} = <{_type_name(field.annotation)}>"]
    if field.annotation is float and type(value) is int:
        value = float(value)             # a float field's int default (`8 * 3600`) is written as the float it loads as
    plain = _plain(value)
    line = f"{_key(name)} = {toml_value(plain)}"
    if len(line) <= WIDTH or not isinstance(plain, list) or not plain:
        return [line]
    return [f"{_key(name)} = [", *(f"  {toml_value(x)}," for x in plain), "]"]


def _described(field: FieldInfo, model: type[BaseModel] | None = None) -> list[str]:
    text = (field.description or "").strip() or (" ".join((model.__doc__ or "").split("\n\n")[0].split())
                                                  if model is not None else "")
    bounds = _bounds(field)
    if bounds:
        text = f"{text} [{bounds}]" if text else f"[{bounds}]"
    return _comment(text)


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(" ".join(text.split()), WIDTH - 2, break_long_words=False,
                                                  break_on_hyphens=False)]


def _bounds(field: FieldInfo) -> str:
    """The field's numeric bounds and length limits as written on the field, e.g. ">= 1, <= 65535"."""
    parts = []
    for m in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(m, getattr(annotated_types, attr.capitalize())):
                parts.append(f"{sign} {_number(getattr(m, attr))}")
        if isinstance(m, annotated_types.MinLen) and m.min_length:
            parts.append(f"length >= {m.min_length}")
        if isinstance(m, annotated_types.MaxLen):
            parts.append(f"length <= {m.max_length}")
    return ", ".join(parts)


def _number(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else toml_value(name)


def _plain(value: Any) -> Any:
    """A default as TOML values: models as tables of the keys they set (None and defaults left out)."""
    if isinstance(value, BaseModel):
        return {k: _plain(v) for k, v in value.model_dump(exclude_defaults=True, exclude_none=True).items()}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _model_of(field: FieldInfo) -> type[BaseModel] | None:
    """The section class of a field that is one (a BaseModel, not a list or table of them)."""
    a = field.annotation
    return a if isinstance(a, type) and issubclass(a, BaseModel) else None


def _type_name(annotation: Any) -> str:
    """How a commented-out key's value is written: `true | false`, `"a" | "b"`, `float`, ..."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " | ".join(_type_name(a) for a in args)
    if typing.get_origin(annotation) is Literal:
        return " | ".join(toml_value(a) for a in typing.get_args(annotation))
    if annotation is bool:
        return "true | false"
    origin = typing.get_origin(annotation) or annotation
    return {int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        origin, getattr(origin, "__name__", str(origin)))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--write"]:
        path = Path(args[1]) if len(args) > 1 else DEFAULT_CONFIG
        path.write_text(render())
        print(f"wrote {path}")
        return 0
    if args:
        print(f"usage: python -m infra.config_doc [--write [PATH]]   (default PATH: {DEFAULT_CONFIG})",
              file=sys.stderr)
        return 2
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
