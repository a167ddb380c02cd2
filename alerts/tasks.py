"""The alerts' periodic tasks (declared in config/schedules.py): interfaces, not logic."""

from alerts import evaluate, sampling


def evaluate_alerts() -> int:
    """Notifications sent by this pass."""
    return len(evaluate.evaluate_alerts())


def sample_history() -> None:
    """What the overview's charts draw: the levels now, the events counted per hour."""
    sampling.sample_levels()
    sampling.count_events()
