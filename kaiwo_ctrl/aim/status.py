"""The status of an AIMNamespaceConfig (pure).

Conditions:

* ``Conflict``: True on every config but the oldest in its namespace (reason
  ``Conflict``, naming the one in force); False on the one in force.
* ``GatewayFound``: the Gateway named by ``spec.gateway`` exists. False with
  ``NotConfigured`` when no gateway is set (Models are then not exposed).
* ``RoutesAccepted``: every route's ``status.parents[]`` entry for the Gateway
  says Accepted=True. False names the refused routes; Unknown names the routes
  no gateway controller has reported on yet.
* ``Ready``: in force, and (no gateway set, or gateway found and every route accepted).
  False with ``InvalidSpec`` naming the field when the spec fails
  :mod:`.validation` (the admission webhook's checks, for a config that got
  past a stopped webhook).

A config in conflict only carries ``Ready`` and ``Conflict``: nothing else of
it applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kaiwo_ctrl.runtime.observe.conditions import bound_message, find_condition, remove_condition, set_condition

from .routes import names_list, not_accepted

READY, GATEWAY_FOUND, ROUTES_ACCEPTED, CONFLICT = "Ready", "GatewayFound", "RoutesAccepted", "Conflict"


@dataclass(frozen=True)
class Observed:
    """What the controller saw for one config."""

    generation: int = 0
    in_force_name: str = ""  # the effective config of the namespace ("" if none)
    gateway: tuple[str, str] | None = None  # (namespace, name) when spec.gateway is set
    gateway_exists: bool = False
    routes: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    taken: tuple[str, ...] = ()  # route names held by HTTPRoutes kaiwo-ctrl did not make
    models: int = 0
    workloads: int = 0
    spec_error: str = ""  # the first spec validation error, naming its field


def _conditions(name: str, seen: Observed) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) for every condition the config should carry."""
    out = _observed_conditions(name, seen)
    if seen.spec_error:
        out = [c for c in out if c[0] != READY] + [(READY, "False", "InvalidSpec", bound_message(seen.spec_error))]
    return out


def _observed_conditions(name: str, seen: Observed) -> list[tuple[str, str, str, str]]:
    if seen.in_force_name and seen.in_force_name != name:
        msg = f"AIMNamespaceConfig {seen.in_force_name} is older and in force in this namespace; this one is ignored"
        return [(CONFLICT, "True", "Conflict", msg), (READY, "False", "Conflict", msg)]
    out = [(CONFLICT, "False", "InForce", "this is the namespace's only or oldest AIMNamespaceConfig")]
    if seen.gateway is None:
        out.append((GATEWAY_FOUND, "False", "NotConfigured", "spec.gateway.name is not set: Models are not exposed"))
        out.append((ROUTES_ACCEPTED, "True", "NoRoutes", "no gateway, no routes"))
        out.append((READY, "True", "Ready", "credentials and image pull secrets apply; no gateway exposure"))
        return out
    gw = f"{seen.gateway[0]}/{seen.gateway[1]}"
    if not seen.gateway_exists:
        msg = f"spec.gateway: Gateway {gw} not found"
        out.append((GATEWAY_FOUND, "False", "GatewayNotFound", msg))
    else:
        out.append((GATEWAY_FOUND, "True", "Found", f"Gateway {gw} exists"))
    refused, waiting = not_accepted(seen.routes, seen.gateway)
    if seen.taken:
        taken = sorted(seen.taken)
        msg = f"HTTPRoute name(s) already used by routes kaiwo-ctrl did not make: {names_list(taken)}"
        routes = (ROUTES_ACCEPTED, "False", "RouteNameTaken", msg)
        refused = refused + taken
    elif refused:
        routes = (ROUTES_ACCEPTED, "False", "NotAccepted", f"not accepted by {gw}: {names_list(refused)}")
    elif waiting:
        routes = (ROUTES_ACCEPTED, "Unknown", "Pending", f"no verdict from {gw} yet: {names_list(waiting)}")
    elif seen.routes:
        routes = (ROUTES_ACCEPTED, "True", "Accepted", f"{len(seen.routes)} route(s) accepted by {gw}")
    else:
        routes = (ROUTES_ACCEPTED, "True", "NoRoutes", "no Models in the namespace")
    out.append(routes)
    if not seen.gateway_exists:
        out.append((READY, "False", "GatewayNotFound", f"spec.gateway: Gateway {gw} not found"))
    elif routes[1] != "True":
        out.append((READY, "False", "RoutesNotAccepted" if refused else "RoutesPending", routes[3]))
    else:
        out.append((READY, "True", "Ready", f"Models exposed through {gw}"))
    return out


def desired_status(name: str, stored: Mapping[str, Any] | None, seen: Observed, now: datetime) -> dict[str, Any]:
    """The status to write; equal to ``stored`` when nothing changed (the
    transition times of unchanged conditions are kept)."""
    stored = dict(stored or {})
    conditions = [dict(c) for c in stored.get("conditions") or ()]
    wanted = _conditions(name, seen)
    for type_, status, reason, message in wanted:
        set_condition(conditions, type_, status, reason, message, seen.generation, now)
    for type_ in (GATEWAY_FOUND, ROUTES_ACCEPTED):
        if not any(w[0] == type_ for w in wanted):
            remove_condition(conditions, type_)
    order = {t: i for i, t in enumerate((READY, GATEWAY_FOUND, ROUTES_ACCEPTED, CONFLICT))}
    conditions.sort(key=lambda c: order.get(str(c.get("type")), 99))
    in_force = not (seen.in_force_name and seen.in_force_name != name)
    return {
        "conditions": conditions,
        "observedGeneration": seen.generation,
        "models": seen.models if in_force else 0,
        "workloads": seen.workloads if in_force else 0,
        "routes": len(seen.routes) if in_force else 0,
    }


def ready(status: Mapping[str, Any] | None) -> bool:
    cond = find_condition((status or {}).get("conditions"), READY)
    return bool(cond and cond.get("status") == "True")
