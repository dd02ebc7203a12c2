"""The operator's RBAC is exactly what its code uses.

1. config/rbac holds what ``hack/gen-rbac`` generates from kaiwo_ctrl/rbac.py.
2. A static scan of kaiwo_ctrl/ (``ast``) finds every API call the operator
   makes: ``<...client>.get/get_or_none/list/list_all/create/replace/
   replace_status/patch/patch_status/apply/apply_status/delete/watch(RES, ...)``
   and every informer (``<...cache>.informer(RES)`` / ``Informer(client, RES)``,
   list + watch). ``RES`` is resolved to a :class:`Resource` by importing the
   module and evaluating the expression against its globals; a local variable
   is followed to its assignments or to the ``for`` of the comprehension that
   binds it, and a subscript of a module-level mapping stands for all of its
   values, a parameter is followed to the calls of its function in the same
   module, and ``self.attr`` to the assignments of ``self.attr`` in its class.
   Every found (group, resource, verb) must be granted, and every
   granted one must be found. A call whose resource cannot be resolved fails
   the test (so nothing slips through unseen).

The e2e suite is the dynamic counterpart: it runs the operator as the
ServiceAccount of config/default and requires no 403 in its log.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from kaiwo_ctrl import rbac
from kaiwo_ctrl.runtime.api.client import Resource

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kaiwo_ctrl"

#: Not part of the running operator: the download Job's program (its own
#: clients, no Kubernetes API), the local control plane (admin tooling), the
#: generators and this module.
# kaiwo_cli/ is the users' command line: it runs with their credentials, not the operator's role.
EXCLUDED = ("download/", "local/", "kaiwo_cli/", "rbac.py", "__main__.py")
#: Generic implementations whose resource is a parameter; their verbs are
#: accounted for where they are used (informer registrations, Manager wiring).
GENERIC = {
    "runtime/api/client.py",  # the client itself
    "runtime/cache/informer.py",  # list/watch of ``self.resource``: counted at every informer() call
    "runtime/cache/cache.py",  # builds Informers for the resources callers ask for
}

CLIENT_VERBS = {
    "get": ("get", None),
    "get_or_none": ("get", None),
    "list": ("list", None),
    "list_all": ("list", None),
    "list_pages": ("list", None),
    "list_stream": ("list", None),
    "watch": ("watch", None),
    "create": ("create", None),
    "replace": ("update", None),
    "replace_status": ("update", "status"),
    "patch": ("patch", None),
    "patch_status": ("patch", "status"),
    "apply": ("patch", None),
    "apply_status": ("patch", "status"),
    "delete": ("delete", None),
}


@dataclass(frozen=True)
class Use:
    group: str
    resource: str
    verb: str
    where: str


class Unresolved(Exception):
    pass


def _receiver_name(node: ast.expr) -> str:
    """``self.client`` -> ``client``; ``mgr.cache`` -> ``cache``; ``client`` -> ``client``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _resources_in(value: object) -> list[Resource]:
    if isinstance(value, Resource):
        return [value]
    if isinstance(value, Mapping):
        return [v for v in value.values() if isinstance(v, Resource)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [v for v in value if isinstance(v, Resource)]
    return []


class Resolver:
    def __init__(self, module, tree: ast.AST) -> None:
        self.globals = vars(module)
        self.tree = tree
        self.parents = _parents(tree)

    def eval(self, node: ast.expr) -> object:
        return eval(compile(ast.Expression(node), "<rbac-scan>", "eval"), dict(self.globals))  # own source only

    def resolve(self, node: ast.expr, depth: int = 0) -> list[Resource]:
        if depth > 5:
            raise Unresolved(ast.unparse(node))
        try:
            found = _resources_in(self.eval(node))
            if found:
                return found
        except Exception:  # noqa: BLE001 - not evaluable at module level: follow locals below
            pass
        if isinstance(node, ast.Subscript):
            # MAPPING[k] with k looping over a constant -> those entries; otherwise every value
            keys = self._loop_constant(node.slice)
            if keys is not None:
                try:
                    mapping = self.eval(node.value)
                    return [r for k in keys for r in _resources_in(mapping[k])]
                except Exception:  # noqa: BLE001 - fall back to every value
                    pass
            return self.resolve(node.value, depth + 1)
        if isinstance(node, ast.IfExp):
            return self.resolve(node.body, depth + 1) + self.resolve(node.orelse, depth + 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("values", "items"):
            return self.resolve(node.func.value, depth + 1)
        if isinstance(node, ast.Name):
            return self._resolve_local(node, depth)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return self._resolve_self_attr(node, depth)
        raise Unresolved(ast.unparse(node))

    def _loop_constant(self, key: ast.expr) -> list | None:
        """Values of ``key`` when it is the variable of ``for key in CONSTANT`` around it."""
        if not isinstance(key, ast.Name):
            return None
        scope = self.parents.get(key)
        while scope is not None:
            if isinstance(scope, (ast.For, ast.AsyncFor)) and isinstance(scope.target, ast.Name) and scope.target.id == key.id:
                try:
                    values = self.eval(scope.iter)
                except Exception:  # noqa: BLE001 - not a module-level constant
                    return None
                return list(values) if isinstance(values, (tuple, list, frozenset, set)) else None
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return None
            scope = self.parents.get(scope)
        return None

    def _enclosing(self, node: ast.AST, types) -> ast.AST | None:
        scope = self.parents.get(node)
        while scope is not None and not isinstance(scope, types):
            scope = self.parents.get(scope)
        return scope

    def _resolve_self_attr(self, node: ast.Attribute, depth: int) -> list[Resource]:
        cls = self._enclosing(node, ast.ClassDef)
        if cls is None:
            raise Unresolved(ast.unparse(node))
        found: list[Resource] = []
        for n in ast.walk(cls):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and t.attr == node.attr:
                        found += self.resolve(n.value, depth + 1)
        if not found:
            raise Unresolved(ast.unparse(node))
        return found

    def _resolve_parameter(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, depth: int) -> list[Resource] | None:
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        kwonly = [a.arg for a in fn.args.kwonlyargs]
        if name not in params and name not in kwonly:
            return None
        index = params.index(name) if name in params else None
        if index is not None and params and params[0] == "self":
            index -= 1
        calls = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Call)
            and (
                (isinstance(n.func, ast.Name) and n.func.id == fn.name)
                or (isinstance(n.func, ast.Attribute) and n.func.attr == fn.name and _receiver_name(n.func.value) == "self")
            )
        ]
        if not calls:
            raise Unresolved(f"{name}: parameter of {fn.name}, which is not called in this module")
        found: list[Resource] = []
        for call in calls:
            arg = next((kw.value for kw in call.keywords if kw.arg == name), None)
            if arg is None and index is not None and index < len(call.args):
                arg = call.args[index]
            if arg is None:
                raise Unresolved(f"{name}: not passed at line {call.lineno}")
            found += self.resolve(arg, depth + 1)
        return found

    def _resolve_local(self, name: ast.Name, depth: int) -> list[Resource]:
        scope = self.parents.get(name)
        while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            # a comprehension that binds the name: ``for kind, res in MAPPING.items()``
            if isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                for gen in scope.generators:
                    bound = self._bound_by_target(gen.target, gen.iter, name.id, depth)
                    if bound is not None:
                        return bound
            scope = self.parents.get(scope)
        if scope is None:
            raise Unresolved(name.id)
        if not isinstance(scope, ast.Lambda):
            from_calls = self._resolve_parameter(scope, name.id, depth)
            if from_calls is not None:
                return from_calls
        found: list[Resource] = []
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets):
                found += self.resolve(node.value, depth + 1)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name.id and node.value:
                found += self.resolve(node.value, depth + 1)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bound = self._bound_by_target(node.target, node.iter, name.id, depth)
                if bound is not None:
                    found += bound
        if not found:
            raise Unresolved(f"{name.id} (a parameter or a value computed at run time)")
        return found

    def _bound_by_target(self, target: ast.expr, it: ast.expr, name: str, depth: int) -> list[Resource] | None:
        if isinstance(target, ast.Name) and target.id == name:
            return self.resolve(it, depth + 1)
        if isinstance(target, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in target.elts):
            # ``for k, v in X.items()`` or ``for k, v in LIST_OF_PAIRS``: the Resources among X's values/items
            source = it.func.value if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) else it
            value = self.eval(source)
            if isinstance(value, Mapping):
                return _resources_in(value)
            return [r for item in value for r in _resources_in(item)]
        return None


