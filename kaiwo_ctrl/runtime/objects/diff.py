"""The one object diff: does an existing object already hold what we want?

``differences(existing, desired)`` lists the dotted paths where ``existing``
lacks something ``desired`` sets; ``contains`` answers the same question
without the paths. Both follow one set of rules:

* Mappings: every key ``desired`` sets must match; keys only ``existing`` has
  (server defaults, other controllers' additions) are ignored. A ``None``
  value, an empty mapping or an empty list in ``desired`` asks for nothing.
* A value a cache keeps packed (:mod:`.packed`) is compared as the value it
  holds.
* Lists of named mappings (every item has ``name``: containers, env,
  volumes, ports) are matched by name, and the names must be
  the same on both sides in the same order (the list is ours whole: an item
  removed from the spec, or a reordering, is a difference). When a name
  repeats, the last item of that name counts (as the API server's merge
  does), so duplicate env names never make a permanent difference. Paths
  name the item: ``containers[main].image``.
* Other lists of mappings (tolerations, ...): every desired item must be
  contained in some existing item; others may add their own (an admission
  controller may add tolerations). Paths give the desired index.
* Lists of scalars (command, args): same length, item by item.
* Scalars: equal, with booleans never equal to numbers. Strings and numbers
  are compared as quantities (``"1000m" == "1"``, ``"1Gi" == "1024Mi"``)
  only where the schema says quantity: values of a resource list (under
  ``limits``, ``requests``, ``capacity``, ``allocatable``, ``hard``,
  ``overhead``) and the keys of ``quantity_keys`` (by default the core
  kinds' ``cpu``, ``memory``, ``storage``, ``ephemeral-storage`` and
  ``sizeLimit``; a caller comparing another API's objects passes its own
  set). Anywhere else ``"1000"`` and ``"1k"`` differ (an env value edited
  from one to the other is applied).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.packed import Packed, unpack
from kaiwo_ctrl.runtime.objects.quantity import parse_quantity

__all__ = ["QUANTITY_KEYS", "contains", "differences"]

_RESOURCE_LISTS = frozenset({"limits", "requests", "capacity", "allocatable", "hard", "overhead"})
#: Keys whose values are quantities wherever they appear in the core kinds.
QUANTITY_KEYS = frozenset({"cpu", "memory", "storage", "ephemeral-storage", "sizeLimit"})

def _is_quantity_key(parent: str, key: str, qkeys: frozenset[str]) -> bool:
    return parent in _RESOURCE_LISTS or key in qkeys


def _scalar_equal(a: Any, d: Any, quantity: bool) -> bool:
    if isinstance(a, bool) or isinstance(d, bool):
        return type(a) is type(d) and a == d
    if a == d:
        return True
    if quantity and isinstance(a, (str, int, float)) and isinstance(d, (str, int, float)):
        try:
            return bool(parse_quantity(a) == parse_quantity(d))
        except ValueError:
            return False
    return False


def _empty(v: Any) -> bool:
    return v is None or v == {} or v == []


def _named(items: list) -> bool:
    return bool(items) and all(isinstance(i, Mapping) and "name" in i for i in items)


def _walk(a: Any, d: Any, path: str, key: str, parent: str, out: list[str] | None, qkeys: frozenset[str]) -> bool:
    """True when ``a`` contains ``d``; appends differing paths to ``out`` (when
    given) and stops at the first difference otherwise."""
    if type(a) is Packed:  # kept packed by a cache: compare the value it holds
        a = unpack(a)
    if isinstance(d, Mapping):
        if not isinstance(a, Mapping):
            if not d and a is None:
                return True
            if out is not None:
                out.append(path or ".")
            return False
        ok = True
        for k, v in d.items():
            if v is None:
                continue
            p = f"{path}.{k}" if path else str(k)
            if k not in a:
                if _empty(v):
                    continue
                if out is None:
                    return False
                out.append(p)
                ok = False
                continue
            if not _walk(a[k], v, p, str(k), key, out, qkeys):
                ok = False
                if out is None:
                    return False
        return ok
    if isinstance(d, list):
        return _walk_list(a, d, path, key, out, qkeys)
    if _scalar_equal(a, d, _is_quantity_key(parent, key, qkeys)):
        return True
    if out is not None:
        out.append(path)
    return False


def _walk_list(a: Any, d: list, path: str, key: str, out: list[str] | None, qkeys: frozenset[str]) -> bool:
    if not isinstance(a, list):
        if not d and a is None:
            return True
        if out is not None:
            out.append(path)
        return False
    if _named(d) and all(isinstance(i, Mapping) for i in a):
        have = {i.get("name"): i for i in a}
        want = {i["name"]: i for i in d}
        ok = True
        for n, item in want.items():
            p = f"{path}[{n}]"
            other = have.get(n)
            if other is None:
                if out is None:
                    return False
                out.append(p)
                ok = False
            elif not _walk(other, item, p, key, key, out, qkeys):
                ok = False
                if out is None:
                    return False
        for n in have:
            if n not in want:
                if out is None:
                    return False
                out.append(f"{path}[{n}]")
                ok = False
        if ok and [i.get("name") for i in a] != [i["name"] for i in d]:
            if out is not None:
                out.append(path)  # same items, another order
            return False
        return ok
    if d and all(isinstance(i, Mapping) for i in d):
        ok = True
        for i, item in enumerate(d):
            if not any(_walk(other, item, "", key, key, None, qkeys) for other in a):
                if out is None:
                    return False
                out.append(f"{path}[{i}]")
                ok = False
        return ok
    if len(a) != len(d):
        if out is not None:
            out.append(path)
        return False
    for x, y in zip(a, d):
        if isinstance(y, (Mapping, list)):
            if not _walk(x, y, path, key, key, None, qkeys):
                break
        elif not _scalar_equal(x, y, False):
            break
    else:
        return True
    if out is not None:
        out.append(path)
    return False


def contains(existing: Any, desired: Any, *, quantity_keys: frozenset[str] = QUANTITY_KEYS) -> bool:
    """True when ``existing`` already holds every value ``desired`` sets."""
    return _walk(existing, desired, "", "", "", None, quantity_keys)


def differences(
    existing: Any, desired: Any, path: str = "", *, quantity_keys: frozenset[str] = QUANTITY_KEYS
) -> list[str]:
    """Dotted paths (``spec.template.spec.containers[main].image``) where
    ``existing`` lacks what ``desired`` sets; ``path`` prefixes them."""
    out: list[str] = []
    key = path.rsplit(".", 1)[-1] if path else ""
    _walk(existing, desired, path, key, "", out, quantity_keys)
    return out
