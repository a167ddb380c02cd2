"""What a lease and a reconciliation share: the job they are about, as Reckon sent it."""

from __future__ import annotations

from reckon_client.errors import JsonObject


class OnJob:
    """Work on one job (`job`: the job's JSON in Reckon's answer), with its fields by name."""

    job: JsonObject

    @property
    def job_id(self) -> str:
        return str(self.job["job_id"])

    @property
    def idempotency_key(self) -> str:
        """Send it with every call to the provider, and as the effect's marker."""
        return str(self.job["idempotency_key"])

    @property
    def action(self) -> str:
        return str(self.job["action"])

    @property
    def tenant(self) -> str:
        return str(self.job["tenant"])

    @property
    def payload(self) -> JsonObject:
        return dict(self.job["payload"])
