"""The overview's four charts for one window: levels (sampled), oldest unknown age (sampled),
reconciliation outcomes and delivery throughput (counted from the ledger's events)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from console.access import TenantFence
from console.charts import Chart, Style, age_ceiling, age_text, lines, stacked_bars
from console.selectors.charts import OUTCOME_KINDS, THROUGHPUT_KINDS, Window, event_counts, levels

OUTCOME_STYLES = [
    Style("confirmed", "confirmed"),
    Style("not_found", "not found"),
    Style("conflict", "conflict"),
    Style("unavailable", "unavailable"),
]
THROUGHPUT_STYLES = [Style("claimed", "claimed"), Style("succeeded", "succeeded")]
LEVEL_STYLES = [Style("unknown", "unknown"), Style("human", "waiting for a person", "waiting")]
AGE_STYLES = [Style("oldest", "oldest unknown", "oldest")]


STEP_NAMES = {timedelta(minutes=1): "minute", timedelta(hours=1): "hour"}


@dataclass
class OverviewCharts:
    window: Window
    levels: list[Chart]  # empty for a user fenced to some tenants: the samples cover every tenant
    correctness: Chart
    capacity: Chart


def overview_charts(window: Window, fence: TenantFence) -> OverviewCharts:
    step = STEP_NAMES.get(window.step, f"{int(window.step.total_seconds() // 3600)} hours")
    level_charts = []
    if fence.everything:
        sampled = levels(window)
        level_charts = [
            lines("levels", "Unknown work and work waiting for a person", window, sampled, LEVEL_STYLES),
            lines("oldest", "Age of the oldest unknown job", window, sampled, AGE_STYLES, age_text, age_ceiling),
        ]
    return OverviewCharts(
        window=window,
        levels=level_charts,
        correctness=stacked_bars("outcomes", f"Reconciliation outcomes per {step}", window,
                                 event_counts(window, fence, OUTCOME_KINDS), OUTCOME_STYLES),
        capacity=lines("throughput", f"Deliveries per {step}", window,
                       event_counts(window, fence, THROUGHPUT_KINDS), THROUGHPUT_STYLES),
    )
