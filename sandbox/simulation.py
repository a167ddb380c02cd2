"""A realistic mixed workload for demos and end-to-end tests (`manage.py simulate`).

All four demo actions, several tenants, a share of social posts bound to an account their
browser profile is no longer logged into (identity mismatches), and provider faults configured
at the sandbox so that some work ends unknown — the way production loses track of effects.
With `smtp`, mail over SMTP too (`smtp.send_mail`), with faults at the SMTP sandbox.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from django.conf import settings

from ledger.providers import NoAnswer, NotSent, call
from ledger.services import enqueue_job

ACTIONS = ("billing.create_invoice", "mail.send", "social.publish_post", "vault.rotate_credential")
SMTP_ACTION = "smtp.send_mail"


@dataclass
class Workload:
    jobs: int
    fault_rate: float
    tenants: int = 3
    mismatch_rate: float = 0.1
    # Every Nth mail.send job (the first one included) goes to a malformed address, which the
    # provider refuses with a 400: failed work, as a typo in production makes it. 0: none.
    bad_address_every: int = 0
    seed: int | None = None
    prefix: str = "sim"
    smtp: bool = False
    # Set the sandbox's faults and profiles (the live demo does it on its first batch only, so that
    # a fault a person injects, or a profile a person fixes, is not undone by the next batch).
    configure: bool = True
    enqueued: list[str] = field(default_factory=list)


def configure_provider(*, fault_rate: float, seed: int | None, tenants: int) -> None:
    """Faults split evenly across the three kinds; each tenant gets a good and a switched profile."""
    base = settings.RECKON_SANDBOX_URL
    share = round(fault_rate / 3, 4)
    body = {"rates": {"error_5xx": share, "fail_before_commit": share, "drop_after_commit": share}}
    if seed is not None:
        body["seed"] = seed
    _admin("PUT", f"{base}/_admin/faults", body)
    for tenant in _tenants(tenants):
        _admin("PUT", f"{base}/_admin/profiles/{tenant}-social", {"account": f"{tenant}-brand", "session": "active"})
        _admin("PUT", f"{base}/_admin/profiles/{tenant}-switched",
               {"account": f"{tenant}-personal", "session": "active"})


def configure_smtp(*, fault_rate: float, seed: int | None) -> None:
    """The SMTP sandbox drops a connection at each of its three points, evenly: at RCPT TO (the
    send fails and is retried), after the message arrived but before it is archived (unknown, then
    not found and resent) and after it is archived (unknown, then confirmed)."""
    share = round(fault_rate / 3, 4)
    body = {"rates": {"drop_before_data": share, "drop_during_data": share, "drop_after_data": share}}
    if seed is not None:
        body["seed"] = seed
    _admin("PUT", f"{settings.RECKON_SMTP_LOOKUP_URL}/_admin/faults", body)


def wait_for_provider(timeout: float = 30.0, url: str | None = None) -> None:
    """The sandbox may still be starting (make run starts everything at once)."""
    import time

    url = url or settings.RECKON_SANDBOX_URL
    deadline = time.monotonic() + timeout
    while True:
        try:
            if call("GET", f"{url}/_health", timeout=2).ok:
                return
        except (NotSent, NoAnswer):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the provider at {url} did not answer within {timeout} s")
        time.sleep(0.25)  # polling with a bound


def _admin(method: str, url: str, body: dict) -> None:
    reply = call(method, url, body=body)
    if not reply.ok:
        raise RuntimeError(f"{method} {url} refused: {reply.status} {reply.error}")


def _tenants(count: int) -> list[str]:
    names = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka"]
    return [names[i % len(names)] + ("" if i < len(names) else str(i)) for i in range(count)]


def job_spec(n: int, rng: random.Random, *, tenant: str, mismatch_rate: float,
             actions: tuple[str, ...] = ACTIONS, bad_address_every: int = 0) -> tuple[str, dict, dict]:
    action = actions[n % len(actions)]
    if action == "billing.create_invoice":
        payload = {"customer": f"cus_{tenant}_{rng.randint(1, 99):02d}", "amount_cents": rng.randint(500, 250_000),
                   "currency": rng.choice(["EUR", "USD", "GBP"]), "description": "Monthly plan"}
        return action, payload, {}
    if action in ("mail.send", SMTP_ACTION):
        to = f"customer{rng.randint(1, 500)}@{tenant}.example"
        if action == "mail.send" and bad_address_every and (n // len(actions)) % bad_address_every == 0:
            to = to.replace("@", " at ")
        payload = {"to": to, "subject": "Your receipt", "body": f"Thank you for your order #{rng.randint(1000, 9999)}."}
        return action, payload, {}
    if action == "social.publish_post":
        profile = f"{tenant}-switched" if rng.random() < mismatch_rate else f"{tenant}-social"
        return action, {"body": f"Release notes {rng.randint(1, 99)} are out"}, {
            "profile": profile, "account": f"{tenant}-brand"}
    return action, {"name": f"{tenant}-db-{rng.choice(['primary', 'replica', 'reports'])}"}, {}


def run(workload: Workload) -> list[str]:
    rng = random.Random(workload.seed)  # nosec B311  # a seeded demo workload, reproducible on purpose; not security
    wait_for_provider()
    if workload.configure:
        configure_provider(fault_rate=workload.fault_rate, seed=workload.seed, tenants=workload.tenants)
    actions = ACTIONS
    if workload.smtp:
        wait_for_provider(url=settings.RECKON_SMTP_LOOKUP_URL)
        if workload.configure:
            configure_smtp(fault_rate=workload.fault_rate, seed=workload.seed)
        actions += (SMTP_ACTION,)
    tenants = _tenants(workload.tenants)
    for n in range(workload.jobs):
        tenant = tenants[n % len(tenants)]
        action, payload, identity = job_spec(n, rng, tenant=tenant, mismatch_rate=workload.mismatch_rate,
                                             actions=actions, bad_address_every=workload.bad_address_every)
        job = enqueue_job(job_id=f"{workload.prefix}-{n:05d}", tenant=tenant, action=action, payload=payload,
                          identity=identity, actor="simulate")
        workload.enqueued.append(job.job_id)
    return workload.enqueued
