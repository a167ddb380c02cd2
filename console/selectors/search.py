"""The header's search: any job, resolved ones included, by the start of its id, key or marker.

Case-insensitive prefix matching on the job id and on the idempotency key (which is also the
marker our providers carry). Each side is one index scan that stops after a page of rows
(job_search_job_id, job_search_key: `UPPER(col) text_pattern_ops`), so a search costs the same
on a thousand jobs as on millions; the two sides are joined with UNION, never with an OR that
would make PostgreSQL collect every match before the LIMIT.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.access import TenantFence
from ledger.models import Job

SHOWN = 50
COLUMNS = ("id", "job_id", "tenant", "action", "status", "idempotency_key", "holder", "held_since",
           "created_at", "updated_at")


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


def find_jobs(query: str, fence: TenantFence, *, shown: int = SHOWN) -> SearchResult:
    """Jobs of the fenced tenants whose id or key starts with `query`, in any case; exact matches
    first, then by id. An empty query finds nothing."""
    query = query.strip()
    if not query:
        return SearchResult(query, [], False)
    jobs = fence.jobs().only(*COLUMNS)
    # Each side is ordered as its index is (so the LIMIT stops the scan early), one row past the page.
    by_id = jobs.filter(job_id__istartswith=query).order_by()[: shown + 1]
    by_key = jobs.filter(idempotency_key__istartswith=query).order_by()[: shown + 1]
    found = {job.pk: job for job in by_id.union(by_key)}
    wanted = query.upper()
    ordered = sorted(
        found.values(),
        key=lambda job: (wanted not in (job.job_id.upper(), job.idempotency_key.upper()), job.job_id.upper(), job.pk),
    )
    return SearchResult(query, ordered[:shown], len(ordered) > shown)
