"""A shift ends when its person signs out (or their session's bound signs them out): the jobs they
said they were on are released, each with its event, so the next shift does not inherit holds of
someone who has gone. Holds that outlive a shift without a sign-out end after
RECKON_HOLD_MAX_HOURS (ledger.services.end_stale_holds, on the schedule)."""

from __future__ import annotations

from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver

from ledger.services import end_holds


@receiver(user_logged_out)
def _shift_ended(sender, request, user, **kwargs) -> None:
    if user is None:
        return
    name = user.get_username()
    end_holds(holder=name, note=f"released: {name} signed out (their shift ended)")
