"""Typed values of JSON objects that a run stores and the JSON result contract writes (a run's manifest, what a
server's /metrics said during a level): every key a reader reads is an attribute, typed, and the object is written
back with the same keys, values and order, so the store and the JSON are unchanged by the typing.

Reading (``from_dict``) never fails: a key the type does not name, and a named key whose value has another type
(an older or foreign store), are kept whole in ``extra``, written back unchanged and never read typed. Writing
(``written``) is strict: a key the type does not name, or a value of another type, is a TypeError where it is
written, never a silent extra."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

K = TypeVar("K", bound="Keyed")

_JSON_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                             "dict": (dict,), "list": (list,)}
_TYPES: dict[type, dict[str, tuple[type, ...]]] = {}


def key_types(cls: type) -> dict[str, tuple[type, ...]]:
    """Each typed key of a Keyed class and the JSON types its value may have (an int is a float too)."""
    if cls not in _TYPES:
        _TYPES[cls] = {f.name: _JSON_TYPES[str(f.type).split("[")[0].split(" ")[0]]
                       for f in fields(cls) if f.name not in ("extra", "key_order")}
    return _TYPES[cls]


def _typed(v: Any, kinds: tuple[type, ...]) -> bool:
    return isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)


@dataclass(slots=True)
class Keyed:
    """The base: subclasses declare their keys as attributes, each ``X | None = None`` of a JSON type."""

    extra: dict[str, Any] = field(default_factory=dict)
    key_order: tuple[str, ...] = ()  # the keys as they were read or written, so to_dict writes them in that order

    @classmethod
    def from_dict(cls: type[K], d: dict[str, Any]) -> K:
        """A stored object, or one built from a foreign file's values: a missing key is None, an unknown key or one
        of another type goes to ``extra``."""
        m = cls()
        m.update(d)
        return m

    @classmethod
    def written(cls: type[K], **keys: Any) -> K:
        """An object tokenbench writes, in the order of ``keys``: each one a key this type names with a value of its
        type (or None), else a TypeError that names it (a misspelt key fails where it is written)."""
        m = cls()
        m.put(**keys)
        return m

    def put(self, **keys: Any) -> None:
        """Write ``keys`` as ``written`` does (strictly), after the keys already there, in their order."""
        types = key_types(type(self))
        name = type(self).__name__
        for k, v in keys.items():
            kinds = types.get(k)
            if kinds is None:
                raise TypeError(f"{name} has no key '{k}': add it to {name}, typed, before writing it")
            if v is not None and not _typed(v, kinds):
                raise TypeError(f"{name} key '{k}' takes {' or '.join(t.__name__ for t in kinds)}, "
                                f"not {type(v).__name__}")
        self.update(keys)

    def update(self, d: dict[str, Any]) -> None:
        """Set each key of ``d`` as ``from_dict`` reads it (typed, or kept whole in ``extra``); to_dict writes them
        after the keys already there, in ``d``'s order."""
        types = key_types(type(self))
        self.key_order = (*self.key_order, *(k for k in d if k not in self.key_order))
        for k, v in d.items():
            kinds = types.get(k)
            if kinds is None:
                self.extra[k] = v
                continue
            typed = v is not None and _typed(v, kinds)
            setattr(self, k, v if typed else None)
            if typed or v is None:
                self.extra.pop(k, None)
            else:
                self.extra[k] = v

    def to_dict(self) -> dict[str, Any]:
        """The object as stored and as the JSON contract writes it: the keys read, in their order, then any
        attribute set since."""
        types = key_types(type(self))
        out: dict[str, Any] = {}
        for k in (*self.key_order, *types, *self.extra):
            if k in out:
                continue
            v = getattr(self, k) if k in types else None
            if v is not None:
                out[k] = v
            elif k in self.extra:
                out[k] = self.extra[k]
            elif k in self.key_order:
                out[k] = None
        return out
