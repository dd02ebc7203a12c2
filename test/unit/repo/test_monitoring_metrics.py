"""Every metric a dashboard query or an alert rule of config/monitoring uses
is one the code exports, or a documented engine, Kueue or Prometheus metric
listed in DOCUMENTED, so a renamed metric fails here instead of leaving an
empty panel or an alert that never fires.

Exported names come from the code itself (``ast``): the first argument of
every ``Counter``/``Gauge``/``Histogram``/``Summary``/``*MetricFamily`` call in
kaiwo_ctrl/, with the suffixes the exposition adds (``_total`` for counters;
``_bucket``/``_sum``/``_count`` for histograms).
"""

from __future__ import annotations

import ast
import json
import re

import pytest
import yaml
from support import REPO

ROOT = REPO
MONITORING = ROOT / "config" / "monitoring"

#: Metrics other programs export, as their documentation names them.
DOCUMENTED = {
    # Prometheus: 1 when the last scrape of a target succeeded
    "up",
    # Kueue (controller manager /metrics; names and labels as in Kueue v0.19.2 pkg/metrics/metrics.go)
    "kueue_admission_wait_time_seconds_bucket",  # histogram by cluster_queue: creation/requeue -> admission
    "kueue_evicted_workloads_total",  # counter by cluster_queue and reason (Preempted, PodsReadyTimeout, ...)
    "kueue_pending_workloads",  # gauge by cluster_queue and status (active, inadmissible)
    # vLLM (the OpenAI server's /metrics on the model server port, scraped by the PodMonitor)
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket",
}
METRIC_CALLS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
                "GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter", "HistogramMetricFamily": "histogram",
                "LeanCounter": "counter", "LeanGauge": "gauge", "LeanHistogram": "histogram"}
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "changes", "absent", "histogram_quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "topk", "bottomk", "clamp_min", "clamp_max", "time", "vector", "label_replace",
}


def _module_strings(tree: ast.Module) -> dict[str, str]:
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}


def exported() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "kaiwo_ctrl").rglob("*.py"):
        tree = ast.parse(path.read_text())
        consts = _module_strings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            fn = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""
            if fn not in METRIC_CALLS:
                continue
            arg = node.args[0]
            name = arg.value if isinstance(arg, ast.Constant) else consts.get(arg.id) if isinstance(arg, ast.Name) else None
            if isinstance(name, str):
                base = name[: -len("_total")] if METRIC_CALLS[fn] == "counter" and name.endswith("_total") else name
                names |= {base + s for s in SUFFIXES[METRIC_CALLS[fn]]}
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names of a PromQL expression (strings, label matchers, grouping
    clauses, ranges, numbers and functions removed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    found = set()
    for m in re.finditer(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_WORDS:
            continue
        found.add(word)
    return found


def used() -> dict[str, set[str]]:
    """metric name -> where it is used."""
    out: dict[str, set[str]] = {}
    for path in sorted((MONITORING / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for t in panel.get("targets", []):
                for name in metric_names(t["expr"]):
                    out.setdefault(name, set()).add(f"{path.name}: {panel['title']}")
    rules = yaml.safe_load((MONITORING / "prometheusrules.yaml").read_text())
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            for name in metric_names(rule["expr"]):
                out.setdefault(name, set()).add(f"alert {rule['alert']}")
    return out


def test_every_metric_in_dashboards_and_alerts_exists():
    known = exported() | DOCUMENTED
    uses = used()
    unknown = {name: sorted(where) for name, where in uses.items() if name not in known}
    assert not unknown, f"metrics neither exported by kaiwo_ctrl/ nor in DOCUMENTED: {unknown}"
    assert len(uses) >= 20  # the parser found the queries


def test_documented_list_has_no_dead_entries():
    assert DOCUMENTED <= set(used()), sorted(DOCUMENTED - set(used()))


def test_dashboards_and_alerts_cover_what_the_issue_lists():
    panels = {p["title"] for f in (MONITORING / "dashboards").glob("*.json") for p in json.loads(f.read_text())["panels"]}
    for words in ("Reconciles", "Reconcile errors", "Reconcile latency", "Work queue depth", "Work queue wait", "Informer relists",
                  "webhook latency", "Leader", "Requests per second", "Errors per second", "Latency the proxy adds",
                  "Active requests", "Ready endpoints", "Autoscaler decisions", "vLLM", "KaiwoJobs by status",
                  "pending GPU workload", "GPU use per workload", "Preemptions"):
        assert any(words.lower() in t.lower() for t in panels), words
    rules = yaml.safe_load((MONITORING / "prometheusrules.yaml").read_text())
    alerts = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"]}
    assert alerts == {"KaiwoOperatorDown", "KaiwoReconcileErrorsRising", "KaiwoWorkqueueStuck", "KaiwoWebhookFailing",
                      "KaiwoModelNoReadyEndpoint", "KaiwoGPUWorkloadPendingTooLong"}


@pytest.mark.parametrize("expr, want", [
    ('sum by (controller) (rate(controller_runtime_reconcile_total{result="error"}[5m]))', {"controller_runtime_reconcile_total"}),
    ("histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))", {"vllm:time_to_first_token_seconds_bucket"}),
    ('a_total / on (x) b unless max by (y) (c{state="ready"}) > 0', {"a_total", "b", "c"}),
    ('absent(up{job="x"} == 1)', {"up"}),
])
def test_metric_name_parser(expr, want):
    assert metric_names(expr) == want


def test_a_renamed_metric_is_caught():
    known = exported() | DOCUMENTED
    assert "controller_runtime_reconcile_total" in known and "kaiwo_proxy_overhead_seconds_bucket" in known
    assert "kaiwo_model_replicas" in known and "kaiwo_workload_gpu_utilization" in known
    assert not metric_names("rate(controller_runtime_reconcile_totals[5m])") <= known
