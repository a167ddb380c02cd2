"""My shift: what I decided, held and commented since I signed in (or in a range I ask for)."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import READERS, fence_of, role_required
from console.forms import ShiftForm
from console.selectors.shift import MOST, my_shift


@require_GET
@role_required(*READERS)
def shift(request: HttpRequest) -> HttpResponse:
    form = ShiftForm(request.GET)
    since, until = form.range()
    context = {"form": form, "shift": my_shift(request.user, fence_of(request.user), since=since, until=until),
               "most": MOST}
    return render(request, "console/shift.html", context)
