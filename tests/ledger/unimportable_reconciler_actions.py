"""An action module whose reconciler's module is missing: `manage.py check` must fail on it."""

from ledger.actions import Outcome, Succeeded, action


@action("example.lost", queryable=True, reconciler="myteam.reconcilers.lost")
def lost(job) -> Outcome:
    return Succeeded()
