"""django-q2 tasks for the end-to-end comparison: the same provider call without the ledger."""

from django.conf import settings

from ledger.providers import call


def warm_up() -> str:
    return "ok"


def bare_send(tag: str) -> int:
    reply = call("POST", f"{settings.RECKON_MAIL_URL}/messages",
                 body={"to": "a@bench.example", "subject": "s", "body": tag}, headers={"X-Reckon-Marker": tag})
    return reply.status
