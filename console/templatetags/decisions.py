"""The registry of decisions (`reconciliation.registry`) and the queue's tabs, for the keyboard
shortcut list: what a key does is read from where the decision is declared."""

from django import template

from console.selectors.queue import TABS
from reconciliation.registry import JOB_DECISIONS

register = template.Library()


@register.simple_tag
def job_decisions():
    """Every decision on a job that has a key, in the order the job page offers them."""
    return [decision for decision in JOB_DECISIONS if decision.key]


@register.simple_tag
def queue_tabs():
    """The queue's tabs as (key, label); a tab's shortcut is its key's first letter."""
    return [(key, label) for key, (label, _) in TABS.items()]
