"""Sending one alert message: to the webhook (Slack-compatible JSON `{"text": ...}`) and by email
through Django's mail backend, to whichever is configured.

The webhook is POSTed to exactly the configured URL: a redirect is not followed (it would let
whoever answers there point the worker host at any address), it is a failed delivery, logged."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import send_mail

logger = logging.getLogger("reckon.alerts")

WEBHOOK_TIMEOUT_S = 5  # the evaluation holds its row lock while it sends


class NotConfigured(Exception):
    pass


class NotDelivered(Exception):
    """Every configured channel failed: the caller keeps the old state and tries again."""


def absolute(path: str) -> str:
    return settings.RECKON_CONSOLE_URL + path


def send(subject: str, text: str) -> list[str]:
    """Deliver to every configured channel; the channels that took it. Raises NotDelivered when
    none did, NotConfigured when there is no channel at all."""
    channels = []
    if settings.RECKON_ALERT_WEBHOOK_URL:
        channels.append(("webhook", lambda: _post_webhook(f"{subject}\n{text}")))
    if settings.RECKON_ALERT_EMAILS:
        channels.append(("email", lambda: send_mail(subject, text, settings.RECKON_ALERT_EMAIL_FROM,
                                                    settings.RECKON_ALERT_EMAILS)))
    if not channels:
        raise NotConfigured("no alert channel: set RECKON_ALERT_WEBHOOK_URL or RECKON_ALERT_EMAILS")
    delivered = []
    for name, deliver in channels:
        try:
            deliver()
        except Exception:  # one channel down must not silence the other
            logger.exception("alert not delivered by %s: %s", name, subject)
        else:
            delivered.append(name)
    if not delivered:
        raise NotDelivered(f"no channel took the alert {subject!r}")
    return delivered


class RedirectRefused(urllib.request.HTTPRedirectHandler):
    """Answers a 3xx with an error instead of a request to wherever it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} not followed", headers, fp)


_OPENER = urllib.request.build_opener(RedirectRefused)


def _post_webhook(text: str) -> None:
    url = settings.RECKON_ALERT_WEBHOOK_URL
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"RECKON_ALERT_WEBHOOK_URL must be an http(s) URL, got {url!r}")
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    # Raises on an answer outside 2xx, a 3xx included (RedirectRefused).
    with _OPENER.open(request, timeout=WEBHOOK_TIMEOUT_S):  # nosec B310  # an http(s) URL the operator configured
        pass
