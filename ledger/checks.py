"""System checks on the declared actions (`manage.py check`, every management command, and the
web processes before they serve): a reconciler that cannot be imported fails here, at start-up,
instead of looking like a provider outage the first time work becomes unknown."""

from __future__ import annotations

from django.core.checks import Error, Info, register
from django.utils.module_loading import import_string

from ledger.actions import registered_actions


@register()
def reconcilers_import(app_configs=None, **kwargs) -> list[Error]:
    """Every reconciler declared by a dotted path imports and is callable (the actions file's
    executors and reconcilers are imported when it is loaded; RECKON_ACTION_MODULES when listed)."""
    errors = []
    for action in registered_actions():
        if not isinstance(action.reconciler, str):
            continue
        try:
            reconciler = import_string(action.reconciler)
        except ImportError as exc:
            problem = f"cannot be imported: {exc}"
        else:
            problem = None if callable(reconciler) else "is not callable"
        if problem:
            errors.append(Error(f"{action.source}: action {action.name!r}: reconciler {action.reconciler!r} {problem}",
                                id="ledger.E001"))
    return errors


@register(deploy=True)
def webhook_secrets_set(app_configs=None, **kwargs) -> list[Info]:
    """`check --deploy` on a host says which webhook secrets its processes lack: `reconcile`
    refuses to start without them; a qcluster without them leaves those jobs to `reconcile`; the
    web processes and the sweeper never need them (so it is information, not a warning)."""
    from ledger.declarations import webhook_secret_problems

    return [Info(problem, hint="Only the processes that sign need it: `reconcile` (and a qcluster that "
                 "should reconcile webhook jobs too).", id="ledger.I001") for problem in webhook_secret_problems()]
