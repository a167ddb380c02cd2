"""Writing many django-q2 tasks into its ORM queue in one INSERT (imported once Django is set up)."""

from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ


class CollectingBroker(ORM):
    """django-q2's ORM broker that keeps the packages `async_task` builds and signs, and writes
    them into the queue table in one INSERT (`write`) instead of one INSERT each."""

    def __init__(self, list_key=None):
        super().__init__(list_key)
        self.packages: list = []

    def enqueue(self, task):
        self.packages.append(task)

    def write(self) -> None:
        key, now = self.list_key or Conf.CLUSTER_NAME, timezone.now()
        self.get_connection().bulk_create([OrmQ(key=key, payload=package, lock=now) for package in self.packages])
        self.packages.clear()
