"""Schema-valid but hostile embedded specs: the builders raise a FieldError
naming the field (never TypeError/AttributeError), and the names they derive
stay valid and distinct at any length."""

import pytest

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.runtime.objects.names import is_dns1123_label
from kaiwo_ctrl.workloads.reconcile.desired import desired_children, main_workload
from kaiwo_ctrl.workloads.builders.validation import SpecError
from kaiwo_ctrl.workloads.base.world import World

WORLD = World.from_dicts(nodes=[], queue_config={"clusterQueues": [{"name": "kaiwo"}]}, config={})


def kjob(name="j", **spec):
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": name, "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}


def ksvc(name="s", **spec):
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoService",
            "metadata": {"name": name, "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}


def _job(template):
    return {"spec": {"template": template}}


HOSTILE = [
    (kjob(job={"spec": "oops"}), "spec.job.spec"),
    (kjob(job={"spec": {"template": "x"}}), "spec.job.spec.template"),
    (kjob(job=_job({"metadata": "x", "spec": {"containers": [{"name": "c"}]}})), "spec.job.spec.template.metadata"),
    (kjob(job=_job({"metadata": {"labels": {"a": 1}}, "spec": {"containers": [{"name": "c"}]}})),
     "spec.job.spec.template.metadata.labels[a]"),
    (kjob(job=_job({"spec": "x"})), "spec.job.spec.template.spec"),
    (kjob(job=_job({"spec": {"containers": ["x"]}})), "spec.job.spec.template.spec.containers[0]"),
    (kjob(job=_job({"spec": {"containers": "x"}})), "spec.job.spec.template.spec.containers"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c", "resources": "x"}]}})),
     "spec.job.spec.template.spec.containers[0].resources"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c", "resources": {"limits": ["x"]}}]}})),
     "spec.job.spec.template.spec.containers[0].resources.limits"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c", "env": "x"}]}})),
     "spec.job.spec.template.spec.containers[0].env"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c"}], "initContainers": [3]}})),
     "spec.job.spec.template.spec.initContainers[0]"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c"}], "volumes": "x"}})), "spec.job.spec.template.spec.volumes"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c"}], "tolerations": [None]}})),
     "spec.job.spec.template.spec.tolerations[0]"),
    (kjob(job=_job({"spec": {"containers": [{"name": "c"}], "affinity": []}})), "spec.job.spec.template.spec.affinity"),
    (ksvc(deployment={"spec": {"selector": "x", "template": {"spec": {"containers": [{"name": "c"}]}}}}),
     "spec.deployment.spec.selector"),
    (ksvc(deployment={"spec": {"selector": {"matchLabels": "x"}, "template": {"spec": {"containers": [{"name": "c"}]}}}}),
     "spec.deployment.spec.selector.matchLabels"),
    (ksvc(deployment={"spec": 7}), "spec.deployment.spec"),
    (kjob(entrypoint="python x.py", rayJob={"spec": "oops"}), "spec.rayJob.spec"),
    (kjob(entrypoint="python x.py", rayJob={"spec": {"rayClusterSpec": "x"}}), "spec.rayJob.spec.rayClusterSpec"),
    (kjob(entrypoint="python x.py", rayJob={"spec": {"rayClusterSpec": {"workerGroupSpecs": "x"}}}),
     "spec.rayJob.spec.rayClusterSpec.workerGroupSpecs"),
    (kjob(entrypoint="python x.py", rayJob={"spec": {"rayClusterSpec": {"workerGroupSpecs": ["x"]}}}),
     "spec.rayJob.spec.rayClusterSpec.workerGroupSpecs[0]"),
    (kjob(entrypoint="python x.py", rayJob={"spec": {"rayClusterSpec": {"headGroupSpec": "x"}}}),
     "spec.rayJob.spec.rayClusterSpec.headGroupSpec"),
    (kjob(entrypoint="python x.py", rayJob={"spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": ["x"]}}}}}}),
     "spec.rayJob.spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]"),
    (ksvc(rayService={"spec": {"rayClusterConfig": "x"}}), "spec.rayService.spec.rayClusterConfig"),
    (ksvc(rayService={"spec": {"rayClusterConfig": {"workerGroupSpecs": [{"template": "x"}]}}}),
     "spec.rayService.spec.rayClusterConfig.workerGroupSpecs[0].template"),
]


@pytest.mark.parametrize("obj,path", HOSTILE, ids=[p for _, p in HOSTILE])
def test_wrong_shapes_raise_a_field_error_naming_the_field(obj, path):
    with pytest.raises(FieldError) as err:
        main_workload(obj, WORLD)
    assert err.value.path == path
    assert str(err.value).startswith(path + ": must be")


