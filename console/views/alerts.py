from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from alerts import services
from alerts.evaluate import channels_configured
from console.access import OPERATORS, READERS, fence_of, has_role, role_required
from console.forms import AlertActionForm
from console.selectors.alerts import alert_history, alert_rows, silences


@require_GET
@role_required(*READERS)
def alerts(request: HttpRequest) -> HttpResponse:
    fence = fence_of(request.user)
    rows = alert_rows(fence)
    return render(request, "console/alerts.html", {
        "firing": [row for row in rows if row.reading.firing],
        "clear": [row for row in rows if not row.reading.firing],
        # The history speaks for every tenant (the evaluation's counts by tenant, the notes people
        # typed): only a reader of every tenant reads it.
        "history": alert_history() if fence.everything else None,
        "can_act": _may_act(request.user),
        "silences": silences(),
        "channels": channels_configured(),
        "form": AlertActionForm(),
    })


def _may_act(user) -> bool:
    """An alert speaks for every tenant (one message, one silence): only an operator of every
    tenant may acknowledge or silence it, so no tenant's operator can mute another tenant's news."""
    return has_role(user, [OPERATORS]) and fence_of(user).everything


@require_POST
@role_required(OPERATORS)
def act(request: HttpRequest, condition: str) -> HttpResponse:
    """Acknowledge or silence one alert; refused with the reason, nothing changed."""
    if not _may_act(request.user):
        return HttpResponseForbidden("An alert covers every tenant: only an operator of every tenant may "
                                     "acknowledge or silence it.")
    form = AlertActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(e for errors in form.errors.values() for e in errors))
        return redirect("alerts")
    action, note = form.cleaned_data["action"], form.cleaned_data["note"]
    try:
        if action == "acknowledge":
            services.alert_acknowledge(condition=condition, username=request.user.get_username(), note=note)
        else:
            services.alert_silence(condition=condition, username=request.user.get_username(), note=note,
                                   hours=form.cleaned_data["hours"] or 0)
    except services.AlertRefused as refused:
        messages.error(request, str(refused))
    else:
        messages.success(request, "Acknowledged." if action == "acknowledge"
                         else f"Silenced for {form.cleaned_data['hours']:g} h, or until the alert resolves, whichever comes "
                         "first.")
    return redirect("alerts")
