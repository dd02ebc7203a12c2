"""kaiwo CLI: building a KaiwoJob / KaiwoService from flags, files and directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaiwo_ctrl.kaiwo_cli.config import Defaults
from kaiwo_ctrl.kaiwo_cli.errors import USAGE, CliError
from kaiwo_ctrl.kaiwo_cli.kube import describe_request, split_kind
from kaiwo_ctrl.kaiwo_cli.output import age, human_duration, table
from kaiwo_ctrl.kaiwo_cli.sanitize import Styled
from kaiwo_ctrl.kaiwo_cli.spec import (
    SubmitFlags,
    build_workload,
    generated_name,
    merge_env,
    parse_env_file,
    parse_labels,
    parse_storage,
)

ME = Defaults(user="Alice.Smith@Example.com")


def build(**flags) -> dict:
    return build_workload(SubmitFlags(**flags), ME, short_id="abc123")


def test_every_flag_lands_in_its_field(tmp_path):
    (tmp_path / "env").write_text("FROM_FILE=1\nSHARED=file\n")
    obj = build_workload(
        SubmitFlags(
            name="train", namespace="ml", user="bob@x.io", image="img:1", gpus=16, gpus_per_replica=8, replicas=2,
            gpu_vendor="nvidia", ray=True, queue="team-a", priority_class="high", duration="1h30m",
            storage="100Gi:fast", env=["SHARED=flag", "EMPTY="], env_file=tmp_path / "env", entrypoint="python t.py",
            labels=["team=vision", "example.com/tier=gold"],
        ),
        ME,
    )
    assert obj["apiVersion"] == "kaiwo.silogen.ai/v1alpha1" and obj["kind"] == "KaiwoJob"
    assert obj["metadata"] == {
        "name": "train", "namespace": "ml",
        "labels": {"kaiwo.silogen.ai/user": "bob-x.io", "team": "vision", "example.com/tier": "gold"},
    }
    assert obj["spec"] == {
        "user": "bob@x.io", "image": "img:1", "gpus": 16, "gpusPerReplica": 8, "replicas": 2, "gpuVendor": "nvidia",
        "clusterQueue": "team-a", "priorityClass": "high", "duration": "1h30m", "ray": True,
        "storage": {"storageEnabled": True, "data": {"storageSize": "100Gi"}, "storageClassName": "fast"},
        "entrypoint": "python t.py",
        "env": [{"name": "FROM_FILE", "value": "1"}, {"name": "SHARED", "value": "flag"}, {"name": "EMPTY", "value": ""}],
    }


def test_minimal_job_gets_user_label_generated_name_and_default_namespace():
    obj = build()
    assert obj["metadata"] == {"namespace": "default", "name": "alice-smith-abc123",
                               "labels": {"kaiwo.silogen.ai/user": "alice.smith-example.com"}}
    assert obj["spec"] == {"user": "Alice.Smith@Example.com"}


def test_service_flag_builds_a_kaiwoservice():
    assert build(service=True, image="vllm")["kind"] == "KaiwoService"


@pytest.mark.parametrize(
    "user, want",
    [("alice@example.com", "alice-abc123"), ("Bob.O'Neil@x.io", "bob-o-neil-abc123"), ("@@@", "kaiwo-abc123"),
     ("a" * 80 + "@x.io", "a" * 33 + "-abc123")],
)
def test_generated_names_are_dns_labels(user, want):
    assert generated_name(user, "abc123") == want


def test_file_is_kept_unchanged_apart_from_what_flags_and_defaults_add(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(
        "apiVersion: kaiwo.silogen.ai/v1alpha1\nkind: KaiwoJob\nmetadata:\n  name: from-file\n  labels: {a: b}\n"
        "spec:\n  image: file-img\n  gpus: 4\n  job:\n    spec:\n      template:\n        spec:\n"
        "          containers: [{name: main, command: [sleep, '1']}]\n"
    )
    obj = build_workload(SubmitFlags(file=f, gpus=8), Defaults(user="u@x.io", image="cfg-img", cluster_queue="cq"))
    assert obj["metadata"] == {"name": "from-file", "namespace": "default",
                               "labels": {"a": "b", "kaiwo.silogen.ai/user": "u-x.io"}}
    assert obj["spec"]["image"] == "file-img" and obj["spec"]["gpus"] == 8 and obj["spec"]["clusterQueue"] == "cq"
    assert obj["spec"]["job"]["spec"]["template"]["spec"]["containers"][0]["command"] == ["sleep", "1"]


def test_directory_supplies_entrypoint_and_env_below_file_and_flags(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "entrypoint").write_text("#!/usr/bin/env python\nprint(1)\n")
    (wd / "env").write_text("# comment\n\nexport A=dir\nB='quoted value'\nC=dir\n")
    f = tmp_path / "job.yaml"
    f.write_text("kind: KaiwoJob\nspec:\n  env: [{name: C, value: file}]\n")
    obj = build_workload(SubmitFlags(file=f, workload_dir=wd, env=["A=flag"]), ME)
    assert obj["spec"]["entrypoint"] == "#!/usr/bin/env python\nprint(1)\n"
    assert obj["spec"]["env"] == [{"name": "A", "value": "flag"}, {"name": "B", "value": "quoted value"},
                                  {"name": "C", "value": "file"}]
    # a file entrypoint wins over the directory's; a flag wins over both
    f.write_text("kind: KaiwoJob\nspec:\n  entrypoint: from-file\n")
    assert build_workload(SubmitFlags(file=f, workload_dir=wd), ME)["spec"]["entrypoint"] == "from-file"
    script = tmp_path / "s.sh"
    script.write_text("echo script")
    assert build_workload(SubmitFlags(file=f, workload_dir=wd, entrypoint_file=script), ME)["spec"]["entrypoint"] == "echo script"


def test_env_file_may_be_a_yaml_list_with_value_from(tmp_path):
    f = tmp_path / "env.yaml"
    f.write_text("- name: TOKEN\n  valueFrom: {secretKeyRef: {name: s, key: k}}\n- name: X\n  value: '1'\n")
    assert parse_env_file(f)[0] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


def test_merge_env_keeps_order_and_lets_high_win():
    low = [{"name": "A", "value": "1"}, {"name": "B", "value": "1"}]
    assert merge_env(low, [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]) == [
        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"env": ["NOEQUALS"]}, "-e 'NOEQUALS'"),
        ({"env": ["1BAD=x"]}, "valid variable name"),
        ({"storage": "lots"}, "--storage 'lots'"),
        ({"storage": "0:fast"}, "positive quantity"),
        ({"duration": "forever"}, "--duration 'forever'"),
        ({"labels": ["nokey"]}, "--label 'nokey'"),
        ({"labels": ["k=" + "v" * 64]}, "at most 63"),
        ({"labels": ["bad key=v"]}, "valid label key"),
        ({"entrypoint": "a", "entrypoint_file": Path("/x")}, "not both"),
        ({"workload_dir": Path("/does/not/exist")}, "does not exist"),
        ({"env_file": Path("/does/not/exist")}, "cannot read"),
    ],
)
def test_bad_flags_are_usage_errors_naming_the_flag(flags, message):
    with pytest.raises(CliError) as e:
        build_workload(SubmitFlags(**flags), ME)
    assert e.value.code == USAGE and message in e.value.message


@pytest.mark.parametrize(
    "text, message",
    [
        ("kind: Pod\n", "kind must be KaiwoJob or KaiwoService"),
        ("apiVersion: kaiwo.silogen.ai/v2\nkind: KaiwoJob\n", "apiVersion must be"),
        ("kind: KaiwoJob\n---\nkind: KaiwoJob\n", "exactly one"),
        ("kind: KaiwoJob\nspec:\n  gpus: many\n", "spec.gpus"),
        ("kind: KaiwoJob\nspec: [1]\n", "must be mappings"),
    ],
)
def test_bad_files_are_usage_errors(tmp_path, text, message):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(CliError) as e:
        build_workload(SubmitFlags(file=f), ME)
    assert e.value.code == USAGE and message in e.value.message


def test_service_flag_refuses_a_job_file(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("kind: KaiwoJob\n")
    with pytest.raises(CliError, match="--service"):
        build_workload(SubmitFlags(file=f, service=True), ME)


def test_no_user_anywhere_is_a_usage_error_saying_where_to_set_it():
    with pytest.raises(CliError) as e:
        build_workload(SubmitFlags(image="x"), Defaults())
    assert e.value.code == USAGE and "--user" in e.value.message and "kaiwoconfig.yaml" in e.value.message


def test_storage_keeps_file_settings_and_labels_parse():
    assert parse_storage("5Gi", {"accessMode": "ReadWriteOnce", "data": {"mountPath": "/d"}}) == {
        "accessMode": "ReadWriteOnce", "storageEnabled": True, "data": {"mountPath": "/d", "storageSize": "5Gi"}}
    assert parse_labels(["a=", "x.io/b=c-d_e.f"]) == {"a": "", "x.io/b": "c-d_e.f"}


@pytest.mark.parametrize(
    "method, path, want",
    [
        ("POST", "/apis/kaiwo.silogen.ai/v1alpha1/namespaces/ns/kaiwojobs", ("create", "kaiwojobs.kaiwo.silogen.ai", "ns")),
        ("GET", "/apis/kaiwo.silogen.ai/v1alpha1/namespaces/ns/kaiwojobs", ("list", "kaiwojobs.kaiwo.silogen.ai", "ns")),
        ("GET", "/apis/kaiwo.silogen.ai/v1alpha1/kaiwojobs", ("list", "kaiwojobs.kaiwo.silogen.ai", None)),
        ("GET", "/apis/kaiwo.silogen.ai/v1alpha1/namespaces/ns/kaiwojobs/x", ("get", "kaiwojobs.kaiwo.silogen.ai", "ns")),
        ("DELETE", "/apis/kaiwo.silogen.ai/v1alpha1/namespaces/ns/kaiwoservices/x", ("delete", "kaiwoservices.kaiwo.silogen.ai", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", ("get", "pods/log", "ns")),
    ],
)
def test_permission_errors_name_verb_and_resource(method, path, want):
    assert describe_request(method, path) == want


def test_kind_prefixes():
    assert split_kind("job/x") == ("KaiwoJob", "x")
    assert split_kind("service/x") == ("KaiwoService", "x")
    assert split_kind("x") == (None, "x")


def test_tables_align_and_ignore_colour_codes():
    # our own colour (Styled); a server's escape codes are shown, not kept (test_kaiwo_cli_sanitize.py)
    out = table(["name", "status"], [["a", Styled("\033[32mCOMPLETE\033[0m")], ["longer-name", "RUNNING"]])
    lines = out.splitlines()
    assert lines[0] == "NAME          STATUS"
    assert lines[2] == "longer-name   RUNNING"
    assert lines[1].index("\033") == lines[2].index("RUNNING")


@pytest.mark.parametrize("seconds, want", [(None, "-"), (5, "5s"), (312, "5m12s"), (720, "12m"), (3700, "1h1m"),
                                           (7200, "2h"), (90000, "1d1h")])
def test_human_durations(seconds, want):
    assert human_duration(seconds) == want


def test_age_of_a_bad_timestamp_is_a_dash():
    assert age(None) == "-" and age("yesterday") == "-"


@pytest.mark.parametrize("argv", [["-f", "-"], ["-f", "--"], ["--file", "--"], ["--file=--"], ["--file=-"]])
def test_submit_reads_the_manifest_from_stdin_for_dash_and_double_dash(argv, monkeypatch, capsys, tmp_path):
    import io
    import json

    from kaiwo_ctrl.kaiwo_cli.main import main

    manifest = "apiVersion: kaiwo.silogen.ai/v1alpha1\nkind: KaiwoJob\nmetadata: {name: piped}\nspec: {image: img:stdin}\n"
    monkeypatch.setenv("KAIWOCONFIG", str(tmp_path / "cfg.yaml"))
    (tmp_path / "cfg.yaml").write_text("user: a@b.io\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(manifest))
    assert main(["submit", *argv, "--dry-run", "-o", "json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert (obj["metadata"]["name"], obj["spec"]["image"], obj["spec"]["user"]) == ("piped", "img:stdin", "a@b.io")


def test_a_file_named_like_a_dash_elsewhere_is_not_stdin(tmp_path, monkeypatch, capsys):
    from kaiwo_ctrl.kaiwo_cli.main import main, stdin_file_args

    # `--` keeps its meaning (end of options) elsewhere: only submit's -f value is rewritten
    assert stdin_file_args(["submit", "--name", "x", "--", "-f", "--"]) == ["submit", "--name", "x", "--", "-f", "--"]
    assert stdin_file_args(["exec", "x", "--", "tail", "-f", "--", "f"]) == ["exec", "x", "--", "tail", "-f", "--", "f"]
    assert stdin_file_args(["submit", "-f", "--", "--dry-run"]) == ["submit", "-f", "-", "--dry-run"]
    monkeypatch.setenv("KAIWOCONFIG", str(tmp_path / "cfg.yaml"))
    (tmp_path / "cfg.yaml").write_text("user: a@b.io\n")
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("kind: Pod\n"))
    assert main(["submit", "-f", "-", "--dry-run"]) == USAGE
    assert "<stdin>: kind must be KaiwoJob or KaiwoService, not 'Pod'" in capsys.readouterr().err
