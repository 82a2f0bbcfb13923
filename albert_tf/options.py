"""Options declared once: dataclass fields that also define the command-line flags.

Every script's options are one dataclass (the task modules hold them). Each field is
declared with `option(default, help, ...)`: its name is the flag's name, its type
annotation the flag's type, its default the flag's default, and `choices` / `minimum` /
`maximum` the values the flag accepts, `output` the folders a run writes in.
`define_flags(cls)` turns the fields into absl flags, `from_flags(cls)` fills the
dataclass back from them, and `check(options)` refuses out-of-range values, and output
places this process cannot write in, with one line naming the flag (`UserError`). Code that
builds options in Python (tests, the ablation studies) gets the same defaults and the
same checks without any flag.

    @dataclasses.dataclass(kw_only=True)
    class MyOptions(Options):
        output_dir: str = option(REQUIRED, "Where results go.")
        steps: int = option(100, "Optimizer steps.", minimum=1)

    define_flags(MyOptions)             # --output_dir, --steps
    opts = from_flags(MyOptions)        # MyOptions(output_dir=..., steps=...)
    check(opts)                         # UserError("--steps=0: expected an integer >= 1")

Types: bool, int, float, str (with `choices`: an enum flag), `X | None` (default
None) and `tuple[str, ...]` (a comma-separated list flag).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing

from albert_tf import fileio
from albert_tf.errors import UserError

REQUIRED = dataclasses.MISSING  # a field without default: a required flag
_META = "albert_tf.option"


@dataclasses.dataclass(frozen=True)
class _Spec:
    help: str
    choices: tuple | None = None
    minimum: float | None = None
    maximum: float | None = None
    below: float | None = None  # exclusive upper bound
    output: str | None = None  # "folder": the run writes in it
    flag: bool = True


def option(
    default=REQUIRED,
    help: str = "",
    *,
    choices=None,
    minimum=None,
    maximum=None,
    below=None,
    output=None,
):
    """A field that is also a flag (see the module docstring).

    minimum / maximum: inclusive bounds; below: exclusive upper bound. Bounds are not
    checked on None. output="folder": a folder the run creates or writes in (or a path
    prefix in one); `check` makes sure this process can write there, before any work.
    """
    if output not in (None, "folder"):
        raise ValueError(f"output={output!r}: expected None or 'folder'")
    spec = _Spec(
        help=help,
        choices=tuple(choices) if choices is not None else None,
        minimum=minimum,
        maximum=maximum,
        below=below,
        output=output,
    )
    if default is REQUIRED:
        return dataclasses.field(metadata={_META: spec})
    return dataclasses.field(default=default, metadata={_META: spec})


@dataclasses.dataclass(kw_only=True)
class Options:
    """Base of every script's options. `given`: the names of the flags given on the
    command line (filled by `from_flags`; empty when built in Python)."""

    given: frozenset = dataclasses.field(
        default=frozenset(), repr=False, compare=False, metadata={_META: _Spec(help="", flag=False)}
    )


def _flag_fields(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META)
        if spec is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with options.option()")
        if spec.flag:
            yield f, spec, hints[f.name]


def _base_type(annotation):
    """(type, optional) of an annotation such as `int`, `str | None`, `tuple[str, ...]`."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0]
    if typing.get_origin(annotation) in (tuple, list):
        return tuple, optional
    return annotation, optional


def define_flags(cls, flag_values=None, module_name=None) -> None:
    """Defines one absl flag per field of `cls` (required fields are marked required).

    module_name: the module the flags belong to in `--help` (default: the main
    script, whose flags `--help` lists).
    """
    from absl import flags

    values = flag_values if flag_values is not None else flags.FLAGS
    module_name = module_name or sys.argv[0]
    for f, spec, annotation in _flag_fields(cls):
        kind, _ = _base_type(annotation)
        default = None if f.default is REQUIRED else f.default
        kwargs = dict(flag_values=values, module_name=module_name)
        if kind is bool:
            flags.DEFINE_bool(f.name, default, spec.help, **kwargs)
        elif kind is str and spec.choices:
            flags.DEFINE_enum(f.name, default, list(spec.choices), spec.help, **kwargs)
        elif kind in _parsers():
            parser, serializer = _parsers()[kind]()
            if kind is tuple and default is not None:
                default = list(default)
            flags.DEFINE(parser, f.name, default, spec.help, serializer=serializer, **kwargs)
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no flag type for {annotation!r}")
        if f.default is REQUIRED:
            flags.mark_flag_as_required(f.name, flag_values=values)


def _parsers():
    from absl import flags

    return {
        int: lambda: (flags.IntegerParser(), None),
        float: lambda: (flags.FloatParser(), None),
        str: lambda: (flags.ArgumentParser(), None),
        tuple: lambda: (flags.ListParser(), flags.CsvListSerializer(",")),
    }


def from_flags(cls, flag_values=None):
    """The options filled from the parsed flags of the same names."""
    from absl import flags

    values = flag_values if flag_values is not None else flags.FLAGS
    kwargs, given = {}, set()
    for f, _, annotation in _flag_fields(cls):
        value = values[f.name].value
        if _base_type(annotation)[0] is tuple and value is not None:
            value = tuple(value)
        kwargs[f.name] = value
        if values[f.name].present:
            given.add(f.name)
    return cls(**kwargs, given=frozenset(given))


def flag_names(cls) -> list[str]:
    """The flags `define_flags(cls)` defines, in declaration order."""
    return [f.name for f, _, _ in _flag_fields(cls)]


def _describe(spec, kind):
    what = "an integer" if kind is int else "a number"
    if spec.minimum is not None and spec.maximum is not None:
        return f"{what} in [{spec.minimum}, {spec.maximum}]"
    if spec.minimum is not None and spec.below is not None:
        return f"{what} in [{spec.minimum}, {spec.below})"
    if spec.minimum is not None:
        return f"{what} >= {spec.minimum}"
    if spec.maximum is not None:
        return f"{what} <= {spec.maximum}"
    return f"{what} < {spec.below}"


def check(opts) -> None:
    """Raises UserError naming the first flag whose value is outside what it accepts."""
    for f, spec, annotation in _flag_fields(type(opts)):
        value = getattr(opts, f.name)
        kind, _ = _base_type(annotation)
        if value is None:
            if f.default is REQUIRED:
                raise UserError(f"--{f.name} is required")
            continue
        if kind is bool and not isinstance(value, bool):
            raise UserError(f"--{f.name}={value!r}: expected true or false")
        if kind in (int, float):
            number = isinstance(value, int if kind is int else (int, float))
            if isinstance(value, bool) or not number:
                raise UserError(
                    f"--{f.name}={value!r}: expected {'an integer' if kind is int else 'a number'}"
                )
            bounded = (spec.minimum, spec.maximum, spec.below) != (None, None, None)
            if bounded and (
                math.isnan(value)
                or (spec.minimum is not None and value < spec.minimum)
                or (spec.maximum is not None and value > spec.maximum)
                or (spec.below is not None and value >= spec.below)
            ):
                raise UserError(f"--{f.name}={value}: expected {_describe(spec, kind)}")
        if spec.choices and value not in spec.choices:
            raise UserError(f"--{f.name}={value!r}: expected one of {', '.join(spec.choices)}")
    for f, spec, _ in _flag_fields(type(opts)):  # the file system last: values first
        value = getattr(opts, f.name)
        if spec.output == "folder" and value:
            fileio.check_writable_folder(f.name, value)


__all__ = [
    "REQUIRED",
    "Options",
    "option",
    "define_flags",
    "from_flags",
    "flag_names",
    "check",
]
