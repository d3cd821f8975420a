"""A typed settings model read from ``PREFIX*`` environment variables, without pydantic.

:class:`kbsync.settings.Settings` is read by every CLI command before it does anything, and
pydantic-settings cost a no-op sync ~0.1 s of its ~0.45 s (its import and a 50-field core
schema; issue 42). The settings are flat scalars, so this module does what they need and
nothing more, in the few milliseconds of its own import:

* fields declared as class annotations with a :func:`Field` default (``X | None`` allowed):
  ``str``, ``int``, ``float``, ``bool``, ``Path``, :class:`SecretStr`, a ``Literal`` of
  strings, or a ``str`` :class:`~enum.Enum`; bounds ``ge``/``gt``/``le``, a ``pattern``, and
  ``check``/``check_raw`` hooks (a ``ValueError`` is the field's error);
* values from keyword arguments, else ``<PREFIX><NAME>`` (names case-insensitive), else the
  default; text from the environment is parsed as pydantic's lax mode parses it (``"yes"`` is
  true, ``" 5 "`` is 5, non-finite numbers refused), with its error wording, so a bad value
  reads as it always did;
* every error of a construction at once, in :class:`SettingsInvalid`;
* the part of pydantic's model API the code uses: ``model_fields``, ``model_fields_set``,
  ``model_copy(update=)`` (not validated, as pydantic's), ``model_dump(mode=, include=,
  exclude_none=)`` and iteration over ``(name, value)``.

Limits: no nested models, lists or JSON values, no ``.env`` files; unknown keyword arguments
are ignored, as the settings always ignored unknown names (they are warned about by name:
:func:`kbsync.settings.warn_unknown_variables`).
"""

from __future__ import annotations

import enum
import math
import os
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Self

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class SecretStr:
    """A secret: shown as ``**********`` by ``str``, ``repr`` and a JSON dump; the value only
    through :meth:`get_secret_value`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __repr__(self) -> str:
        return f"SecretStr({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, value: str) -> None:
        self._value = value


class SettingsInvalid(ValueError):
    """One or more fields refused; :meth:`errors` lists them as pydantic did (``loc``,
    ``msg``, ``input``), in field order."""

    def __init__(self, model: str, errors: list[dict[str, Any]]) -> None:
        self._errors = errors
        lines = [f"{len(errors)} validation error{'s' if len(errors) != 1 else ''} for {model}"]
        lines += [f"{e['loc'][0]}\n  {e['msg']}" for e in errors]
        super().__init__("\n".join(lines))

    def errors(self) -> list[dict[str, Any]]:
        return list(self._errors)


@dataclass
class FieldInfo:
    """A field: its default, bounds and description (``annotation`` and ``name`` are filled
    in when its class is made)."""

    default: Any = None
    description: str | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    pattern: str | None = None
    check: Callable[[Any], Any] | None = None
    """Called with the parsed value; returns it (or a replacement), raises ValueError."""
    check_raw: Callable[[Any], Any] | None = None
    """Called with the value as given, before parsing (e.g. an empty text a Path would hide)."""
    annotation: Any = None
    name: str = ""


def Field(default: Any = None, *, description: str | None = None,  # noqa: N802 - pydantic's name
          ge: float | None = None, gt: float | None = None, le: float | None = None,
          pattern: str | None = None, check: Callable[[Any], Any] | None = None,
          check_raw: Callable[[Any], Any] | None = None) -> Any:
    """A field's default and rules, written as pydantic's ``Field`` was."""
    return FieldInfo(default, description, ge, gt, le, pattern, check, check_raw)


class EnvModel:
    """Base of a settings class; subclasses set ``env_prefix`` and declare fields."""

    env_prefix: ClassVar[str] = ""
    model_fields: ClassVar[dict[str, FieldInfo]] = {}
    model_fields_set: set[str]
    """The fields given (keyword or environment), not defaulted; a copy adds its updates."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hints = typing.get_type_hints(cls)
        fields: dict[str, FieldInfo] = {}
        for name in cls.__dict__.get("__annotations__", {}):
            if typing.get_origin(hints[name]) is ClassVar:
                continue
            value = cls.__dict__.get(name)
            info = value if isinstance(value, FieldInfo) else FieldInfo(default=value)
            info.annotation, info.name = hints[name], name
            fields[name] = info
            if name in cls.__dict__:
                delattr(cls, name)  # the instance's value, never the class's FieldInfo
        cls.model_fields = {**cls.model_fields, **fields}

    def __init__(self, **values: Any) -> None:
        environ = _environment(self.env_prefix)
        given: set[str] = set()
        errors: list[dict[str, Any]] = []
        for name, info in self.model_fields.items():
            if name in values:
                raw = values[name]
            elif name in environ:
                raw = environ[name]
            else:
                object.__setattr__(self, name, info.default)
                continue
            given.add(name)
            try:
                object.__setattr__(self, name, _validate(info, raw))
            except ValueError as exc:
                errors.append({"loc": (name,), "msg": str(exc), "input": raw,
                               "type": "value_error"})
        if errors:
            raise SettingsInvalid(type(self).__name__, errors)
        object.__setattr__(self, "model_fields_set", given)

    # --- the model API the code uses ------------------------------------------------------
    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        """A copy with ``update`` applied as given (not validated, as pydantic's)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.__dict__["model_fields_set"] = set(self.model_fields_set) | set(update or ())
        copy.__dict__.update(update or {})
        return copy

    def model_dump(self, *, mode: str = "python", include: set[str] | None = None,
                   exclude_none: bool = False) -> dict[str, Any]:
        """The fields by name; ``mode="json"``: paths and enums as text, secrets masked."""
        data = {}
        for name in self.model_fields:
            if include is not None and name not in include:
                continue
            value = getattr(self, name)
            if value is None and exclude_none:
                continue
            data[name] = _json(value) if mode == "json" else value
        return data

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return ((name, getattr(self, name)) for name in self.model_fields)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and dict(self) == dict(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic's models

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self)
        return f"{type(self).__name__}({fields})"


def _environment(prefix: str) -> dict[str, str]:
    """``{field name: text}`` of the ``prefix`` variables, names compared case-insensitively."""
    size, lowered = len(prefix), prefix.lower()
    return {key[size:].lower(): value for key, value in os.environ.items()
            if key[:size].lower() == lowered}


def _json(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


def _validate(info: FieldInfo, raw: Any) -> Any:
    """``raw`` parsed as ``info`` says, or ValueError with pydantic's wording."""
    if info.check_raw is not None:
        raw = info.check_raw(raw)
    kind, optional = _unwrap(info.annotation)
    if raw is None:
        if optional:
            return None
        raise ValueError(f"Input should be a valid {_TYPE_NAMES.get(kind, 'value')}")
    value = _parse(kind, raw)
    _bounds(info, value)
    if info.pattern is not None and not re.search(info.pattern, value):
        raise ValueError(f"String should match pattern '{info.pattern}'")
    return info.check(value) if info.check is not None else value


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """``(type, True)`` for ``type | None``, else ``(annotation, False)``."""
    args = typing.get_args(annotation)
    if type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None)), True
    return annotation, False


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}