def _subresource(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "subresource":
            if isinstance(kw.value, ast.Constant):
                return kw.value.value
            raise Unresolved(f"subresource={ast.unparse(kw.value)}")
    return None


def scan_file(path: Path) -> Iterator[Use | tuple[str, str]]:
    """Uses found in one file; ``(where, expression)`` for calls that could not be resolved."""
    rel = path.relative_to(PKG).as_posix()
    mod_name = "kaiwo_ctrl." + rel[:-3].replace("/", ".").removesuffix(".__init__")
    module = importlib.import_module(mod_name)
    tree = ast.parse(path.read_text(), str(path))
    res = Resolver(module, tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        where = f"kaiwo_ctrl/{rel}:{node.lineno}"
        func = node.func
        verbs: list[tuple[str, str | None]] = []
        arg: ast.expr | None = None
        if isinstance(func, ast.Attribute) and func.attr in CLIENT_VERBS and "client" in _receiver_name(func.value).lower():
            verb, sub = CLIENT_VERBS[func.attr]
            if node.args:
                arg = node.args[0]
            try:
                sub = sub or _subresource(node)
            except Unresolved as e:
                yield (where, str(e))
                continue
            verbs = [(verb, sub)]
            if func.attr == "apply" and sub is None:
                verbs.append(("create", None))  # applying a missing object creates it
        elif isinstance(func, ast.Attribute) and func.attr == "informer" and "cache" in _receiver_name(func.value).lower():
            arg = node.args[0] if node.args else None
            verbs = [("list", None), ("watch", None)]
        elif isinstance(func, ast.Name) and func.id == "Informer" and len(node.args) >= 2:
            arg = node.args[1]
            verbs = [("list", None), ("watch", None)]
        else:
            continue
        if rel in GENERIC:
            continue
        if arg is None:
            yield (where, ast.unparse(node))
            continue
        if func.attr == "request" if isinstance(func, ast.Attribute) else False:
            continue
        try:
            resources = res.resolve(arg)
        except Unresolved as e:
            yield (where, str(e))
            continue
        for r in resources:
            for verb, sub in verbs:
                yield Use(r.group, f"{r.plural}/{sub}" if sub else r.plural, verb, where)


def scan() -> tuple[list[Use], list[tuple[str, str]], list[str]]:
    uses: list[Use] = []
    unresolved: list[tuple[str, str]] = []
    raw_requests: list[str] = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if any(rel.startswith(x) for x in EXCLUDED):
            continue
        text = path.read_text()
        for item in scan_file(path):
            (uses if isinstance(item, Use) else unresolved).append(item)
        if rel not in GENERIC:
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "request"
                    and "client" in _receiver_name(node.func.value).lower()
                ):
                    raw_requests.append(f"kaiwo_ctrl/{rel}:{node.lineno} {ast.unparse(node)[:120]}")
    return uses, unresolved, raw_requests


@pytest.fixture(scope="module")
def scanned():
    return scan()


def all_rules():
    return rbac.CLUSTER_RULES + rbac.LEADER_ELECTION_RULES


def test_config_rbac_is_generated():
    for name, text in rbac.generated_files().items():
        path = ROOT / "config" / "rbac" / name
        assert path.exists(), f"{path} missing: run ./hack/gen-rbac"
        assert path.read_text() == text, f"{path} is stale: run ./hack/gen-rbac"


def test_every_call_is_resolved(scanned):
    _, unresolved, _ = scanned
    assert not unresolved, "client calls whose resource the scan cannot tell:\n" + "\n".join(f"  {w}: {e}" for w, e in unresolved)


def test_only_discovery_uses_raw_requests(scanned):
    """Raw ``client.request`` bypasses the scan; only API discovery (no RBAC resource) may use it."""
    _, _, raw = scanned
    assert raw == [r for r in raw if r.startswith("kaiwo_ctrl/runtime/api/resources.py")], raw


def test_the_scan_sees_the_operator(scanned):
    """Guards the scanner itself: the calls every run makes must be among the findings."""
    uses, _, _ = scanned
    found = {(u.group, u.resource, u.verb) for u in uses}
    for expected in [
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("config.kaiwo.silogen.ai", "kaiwoconfigs", "create"),
        ("", "nodes", "watch"),
        ("kaiwo.silogen.ai", "kaiwoqueueconfigs", "list"),
    ]:
        assert expected in found, expected


def test_every_used_permission_is_granted(scanned):
    uses, _, _ = scanned
    granted = rbac.granted(all_rules())
    missing: dict[tuple[str, str, str], list[str]] = {}
    for u in uses:
        if (u.group, u.resource, u.verb) not in granted:
            missing.setdefault((u.group, u.resource, u.verb), []).append(u.where)
    assert not missing, "used but not granted (add to kaiwo_ctrl/rbac.py, run hack/gen-rbac):\n" + "\n".join(
        f"  {g or 'core'} {r} {v}: {', '.join(w[:3])}" for (g, r, v), w in sorted(missing.items())
    )


def test_every_granted_permission_is_used(scanned):
    uses, _, _ = scanned
    used = {(u.group, u.resource, u.verb) for u in uses}
    unused = []
    for rule in all_rules():
        if rule.resource.endswith("/finalizers"):
            continue  # checked against owner references below
        for verb in rule.verbs:
            if (rule.group, rule.resource, verb) not in used:
                unused.append(f"{rule.group or 'core'} {rule.resource} {verb}")
    assert not unused, "granted but never used (remove from kaiwo_ctrl/rbac.py):\n  " + "\n  ".join(unused)


def test_finalizer_rules_are_backed_by_owner_references():
    """``<kind>/finalizers: update`` is needed to set blockOwnerDeletion on an
    owner reference to ``<kind>`` (OwnerReferencesPermissionEnforcement)."""
    for rule in all_rules():
        if not rule.resource.endswith("/finalizers"):
            continue
        assert rule.verbs == ("update",), rule
        assert rule.evidence, f"{rule.resource}: name the code that sets blockOwnerDeletion"
        for file, text in rule.evidence:
            assert text in (ROOT / file).read_text(), f"{rule.resource}: {text!r} not in {file}"


def test_no_duplicate_rules():
    for rules in (rbac.CLUSTER_RULES, rbac.LEADER_ELECTION_RULES):
        keys = [(r.group, r.resource) for r in rules]
        assert len(keys) == len(set(keys)), keys


def test_generated_role_has_no_wildcards():
    for doc in (rbac.cluster_role(), rbac.leader_election_role()):
        for rule in doc["rules"]:
            assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"]


def test_lease_rules_are_scoped_to_the_lease_name():
    from kaiwo_ctrl.cli import build_parser

    args = build_parser().parse_args(["run"])
    assert args.leader_election_id == rbac.LEADER_ELECTION_ID
    lease_rules = [r for r in rbac.leader_election_role()["rules"] if r["resources"] == ["leases"]]
    assert lease_rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [rbac.LEADER_ELECTION_ID],
         "verbs": ["get", "update"]},
    ]


