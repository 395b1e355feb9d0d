"""Copy-on-write forks of a tau2 domain database.

A tau2 database (`RetailDB`, `FlightDB`) is a pydantic model whose fields are tables: dicts from
an id to a record (a user, an order, a flight). tau2's tools reach every record they change
through a keyed lookup (`db.orders[order_id]`, `db.users[user_id]`) and only read the records they
iterate over (`db.users.items()` to find a user by email). A fork therefore shares every record
with the base database and gives the episode its own deep copy of a record the first time the
record is looked up by key. Forking costs a shallow copy of each table's index, not a deep copy
of the database, and the records an episode looked up are exactly the ones it may have changed.

The underlying dict storage of a `CowTable` always holds the fork's current records (shared
ones for records never looked up), so pydantic serialises a fork exactly like an ordinary copy:
tau2's own `get_db_hash` on a fork equals its hash on a deep copy with the same changes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any


class _Missing:
    """The marker of a record that is not in a table (picklable, and a singleton)."""

    def __reduce__(self) -> str:
        return "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class CowTable(dict):
    """A table of a forked database: records are copied from the base on first keyed access."""

    __slots__ = ("_base", "_touched")

    def __init__(self, base: Mapping[str, Any]) -> None:
        super().__init__(base)
        self._base = base
        self._touched: set[str] = set()

    def _own(self, key: str) -> None:
        if key not in self._touched:
            self._touched.add(key)
            if dict.__contains__(self, key):
                dict.__setitem__(self, key, copy.deepcopy(dict.__getitem__(self, key)))

    def __getitem__(self, key: str) -> Any:
        self._own(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            return default
        return self[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._touched.add(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        self._touched.add(key)
        dict.__delitem__(self, key)

    def pop(self, key: str, *default: Any) -> Any:
        self._touched.add(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, Any]:
        key, value = dict.popitem(self)
        self._touched.add(key)
        return key, value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self[key]
        self[key] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        self._touched.update(dict.keys(self))
        dict.clear(self)

    def __ior__(self, other: Any) -> CowTable:
        self.update(other)
        return self

    @property
    def touched(self) -> frozenset[str]:
        """Keys looked up, set or deleted since the fork (a superset of the keys whose record changed)."""
        return frozenset(self._touched)

    def current(self, key: str) -> Any:
        """The fork's record for `key` (or `MISSING`), without copying it."""
        return dict.get(self, key, MISSING)

    def __deepcopy__(self, memo: dict[int, Any]) -> CowTable:
        # The base is immutable and shared; only the records this fork owns are copied.
        clone = CowTable(self._base)
        for key in self._touched:
            value = dict.get(self, key, MISSING)
            if value is MISSING:
                dict.pop(clone, key, None)
            else:
                dict.__setitem__(clone, key, copy.deepcopy(value, memo))
        clone._touched = set(self._touched)
        return clone

    def __reduce__(self) -> Any:
        owned = {key: dict.get(self, key, MISSING) for key in self._touched}
        return (_rebuild_table, (dict(self._base), owned, set(self._touched)))


def _rebuild_table(base: dict[str, Any], owned: dict[str, Any], keys: set[str]) -> CowTable:
    table = CowTable(base)
    for key, value in owned.items():
        if value is MISSING:
            dict.pop(table, key, None)
        else:
            dict.__setitem__(table, key, value)
    table._touched = keys
    return table


def table_names(db: Any) -> tuple[str, ...]:
    """The fields of a tau2 database that are tables (dicts of records)."""
    return tuple(name for name in type(db).model_fields if isinstance(getattr(db, name), dict))


def fork(base: Any) -> Any:
    """A copy-on-write fork of the tau2 database `base` (which is never modified through it)."""
    fields: dict[str, Any] = {}
    for name in type(base).model_fields:
        value = getattr(base, name)
        fields[name] = CowTable(value) if isinstance(value, dict) else copy.deepcopy(value)
    return type(base).model_construct(_fields_set=set(base.model_fields_set), **fields)


def touched(db: Any) -> dict[str, frozenset[str]]:
    """Per table, the keys a fork looked up or changed."""
    return {name: value.touched for name, value in vars(db).items() if isinstance(value, CowTable)}


def record_json(record: Any) -> str | None:
    """A record serialised exactly as tau2's database hash serialises it (None for a missing record)."""
    if record is MISSING:
        return None
    data = record.model_dump() if hasattr(record, "model_dump") else record
    return json.dumps(data, sort_keys=True, default=str)


def other_fields_json(db: Any) -> str:
    """The fields of a database that are not tables, serialised (empty for the retail and airline DBs)."""
    dumped = {name: getattr(db, name) for name in type(db).model_fields if not isinstance(getattr(db, name), CowTable)}
    return json.dumps({k: record_json(v) for k, v in dumped.items()}, sort_keys=True)


def changed_records(db: Any, keys: Mapping[str, Iterable[str]] | None = None) -> dict[tuple[str, str], str | None]:
    """The serialised current records of a fork for `keys` (default: every touched key)."""
    keys = touched(db) if keys is None else keys
    out: dict[tuple[str, str], str | None] = {}
    for table, table_keys in keys.items():
        current = getattr(db, table)
        for key in table_keys:
            out[(table, key)] = record_json(current.current(key))
    return out
