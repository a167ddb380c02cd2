"""The alerts' periodic tasks (declared in config/schedules.py): interfaces, not logic."""

from alerts.evaluate import evaluate_alerts as _evaluate
from alerts.sampling import sample_levels as _sample


def evaluate_alerts() -> int:
    return len(_evaluate())


def sample_levels() -> None:
    _sample()