def _parse(kind: Any, raw: Any) -> Any:
    if typing.get_origin(kind) is typing.Literal:
        choices = typing.get_args(kind)
        if isinstance(raw, str) and raw in choices:
            return raw
        raise ValueError(f"Input should be {_listed(choices)}")
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        for member in kind:
            if raw is member or (isinstance(raw, str) and raw == member.value):
                return member
        raise ValueError(f"Input should be {_listed([m.value for m in kind])}")
    parse = _PARSERS.get(kind)
    if parse is None:
        raise TypeError(f"no parser for fields of type {kind!r}")
    return parse(raw)


def _listed(choices: Any) -> str:
    """``'a', 'b' or 'c'``: the choices as pydantic's messages list them."""
    names = [f"'{c}'" for c in choices]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _text(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    raise ValueError("Input should be a valid string")


def _integer(raw: Any) -> int:
    if not isinstance(raw, (int, float, str)):  # True is 1, as pydantic reads it
        raise ValueError("Input should be a valid integer")
    if isinstance(raw, str):
        whole = _WHOLE.fullmatch(raw.strip())  # "5.0" is 5, as pydantic reads it
        try:
            if whole is None:
                raise ValueError(raw)
            return int(whole[1])
        except ValueError:  # also past the interpreter's 4,300 digits
            raise ValueError("Input should be a valid integer, unable to parse string as an "
                             "integer") from None
    if isinstance(raw, float) and not raw.is_integer():
        raise ValueError("Input should be a valid integer, got a number with a fractional part")
    return int(raw)


_WHOLE = re.compile(r"([+-]?[0-9]+(?:_[0-9]+)*)(?:\.0+)?", re.ASCII)


def _number(raw: Any) -> float:
    if not isinstance(raw, (int, float, str)):
        raise ValueError("Input should be a valid number")
    try:
        if isinstance(raw, str) and not raw.isascii():
            raise ValueError(raw)  # float() would read other scripts' digits; pydantic does not
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except ValueError:
        raise ValueError("Input should be a valid number, unable to parse string as a "
                         "number") from None
    if not math.isfinite(value):
        raise ValueError("Input should be a finite number")
    return value


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.lower() in _TRUE | _FALSE:
        return raw.lower() in _TRUE
    raise ValueError("Input should be a valid boolean, unable to interpret input")


def _path(raw: Any) -> Path:
    if isinstance(raw, (str, os.PathLike)):
        return Path(raw)
    raise ValueError("Input is not a valid path")


def _secret(raw: Any) -> SecretStr:
    if isinstance(raw, SecretStr):
        return raw
    if callable(getattr(raw, "get_secret_value", None)):  # pydantic's, from a caller's code
        return SecretStr(_text(raw.get_secret_value()))
    return SecretStr(_text(raw))


_PARSERS: dict[Any, Callable[[Any], Any]] = {
    str: _text, int: _integer, float: _number, bool: _boolean, Path: _path, SecretStr: _secret}


def _bounds(info: FieldInfo, value: Any) -> None:
    for bound, holds, words in ((info.ge, lambda b: value >= b, "greater than or equal to"),
                                (info.gt, lambda b: value > b, "greater than"),
                                (info.le, lambda b: value <= b, "less than or equal to")):
        if bound is not None and not holds(bound):
            raise ValueError(f"Input should be {words} {bound}")
