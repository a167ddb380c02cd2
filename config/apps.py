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
