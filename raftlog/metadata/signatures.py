"""The argument checks of metadata commands (state.py's rule: a command's arguments are checked
against its handler's annotations before it runs).

`Signature` reads a `_cmd_*` handler's parameter names, defaults and annotations once; `check`
refuses a malformed argument dict with InvalidRequestError naming the argument, its expected
type and what came. The types commands use: int (never bool), str, bool, None, unions, list[X]
(a tuple is accepted: msgpack and pickle may give either), dict[K, V] and Any.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn

from raftlog.errors import InvalidRequestError


def is_int(value: object) -> bool:
    return type(value) is int  # not bool, and not an int subclass with its own pickling


SEQUENCE_TYPES = (list, tuple)


def checker(tp: Any) -> Callable[[Any], bool]:
    """A predicate for values of the annotation `tp` (the few types commands use)."""
    if tp is Any:
        return lambda v: True
    if tp is int:
        return is_int
    if tp in (str, bool):
        return lambda v: type(v) is tp
    if tp is type(None):
        return lambda v: v is None
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        options = [checker(a) for a in targs]
        return lambda v: any(c(v) for c in options)
    if origin is list:
        item = checker(targs[0])
        if targs[0] is Any:
            return lambda v: type(v) in SEQUENCE_TYPES
        return lambda v: type(v) in SEQUENCE_TYPES and all(item(x) for x in v)
    if origin is dict:
        key, value = checker(targs[0]), checker(targs[1])
        return lambda v: type(v) is dict and all(key(k) and value(x) for k, x in v.items())
    raise TypeError(f"metadata command arguments cannot be annotated {tp!r}")


class Signature:
    """The argument names and types of one `_cmd_*` handler, from its annotations."""

    def __init__(self, name: str, handler: Callable[..., Any]):
        self.name = name
        hints = typing.get_type_hints(handler)
        defaults = handler.__defaults__ or ()
        code = handler.__code__
        params = code.co_varnames[1 : code.co_argcount]  # without self
        self.required = frozenset(params[: len(params) - len(defaults)])
        self.params = {p: (checker(hints[p]), str(hints[p])) for p in params}
        # The fast path (every argument given, as proposers do): plain types are compared with
        # type() in the loop; only containers and unions need a call.
        self._all = frozenset(params)
        self._fast = tuple(
            (p, hints[p] if hints[p] in (int, str, bool) else None, self.params[p][0])
            for p in params
        )

    def check(self, args: object) -> None:
        if type(args) is not dict:
            raise InvalidRequestError(
                f"malformed metadata command {self.name}: arguments must be a dict, got "
                f"{args!r:.200}"
            )
        if args.keys() == self._all:
            for arg, plain, ok in self._fast:
                value = args[arg]
                if (type(value) is not plain) if plain is not None else not ok(value):
                    self._refuse(args)
            return
        params = self.params
        for arg, value in args.items():
            check = params.get(arg)
            if check is None or not check[0](value):
                self._refuse(args)
        if not self.required <= args.keys():
            self._refuse(args)

    def _refuse(self, args: dict[Any, Any]) -> NoReturn:
        """Raise the refusal that names what is wrong with `args` (the slow path)."""
        missing = sorted(self.required - args.keys())
        extra = sorted(str(a) for a in args.keys() - self.params.keys())
        if missing or extra:
            raise InvalidRequestError(
                f"malformed metadata command {self.name}: missing arguments {missing}, "
                f"unexpected arguments {extra}"
            )
        for arg, value in args.items():
            ok, type_name = self.params[arg]
            if not ok(value):
                raise InvalidRequestError(
                    f"malformed metadata command {self.name}: {arg} must be {type_name}, got "
                    f"{value!r:.200}"
                )
        raise AssertionError(f"{self.name}: refusing arguments that pass every check: {args!r}")
