from django.apps import AppConfig
from django.core.checks import Warning, register
from django.db.models.signals import post_migrate


class ReckonConfig(AppConfig):
    """The project itself: wiring that belongs to no one app (the periodic schedules)."""

    name = "config"

    def ready(self) -> None:
        post_migrate.connect(_sync_schedules, dispatch_uid="reckon.sync_schedules")
        register(_a_cluster_runs_the_schedules, deploy=True)
        register(_pooled_sessions_go_direct, deploy=True)
        register(_several_hosts_find_the_primary, deploy=True)


def _sync_schedules(sender, using="default", **kwargs) -> None:
    # post_migrate is sent once per installed app with models, after the whole migration plan;
    # django-q2's signal is the one that guarantees its schedule table exists.
    if sender.label != "django_q":
        return
    from config.schedules import sync_schedules

    sync_schedules(using)


def _a_cluster_runs_the_schedules(app_configs=None, **kwargs) -> list[Warning]:
    """`check --deploy`: a deployment with no qcluster running is missing work only a cluster does."""
    from ledger.cluster import cluster_problem

    problem = cluster_problem()
    return [Warning(problem, id="config.W001")] if problem else []


def _pooled_sessions_go_direct(app_configs=None, **kwargs) -> list[Warning]:
    """`check --deploy`: behind a transaction pooler, the claims listener's LISTEN needs a session of
    its own, which only a direct URL gives (docs/deploying/high-availability.md, "Behind PgBouncer")."""
    from django.conf import settings

    if not settings.RECKON_DATABASE_POOLED or settings.RECKON_DIRECT_DATABASE_URL:
        return []
    return [Warning(
        "RECKON_DATABASE_POOLED is set (DATABASE_URL goes through a pooler in transaction mode) but "
        "RECKON_DIRECT_DATABASE_URL is not: each web process would LISTEN through the pooler, where the "
        "notifications that wake waiting claims reach whichever client holds that server session next. "
        "Waiting claims then find work only by polling (every RECKON_CLAIM_POLL_S s).",
        hint="Set RECKON_DIRECT_DATABASE_URL to the database without the pooler, for the web processes.",
        id="config.W002")]


def _several_hosts_find_the_primary(app_configs=None, **kwargs) -> list[Warning]:
    """`check --deploy`: a DATABASE_URL that lists several hosts must ask for the one that takes writes,
    or libpq keeps the first that answers, a read-only replica after a failover."""
    from django.conf import settings

    warnings = []
    for name, database in (("DATABASE_URL", settings.DATABASES["default"]),
                           ("RECKON_DIRECT_DATABASE_URL", settings.RECKON_DIRECT_DATABASE or {})):
        attrs = database.get("OPTIONS", {}).get("target_session_attrs", "any")
        if "," in database.get("HOST", "") and attrs not in ("read-write", "primary"):
            warnings.append(Warning(
                f"{name} lists several hosts with target_session_attrs={attrs}: libpq keeps the first host that "
                "answers, which after a failover is a read-only replica (every write then fails).",
                hint="Add ?target_session_attrs=read-write to the URL (docs/deploying/high-availability.md).",
                id="config.W003"))
    return warnings