#: The code `kaiwo-ctrl proxy` runs that calls the API server: the HTTP front and its routing, the
#: route key (aim/fence.py), the secure metrics' reviews and the namespace check before the key is made.
PROXY_CODE = ("serving/proxy/", "serving/routing/", "aim/fence.py", "runtime/observe/metricsauth.py", "runtime/api/resources.py",
              "runtime/observe/events.py")  # the recorder writes the fair queue's saturation Events (serving/routing/fairevents.py)


def test_proxy_role_is_exactly_what_the_proxy_code_uses():
    """The proxy's own ServiceAccount (config/default's kaiwo-proxy Deployment) is granted what
    the proxy's code uses and nothing else; e2e/test_deploy.py runs it as that account (no 403)."""
    uses = [u for path in sorted(PKG.rglob("*.py")) if path.relative_to(PKG).as_posix().startswith(PROXY_CODE)
            for u in scan_file(path)]
    assert not [u for u in uses if not isinstance(u, Use)], "unresolved calls in the proxy's code"
    used = {(u.group, u.resource, u.verb) for u in uses if isinstance(u, Use)}
    granted = rbac.granted(rbac.PROXY_CLUSTER_RULES + rbac.PROXY_NAMESPACE_RULES)
    assert used == granted, f"used, not granted: {sorted(used - granted)}; granted, not used: {sorted(granted - used)}"
    # secrets only in the operator's namespace (the Role), read only by the route key's name
    assert not [r for r in rbac.PROXY_CLUSTER_RULES if r.resource == "secrets"]
    from kaiwo_ctrl.aim.fence import KEY_SECRET

    (secret_rule,) = rbac.PROXY_NAMESPACE_RULES
    assert secret_rule.resource_names == (KEY_SECRET,)
