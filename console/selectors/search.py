"""The header's search: any job, resolved ones included, by the start of its id, key or marker.

Case-insensitive prefix matching on the job id and on the idempotency key (which is also the
marker our providers carry), in two index scans (job_search_job_id, job_search_key:
`UPPER(column) text_pattern_ops`), each in its index's order and stopped after a page of rows:
a search costs the same on a thousand jobs as on millions. Written in SQL because the order
that lets PostgreSQL walk such an index (`USING ~<~`) is not one the ORM can say; without it the
planner may pick a heap scan for a prefix most jobs share, which stops early only when the
matches happen to lie near the start of the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from console.access import TenantFence
from ledger.models import Job

SHOWN = 50
COLUMNS = ("id", "job_id", "tenant", "action", "status", "idempotency_key", "holder", "held_since",
           "created_at", "updated_at")
_SIDE = (
    "(SELECT id FROM ledger_job WHERE UPPER({column}::text) LIKE UPPER(%s) ESCAPE '\\'{fence} "
    "ORDER BY UPPER({column}::text) USING ~<~ LIMIT %s)"
)


@dataclass
class SearchResult:
    query: str
    jobs: list[Job]
    more: bool  # more jobs match than are shown: type more of the id

    @property
    def exact(self) -> Job | None:
        """The one job whose id or key is the query itself (any case), when it is the only match."""
        if len(self.jobs) == 1 and not self.more:
            job, wanted = self.jobs[0], self.query.upper()
            if wanted in (job.job_id.upper(), job.idempotency_key.upper()):
                return job
        return None


def like_prefix(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching strings that start with `text`, taken literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def matching_sql(query: str, fence: TenantFence, limit: int) -> tuple[str, list]:
    """The statement selecting the ids of up to `limit` jobs by id prefix and up to `limit` by key
    prefix (duplicates removed), and its parameters."""
    fence_sql, fence_params = ("", []) if fence.everything else (" AND tenant = ANY(%s)", [sorted(fence.tenants)])
    parts, params = [], []
    for column in ("job_id", "idempotency_key"):
        parts.append(_SIDE.format(column=column, fence=fence_sql))
        params += [like_prefix(query), *fence_params, limit]
    return " UNION ".join(parts), params


def matching_ids(query: str, fence: TenantFence, limit: int) -> list[int]:
    if fence.empty:
        return []
    with connection.cursor() as cursor:
        cursor.execute(*matching_sql(query, fence, limit))
        return [row[0] for row in cursor.fetchall()]


def find_jobs(query: str, fence: TenantFence, *, shown: int = SHOWN) -> SearchResult:
    """Jobs of the fenced tenants whose id or key starts with `query`, in any case; exact matches
    first, then by id. An empty query finds nothing."""
    query = query.strip()
    if not query:
        return SearchResult(query, [], False)
    ids = matching_ids(query, fence, shown + 1)  # one row past the page says whether more match
    wanted = query.upper()
    ordered = sorted(
        Job.objects.filter(pk__in=ids).only(*COLUMNS),
        key=lambda job: (wanted not in (job.job_id.upper(), job.idempotency_key.upper()), job.job_id.upper(), job.pk),
    )
    return SearchResult(query, ordered[:shown], len(ordered) > shown)
