"""The alerts' periodic tasks (declared in config/schedules.py): interfaces, not logic."""

from alerts import evaluate, sampling


def evaluate_alerts() -> int:
    """Notifications sent by this pass."""
    return len(evaluate.evaluate_alerts())


def sample_levels() -> None:
    sampling.sample_levels()
