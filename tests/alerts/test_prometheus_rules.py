"""deploy/prometheus/reckon-alerts.yml: every metric a rule reads is one /metrics exposes, and the
new gauges say what the alerts watch."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.test import Client

from ledger.gate import record_pass
from reconciliation import decisions
from tests.console.conftest import latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db

RULES = Path(settings.BASE_DIR) / "deploy" / "prometheus" / "reckon-alerts.yml"
TOKEN = "s3cret-metrics-token"
# A series selector: a metric name (not a function: no "(" after it), its label matchers if any.
SELECTOR = re.compile(r"\b([a-z_:][a-z0-9_:]*)\b(\{[^}]*\})?(?!\s*\()")
LABEL_MATCHER = re.compile(r'(\w+)="([^"]*)"')


def _samples(client: Client) -> list[str]:
    text = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _exposed(client: Client) -> dict[str, float]:
    """Each sample's name (labels dropped, the first sample kept) and value, read from /metrics."""
    samples = {}
    for line in _samples(client):
        samples.setdefault(re.split(r"[{ ]", line, maxsplit=1)[0], float(line.rsplit(" ", 1)[1]))
    return samples


@pytest.fixture
def metrics_client(settings) -> Client:
    settings.RECKON_METRICS_TOKEN = TOKEN
    return Client()


def test_every_rule_reads_a_metric_that_metrics_exposes(metrics_client):
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} >= {
        "ReckonUnknownWorkTooOld", "ReckonApprovalWaiting", "ReckonDeadManGateClosed", "ReckonReconciliationConflict",
        "ReckonLoopsStalled", "ReckonMetricsAbsent",
    }
    samples = _samples(metrics_client)
    for rule in rules:
        expr = re.sub(r"\[[^]]*\]", "", rule["expr"])  # range durations ([15m]) are not names
        selectors = SELECTOR.findall(expr)
        assert selectors, rule["expr"]
        for name, labels in selectors:
            wanted = [f'{key}="{value}"' for key, value in LABEL_MATCHER.findall(labels)]
            assert any(
                re.split(r"[{ ]", line, maxsplit=1)[0] == name and all(w in line for w in wanted) for line in samples
            ), f"{rule['alert']} reads {name}{labels}, which /metrics does not expose"


def test_the_gauges_the_alerts_watch(metrics_client, settings, operator):
    make_unknown_job("inv-1")
    make_operator_job("vault-1")
    decisions.mark_not_found(job_id="vault-1", version=latest_version("vault-1"), user=operator, note="none")
    settings.RECKON_GATE_BOUND_S = 60
    exposed = _exposed(metrics_client)
    assert exposed["reckon_unknown_work_oldest_job_age_seconds"] > 0
    assert exposed["reckon_approvals_oldest_pending_age_seconds"] > 0
    assert exposed["reckon_dead_man_gate_open"] == 0
    assert exposed["reckon_loop_last_pass_timestamp_seconds"] == 0  # never: the stalled-loops rule fires
    record_pass("sweeper")
    record_pass("reconciler")
    exposed = _exposed(metrics_client)
    assert exposed["reckon_dead_man_gate_open"] == 1
    assert abs(exposed["reckon_loop_last_pass_timestamp_seconds"] - time.time()) < 60
