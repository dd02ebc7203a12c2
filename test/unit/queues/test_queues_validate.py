import pytest

from kaiwo_ctrl.queues.defaults import queue_config_spec_equivalent
from kaiwo_ctrl.queues.validate import validate


def cq(name, flavors=("f",), covered=("cpu",), **spec):
    return {
        "name": name,
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": list(covered),
                    "flavors": [
                        {"name": f, "resources": [{"name": r, "nominalQuota": 1} for r in covered]} for f in flavors
                    ],
                }
            ],
            **spec,
        },
    }


def flavor(name, **extra):
    return {"name": name, "nodeLabels": {"kaiwo/nodepool": name}, **extra}


def messages(spec):
    return [str(p) for p in validate(spec)]


def test_valid_spec_has_no_problems():
    spec = {
        "resourceFlavors": [flavor("f")],
        "clusterQueues": [cq("a", cohort="c")],
        "workloadPriorityClasses": [{"metadata": {"name": "high"}, "value": 10}],
        "topologies": [{"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}}],
    }
    assert messages(spec) == []
    assert validate(None) == [] and validate({}) == []


@pytest.mark.parametrize(
    "spec,expected",
    [
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a"), cq("b", flavors=("x",))]},
            ["spec.clusterQueues[1].spec.resourceGroups[0].flavors[0].name: "
             "flavor 'x' is not defined in spec.resourceFlavors"],
        ),
        (
            {"resourceFlavors": [flavor("f"), flavor("g"), flavor("f")]},
            ["spec.resourceFlavors[2].name: duplicate name 'f' (also at spec.resourceFlavors[0])"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a"), cq("a")]},
            ["spec.clusterQueues[1].name: duplicate name 'a' (also at spec.clusterQueues[0])"],
        ),
        (
            {"workloadPriorityClasses": [{"metadata": {"name": "p"}, "value": 1}, {"metadata": {"name": "p"}, "value": 2}]},
            ["spec.workloadPriorityClasses[1].metadata.name: duplicate name 'p' (also at spec.workloadPriorityClasses[0])"],
        ),
        (
            {"resourceFlavors": [flavor("Bad_Name")]},
            ["spec.resourceFlavors[0].name: name 'Bad_Name' is not a valid Kubernetes object name "
             "(lower-case RFC 1123 subdomain)"],
        ),
        (
            {"resourceFlavors": [{"nodeLabels": {}}]},
            ["spec.resourceFlavors[0].name: name is required"],
        ),
        (
            {"workloadPriorityClasses": [{"metadata": {"name": f"p{i}"}, "value": i} for i in range(6)]},
            ["spec.workloadPriorityClasses[5]: exceeds the limit of 5 workloadPriorityClasses; item 'p5' is ignored"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq(f"q{i}") for i in range(11)]},
            ["spec.clusterQueues[10]: exceeds the limit of 10 clusterQueues; item 'q10' is ignored"],
        ),
        (
            {"resourceFlavors": [flavor(f"f{i}") for i in range(21)]},
            ["spec.resourceFlavors[20]: exceeds the limit of 20 resourceFlavors; item 'f20' is ignored"],
        ),
        (
            {"resourceFlavors": [{"name": "f", "nodeLabels": {f"k{i}": "v" for i in range(11)}}]},
            ["spec.resourceFlavors[0].nodeLabels: has 11 entries, more than the limit of 10"],
        ),
        (
            {"resourceFlavors": [{"name": "f", "nodeLabels": {f"k{i}": "v" for i in range(9)}}]},
            ["spec.resourceFlavors[0].nodeLabels: has 9 entries; a Kueue ResourceFlavor allows at most 8"],
        ),
        (
            {"resourceFlavors": [flavor("f", taints=[{"key": f"k{i}", "effect": "NoSchedule"} for i in range(6)])]},
            ["spec.resourceFlavors[0].taints: has 6 items, more than the limit of 5"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a", covered=("cpu", "memory"))]},
            [],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [{"name": "a", "spec": {"resourceGroups": [
                {"coveredResources": ["cpu", "memory"], "flavors": [
                    {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}}]},
            ["spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].resources: "
             "missing a quota for covered resource 'memory'"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [{"name": "a", "spec": {"resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [
                    {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "lots"}]}]}]}}]},
            ["spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
             "'lots' is not a valid quantity"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [{"name": "a", "spec": {"resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [
                    {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "borrowingLimit": 1}]}]}]}}]},
            ["spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: "
             "requires the ClusterQueue to be in a cohort"],
        ),
        (
            {"resourceFlavors": [flavor("f"), flavor("g")], "clusterQueues": [{"name": "a", "spec": {"resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}]},
                {"coveredResources": ["cpu"], "flavors": [{"name": "g", "resources": [{"name": "cpu", "nominalQuota": 1}]}]},
            ]}}]},
            ["spec.clusterQueues[0].spec.resourceGroups[1].coveredResources: "
             "resource 'cpu' is already covered by spec.resourceGroups[0]"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a", cohort="x", cohortName="y")]},
            ["spec.clusterQueues[0].spec.cohort: 'x' conflicts with cohortName 'y'; set only one"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a", retryStrategy="x")]},
            ["spec.clusterQueues[0].spec.retryStrategy: unknown field, not part of the Kueue v1beta2 ClusterQueue spec"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [{**cq("a"), "namespaces": ["ok", "Not_OK"]}]},
            ["spec.clusterQueues[0].namespaces[1]: 'Not_OK' is not a valid namespace name"],
        ),
        (  # a flavor without node labels gets kaiwo/worker, which Kueue's rule for flavors with a topology needs
            {"resourceFlavors": [{"name": "f", "topologyName": "t"}], "topologies": [{"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}}]},
            [],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a", flavorFungibility={"preference": "BorrowingOverPreemption"})]},
            ["spec.clusterQueues[0].spec.flavorFungibility.preference: "
             "can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor"],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a", flavorFungibility={
                "preference": "BorrowingOverPreemption", "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor"})]},
            [],
        ),
        (
            {"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a", preemption={
                "borrowWithinCohort": {"policy": "LowerPriority"}})]},
            ["spec.clusterQueues[0].spec.preemption.borrowWithinCohort.policy: "
             "'LowerPriority' requires reclaimWithinCohort other than Never"],
        ),
        (
            {"workloadPriorityClasses": [{"metadata": {"name": "p"}}]},
            ["spec.workloadPriorityClasses[0].value: is required and must be an integer"],
        ),
        (
            {"topologies": [{"metadata": {"name": "t"}, "spec": {"levels": [
                {"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}, {"nodeLabel": "rack"}]}}]},
            ["spec.topologies[0].spec.levels[0].nodeLabel: kubernetes.io/hostname may only be the last level",
             "spec.topologies[0].spec.levels[2].nodeLabel: level 'rack' is listed more than once"],
        ),
        (
            {"topologies": [{"metadata": {"name": "t"}, "spec": {"levels": []}}]},
            ["spec.topologies[0].spec.levels: must have between 1 and 8 levels, has 0"],
        ),
    ],
)
def test_problems_name_the_item(spec, expected):
    assert messages(spec) == expected


def test_problem_identifies_item_to_hold():
    (problem,) = validate({"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a"), cq("b", flavors=("x",))]})
    assert (problem.kind, problem.name, problem.index) == ("ClusterQueue", "b", 1)


@pytest.mark.parametrize(
    "spec",
    [
        {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": "x"}}]},
        {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": ["x"]}}]},
        {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": [{"coveredResources": "cpu", "flavors": []}]}}]},
        {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": ["f"]}]}}]},
        {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": "cpu"}]}]}}]},
        {"clusterQueues": [{"name": "q", "namespaces": "ns", "spec": "x"}]},
        {"clusterQueues": ["q"]},
        {"resourceFlavors": [{"name": "f", "nodeLabels": ["a"], "taints": "x"}]},
        {"topologies": [{"metadata": {"name": "t"}, "spec": "x"}, {"metadata": {"name": "u"}, "spec": {"levels": "a"}}]},
    ],
)
def test_malformed_input_is_reported_not_raised(spec):
    from kaiwo_ctrl.queues.kueue import desired_kueue_objects

    assert validate(spec)
    state = desired_kueue_objects(spec)  # bad items are left out instead of crashing the reconciler
    assert all(o["kind"] != "ClusterQueue" for o in state.objects)


@pytest.mark.parametrize("quota", ["1e9999999", "9" * 80, "1e31", "-1e9999999"])
def test_overflowing_quota_fails_only_its_item(quota):
    bad = cq("b")
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = quota
    problems = validate({"resourceFlavors": [flavor("f")], "clusterQueues": [cq("a"), bad]})
    assert len(problems) == 1
    (problem,) = problems
    assert (problem.kind, problem.name, problem.index) == ("ClusterQueue", "b", 1)
    assert problem.path.endswith("nominalQuota") and len(problem.message) < 200


def test_plan_normalisation_survives_an_overflowing_quantity():
    from kaiwo_ctrl.queues.owned import _quantity

    assert _quantity("1e9999999") == "1e9999999"  # left as written, compared as text


def test_queue_config_spec_compares_kueue_quotas_as_quantities():
    """A stored queue config whose quotas are spelled differently (``1000m`` for
    ``1``, ``1Gi`` for ``1024Mi``) needs no write; a changed quota does."""
    def spec(cpu, memory):
        resources = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory}]
        return {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": [
            {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f", "resources": resources}]}]}}]}

    assert queue_config_spec_equivalent(spec("1000m", "1Gi"), spec(1, "1024Mi"))
    assert not queue_config_spec_equivalent(spec("2", "1Gi"), spec(1, "1Gi"))
