"""kaiwo CLI: where user defaults come from and which source wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaiwo_ctrl.kaiwo_cli.config import Defaults, read_config, resolve, user_config_path
from kaiwo_ctrl.kaiwo_cli.errors import USAGE, CliError
from kaiwo_ctrl.kaiwo_cli.spec import SubmitFlags, build_workload


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_user_file_is_kaiwoconfig_env_else_home(tmp_path):
    assert user_config_path({"KAIWOCONFIG": str(tmp_path / "k.yaml")}) == (tmp_path / "k.yaml", True)
    path, explicit = user_config_path({})
    assert str(path).endswith(".config/kaiwo/kaiwoconfig.yaml") and not explicit


def test_missing_default_file_is_empty_but_missing_explicit_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    d = resolve(env={})
    assert (d.user, d.cluster_queue, d.namespace, d.image, d.sources) == (None, None, "default", None, {})
    assert read_config(tmp_path / "none.yaml", required=False) == ({}, [])
    with pytest.raises(CliError) as e:
        resolve(env={"KAIWOCONFIG": str(tmp_path / "none.yaml")})
    assert e.value.code == USAGE and "none.yaml" in e.value.message


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n- b\n", "expected a mapping"),
        ("user: [a]\n", "user must be a non-empty string"),
        ("user: ''\n", "user must be a non-empty string"),
        ("user: [unclosed\n", "cannot read"),
    ],
)
def test_bad_config_files_name_the_file_and_key(tmp_path, text, message):
    f = write(tmp_path / "k.yaml", text)
    with pytest.raises(CliError) as e:
        read_config(f, required=True)
    assert message in e.value.message and str(f) in e.value.message and e.value.code == USAGE


def test_unknown_keys_are_warned_about_not_fatal(tmp_path):
    f = write(tmp_path / "k.yaml", "user: a@b.c\ncolour: blue\n")
    values, warnings = read_config(f, required=True)
    assert values == {"user": "a@b.c"}
    assert len(warnings) == 1 and "'colour'" in warnings[0]


def test_directory_file_wins_over_user_file_key_by_key(tmp_path):
    user = write(tmp_path / "user.yaml", "user: me@x.io\nclusterQueue: userq\nnamespace: ns-user\nimage: img:user\n")
    wd = tmp_path / "wd"
    write(wd / "kaiwoconfig.yaml", "clusterQueue: dirq\nimage: img:dir\n")
    d = resolve(wd, env={"KAIWOCONFIG": str(user)})
    assert (d.user, d.cluster_queue, d.namespace, d.image) == ("me@x.io", "dirq", "ns-user", "img:dir")
    assert d.sources == {"user": str(user), "clusterQueue": str(wd / "kaiwoconfig.yaml"),
                         "namespace": str(user), "image": str(wd / "kaiwoconfig.yaml")}


def test_built_in_namespace_is_default(tmp_path):
    assert resolve(env={"KAIWOCONFIG": str(write(tmp_path / "k.yaml", "user: a@b.c\n"))}).namespace == "default"


# The whole chain: flags > -f file > directory kaiwoconfig.yaml > user file > built-in.
CHAIN = [
    # (flag, file spec/meta, dir config, user config, expected)
    ("flagq", "fileq", "dirq", "userq", "flagq"),
    (None, "fileq", "dirq", "userq", "fileq"),
    (None, None, "dirq", "userq", "dirq"),
    (None, None, None, "userq", "userq"),
    (None, None, None, None, None),
]


@pytest.mark.parametrize("flag, in_file, in_dir, in_user, want", CHAIN)
def test_queue_precedence_through_all_sources(tmp_path, flag, in_file, in_dir, in_user, want):
    user = write(tmp_path / "user.yaml", "user: me@x.io\n" + (f"clusterQueue: {in_user}\n" if in_user else ""))
    wd = tmp_path / "wd"
    write(wd / "kaiwoconfig.yaml", f"clusterQueue: {in_dir}\n" if in_dir else "{}\n")
    spec = f"  clusterQueue: {in_file}\n" if in_file else "  image: x\n"
    f = write(tmp_path / "job.yaml", f"apiVersion: kaiwo.silogen.ai/v1alpha1\nkind: KaiwoJob\nmetadata:\n  name: j\nspec:\n{spec}")
    obj = build_workload(SubmitFlags(file=f, workload_dir=wd, queue=flag), resolve(wd, env={"KAIWOCONFIG": str(user)}))
    assert obj["spec"].get("clusterQueue") == want


@pytest.mark.parametrize(
    "flag, in_file, in_dir, in_user, want",
    [("n-flag", "n-file", "n-dir", "n-user", "n-flag"), (None, "n-file", "n-dir", "n-user", "n-file"),
     (None, None, "n-dir", "n-user", "n-dir"), (None, None, None, "n-user", "n-user"), (None, None, None, None, "default")],
)
def test_namespace_precedence(tmp_path, flag, in_file, in_dir, in_user, want):
    d = Defaults(user="me@x.io", namespace=in_dir or in_user or "default")
    meta = f"  namespace: {in_file}\n" if in_file else ""
    f = write(tmp_path / "job.yaml", f"kind: KaiwoJob\nmetadata:\n  name: j\n{meta}spec: {{}}\n")
    assert build_workload(SubmitFlags(file=f, namespace=flag), d)["metadata"]["namespace"] == want
