"""The format registry and the Adapter base class.

A format is a class that says what a spec may set (`option_keys`,
`field_keys`, `required_fields`), which task families it can feed
(`task_types`), and reads files into typed examples:

    @register_adapter("my_format")
    class MyAdapter(Adapter):
        option_keys = {"delimiter": (str, "\\t")}
        field_keys = ("text", "label")
        required_fields = ("text",)
        task_types = ("classification",)  # the names of data_adapters.task_types

        def read(self, paths, options, fields, task_type, labels, report):
            for path in paths:
                ...
                yield TextExample(text, label=label)

`options` and `fields` arrive with the defaults filled in and checked
(`settings`). Anything left out goes to `report.skip` / `report.lose_span`
with a reason; nothing is dropped silently.
"""
from __future__ import annotations

import codecs
import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

# What `settings` hands to `read`: the spec's options and fields, defaults filled in.
Options = dict[str, Any]
Fields = dict[str, Any]
# The task's label names, in order (None for a family without labels, or not given).
Labels = Sequence[str] | None

_ADAPTERS: dict[str, type[Adapter]] = {}
A = TypeVar("A", bound="type[Adapter]")


class TaskSource(Protocol):
    """What `read_task` and `split_paths` read of a task: a registry TaskSpec, or anything
    with these attributes (`optional_files`, `file_aliases`, `resolve_labels`, `spec_path`
    and `line` are used when present)."""

    @property
    def name(self) -> str: ...

    @property
    def format(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def files(self) -> Mapping[str, Any] | None: ...

    @property
    def options(self) -> Mapping[str, Any] | None: ...

    @property
    def fields(self) -> Mapping[str, Any] | None: ...

    @property
    def labels(self) -> Labels: ...


class UnknownFormatError(KeyError):
    def __str__(self):  # KeyError would print the message in quotes
        return self.args[0]


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def option_value_problem(key, value, default):
    """What is wrong with an option's value beyond its type (an empty delimiter, an
    encoding Python does not know), as the end of a message; None when nothing is."""
    if key in ("delimiter", "encoding") and value == "":
        return f"is empty: give one ({key}: {default!r} when left out)"
    if key == "encoding" and isinstance(value, str):
        try:
            codecs.lookup(value)
        except LookupError:
            return (f"is {value!r}, no encoding Python knows (e.g. utf-8, gbk, gb18030, "
                    "utf-16)")
    return None


class Adapter:
    # name -> (type or tuple of types, default)
    option_keys: ClassVar[dict[str, tuple[type | tuple[type, ...], Any]]] = {}
    field_keys: ClassVar[Sequence[str]] = ()  # example fields a spec may map to source keys/columns
    required_fields: ClassVar[Sequence[str]] = ()  # of those, the ones a spec must map
    field_defaults: ClassVar[dict[str, Any]] = {}  # source used when a spec leaves an optional field out
    task_types: ClassVar[Sequence[str]] = ()  # families this format can produce
    # options `mtl predict` reads with, over the spec's: gold is not needed there
    predict_options: ClassVar[dict[str, Any]] = {}
    format_name: ClassVar[str | None] = None  # set by register_adapter (the first name it registers)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        """Yield typed examples from `paths` (full paths, read in order)."""
        raise NotImplementedError(f"{type(self).__name__} must define read()")

    @classmethod
    def settings(cls, options: Mapping[str, Any] | None = None, fields: Mapping[str, Any] | None = None,
                 where: str = "spec") -> tuple[Options, Fields]:
        """(options, fields) with defaults filled in; ValueError naming the key and the fix."""
        name = cls.format_name or cls.__name__
        options, fields = dict(options or {}), dict(fields or {})
        for key, value in options.items():
            if key not in cls.option_keys:
                allowed = ", ".join(cls.option_keys) or "none"
                raise ValueError(f"{where}: unknown option {key!r} for format {name!r}"
                                 f"{did_you_mean(key, cls.option_keys)}; allowed: {allowed}")
            expected = cls.option_keys[key][0]
            if value is not None and not _fits(value, expected):
                raise ValueError(f"{where}: option {key!r} of format {name!r} must be "
                                 f"{_type_name(expected)}, got {value!r}")
            problem = option_value_problem(key, value, cls.option_keys[key][1])
            if problem:
                raise ValueError(f"{where}: option {key!r} of format {name!r} {problem}")
        for key in fields:
            if key not in cls.field_keys:
                allowed = ", ".join(cls.field_keys) or f"none (format {name!r} takes no fields)"
                raise ValueError(f"{where}: unknown field {key!r} for format {name!r}"
                                 f"{did_you_mean(key, cls.field_keys)}; allowed: {allowed}")
        missing = [key for key in cls.required_fields if key not in fields]
        if missing:
            raise ValueError(f"{where}: format {name!r} needs `fields:` for {', '.join(missing)} "
                             f"(the source key or column of each)")
        merged_options = {key: _copy(default) for key, (_, default) in cls.option_keys.items()}
        merged_options.update(options)
        merged_fields = dict(cls.field_defaults)
        merged_fields.update(fields)
        return merged_options, merged_fields


def register_adapter(name: str, replace: bool = False) -> Callable[[A], A]:
    """Class decorator: make `name` a format usable in specs (`format: name`)."""
    def decorate(cls: A) -> A:
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise TypeError(f"register_adapter({name!r}) decorates a subclass of data_adapters.Adapter")
        existing = _ADAPTERS.get(name)
        if existing is not None and existing is not cls and not replace:
            raise ValueError(f"format {name!r} is already registered by "
                             f"{existing.__module__}.{existing.__qualname__}; pick another name "
                             "or pass replace=True")
        _ADAPTERS[name] = cls
        if "format_name" not in cls.__dict__:
            cls.format_name = name
        return cls
    return decorate


def get_adapter(name: str) -> type[Adapter]:
    """The adapter class of a format name; UnknownFormatError (a KeyError) otherwise."""
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise UnknownFormatError(f"unknown format {name!r}{did_you_mean(name, _ADAPTERS)}; "
                                 f"available: {', '.join(available_formats())}") from None


def available_formats() -> list[str]:
    return sorted(_ADAPTERS)


def _fits(value, expected):
    if expected is float:
        expected = (int, float)
    if isinstance(value, bool) and expected in (int, (int, float)):
        return False
    return isinstance(value, expected)


def _type_name(expected):
    names = {str: "a string", bool: "true or false", int: "a whole number",
             float: "a number", dict: "a mapping", list: "a list"}
    if isinstance(expected, tuple):
        return " or ".join(names.get(t, t.__name__) for t in expected)
    return names.get(expected, getattr(expected, "__name__", str(expected)))


def _copy(default):
    # Defaults like [] and {} are shared by the class: hand out copies.
    return type(default)(default) if isinstance(default, (list, dict)) else default