def test_explicit_nulls_are_tolerated():
    job = kjob(job=_job({"metadata": None, "spec": {"containers": [{"name": "c", "image": "i", "resources": None}]}}))
    out = main_workload(job, WORLD)
    assert out["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2"
    svc = ksvc(deployment={"spec": {"selector": {"matchLabels": None}, "template": {"spec": {"containers": [{"name": "c"}]}}}})
    assert main_workload(svc, WORLD)["spec"]["selector"]["matchLabels"] == {"app": "s"}


@pytest.mark.parametrize("value", ["1e9999999", "1e-9999999E", "9" * 100, "1e31", "-1e31", float("inf"), 10**40])
def test_overflowing_quantities_are_quantity_errors(value):
    with pytest.raises(QuantityError) as err:
        parse_quantity(value)
    assert isinstance(err.value, FieldError)
    assert len(str(err.value)) < 200


def test_overflowing_quantity_in_spec_resources_is_a_spec_error():
    out = desired_children(kjob(resources={"limits": {"cpu": "1e9999999"}}), WORLD)
    assert isinstance(out, SpecError) and out.field == "spec.resources.limits.cpu"


def test_overflowing_quantity_in_a_user_container_is_left_to_the_apiserver():
    job = kjob(job=_job({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1e9999999"}}}]}}))
    out = main_workload(job, WORLD)
    assert out["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1e9999999"


@pytest.mark.parametrize("length", [1, 55, 58, 61, 62, 63, 100, 253])
def test_storage_children_never_collide(length):
    name = ("n" * length)[:length]
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi", "download": {"s3": [
        {"endpointUrl": "http://s3", "buckets": [{"name": "b", "files": [{"path": "a", "targetPath": "a"}]}],
         "accessKeyId": {"secretName": "cred.with.dots." + "x" * 60, "secretKey": "k"},
         "secretKey": {"secretName": "cred.with.dots." + "x" * 60, "secretKey": "s"}}]}},
        "huggingFace": {"storageSize": "1Gi"}}
    children = desired_children(kjob(name=name, image="i", storage=storage), WORLD)
    assert not isinstance(children, SpecError), children
    names = [(c["kind"], c["metadata"]["name"]) for c in children]
    pvcs = [n for k, n in names if k == "PersistentVolumeClaim"]
    jobs = [n for k, n in names if k == "Job"]
    assert len(set(pvcs)) == 2 and all(len(n) <= 63 for _, n in names)
    assert jobs[0] != name and jobs[0].endswith("-download")
    download = next(c for c in children if c["kind"] == "Job")
    for vol in download["spec"]["template"]["spec"]["volumes"]:
        assert is_dns1123_label(vol["name"]), vol["name"]
    main = next(c for c in children if c["kind"] == "Job" and c is not download) if len(jobs) > 1 else None
    assert main is None  # the main Job waits for the download


def test_appwrapper_declares_every_ray_group():
    user = {"spec": {"rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                                          "workerGroupSpecs": [
                                              {"groupName": "a", "template": {"spec": {"containers": [{"name": "w"}]}}},
                                              {"groupName": "b", "template": {"spec": {"containers": [{"name": "w"}]}}}]}}}
    aw = main_workload(ksvc(rayService=user, replicas=3), WORLD)
    assert aw["spec"]["components"][0]["podSets"] == [
        {"replicas": 1, "path": "template.spec.rayClusterConfig.headGroupSpec.template"},
        {"replicas": 3, "path": "template.spec.rayClusterConfig.workerGroupSpecs[0].template"},
        {"replicas": 3, "path": "template.spec.rayClusterConfig.workerGroupSpecs[1].template"},
    ]


def _dl_storage(download):
    return {"storageEnabled": True, "data": {"storageSize": "1Gi", "download": download}}


@pytest.mark.parametrize(
    "download,path",
    [
        ({"git": [{"repository": "https://ghp_TOKEN@github.com/o/r.git", "targetPath": "r"}]},
         "spec.storage.data.download.git[0].repository"),
        ({"git": [{"repository": "https://u:p@host/r.git", "targetPath": "r"}]}, "spec.storage.data.download.git[0].repository"),
        ({"s3": [{"endpointUrl": "http://key:secret@minio:9000", "buckets": []}]}, "spec.storage.data.download.s3[0].endpointUrl"),
        ({"git": [{"repository": "https://host/r.git", "targetPath": "r",
                   "token": {"file": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}]},
         "spec.storage.data.download.git[0].token.file"),
        ({"git": [{"repository": "https://host/r.git", "targetPath": "r", "token": {"file": "/app/secrets/../../etc/x"}}]},
         "spec.storage.data.download.git[0].token.file"),
    ],
)
def test_credentials_never_reach_the_download_configmap(download, path):
    with pytest.raises(FieldError) as err:
        desired_children(kjob(image="i", storage=_dl_storage(download)), WORLD)
    assert err.value.path == path


def test_secret_file_under_the_mount_root_is_accepted():
    download = {"git": [{"repository": "https://host/r.git", "targetPath": "r",
                         "token": {"file": "/app/secrets/git/tok", "secretName": "git", "secretKey": "tok"}}]}
    children = desired_children(kjob(image="i", storage=_dl_storage(download)), WORLD)
    assert [c["kind"] for c in children][-1] == "Job"
