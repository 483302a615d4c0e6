"""Name -> class registries for the pluggable parts (scorers, selection signals)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .errors import ReContextError

T = TypeVar("T")
C = TypeVar("C", bound=type[Any])


class Registry(dict[str, type[T]], Generic[T]):
    """Classes by name: :meth:`register` is a class decorator, :meth:`lookup` a checked ``[]``."""

    def __init__(self, kind: str, base: type) -> None:  # plain ``type``: the base may be abstract
        super().__init__()
        self.kind, self.base = kind, base

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator: register a subclass of the base under ``name`` (taken only once); the class's
        ``name`` attribute is set to it."""

        def register(cls: C) -> C:
            if name in self:
                raise ReContextError(
                    f"a {self.kind} named {name!r} is already registered ({self[name].__name__})"
                )
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise ReContextError(f"{cls!r} is not a {self.base.__name__} subclass")
            registered: Any = cls
            registered.name = name
            self[name] = registered
            return registered

        return register

    def lookup(self, name: str) -> type[T]:
        """The class registered under ``name``; an unknown name is one clear error."""
        try:
            return self[name]
        except KeyError:
            raise ReContextError(f"unknown {self.kind} {name!r}; choose from {', '.join(self)}") from None
