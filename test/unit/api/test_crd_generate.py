"""The committed CRD files are exactly what the generator produces."""

from __future__ import annotations

import io
import subprocess
import sys

import yaml

from api import crdgen
from api.registry import KINDS
from support import REPO

ROOT = REPO


def test_committed_crds_match_generator_byte_for_byte():
    rendered = crdgen.render_files()
    assert rendered, "generator produced nothing"
    for rel, content in rendered.items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is missing: run hack/gen-crds"
        assert path.read_text(encoding="utf-8") == content, f"{rel} is stale: run hack/gen-crds"


def test_one_file_per_kind_and_kustomization_lists_them():
    rendered = crdgen.render_files()
    bases = sorted(p.name for p in rendered if p.parent == crdgen.BASES_DIR)
    assert bases == sorted(f"{k.group}_{k.plural}.yaml" for k in KINDS)
    kustomization = yaml.safe_load(rendered[crdgen.CRD_DIR / "kustomization.yaml"])
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["resources"] == [f"bases/{name}" for name in bases]
    for rel, content in rendered.items():
        if rel.parent == crdgen.BASES_DIR:
            docs = list(yaml.safe_load_all(content))
            assert len(docs) == 1
            assert docs[0]["kind"] == "CustomResourceDefinition"
            assert "&id" not in content and "*id" not in content, "YAML anchors leak into CRDs"


def test_generation_is_deterministic():
    assert crdgen.render_files() == crdgen.render_files()


def test_check_reports_drift_with_a_diff_and_write_repairs_it(tmp_path):
    crdgen.write(tmp_path)
    out = io.StringIO()
    assert crdgen.check(tmp_path, out) is True
    assert out.getvalue() == ""

    target = tmp_path / crdgen.BASES_DIR / "kaiwo.silogen.ai_kaiwojobs.yaml"
    target.write_text(target.read_text().replace("default: amd", "default: nvidia"))
    (tmp_path / crdgen.BASES_DIR / "kubeai.org_models.yaml").unlink()
    out = io.StringIO()
    assert crdgen.check(tmp_path, out) is False
    diff = out.getvalue()
    assert "-                default: nvidia" in diff
    assert "+                default: amd" in diff
    assert "b/config/crd/bases/kubeai.org_models.yaml" in diff

    crdgen.write(tmp_path)
    assert crdgen.check(tmp_path, io.StringIO()) is True


def test_hack_script_check_mode_exit_codes(tmp_path):
    script = ROOT / "hack" / "gen-crds"
    ok = subprocess.run([str(script), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    crdgen.write(tmp_path)
    (tmp_path / crdgen.CRD_DIR / "kustomization.yaml").write_text("stale\n")
    bad = subprocess.run(
        [sys.executable, "-m", "api.crdgen", "--check", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 1
    assert "-stale" in bad.stdout
