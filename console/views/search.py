from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from console.access import READERS, fence_of, role_required
from console.forms import SearchForm
from console.selectors.history import archived_jobs
from console.selectors.search import find_jobs


@require_GET
@role_required(*READERS)
def search(request: HttpRequest) -> HttpResponse:
    """Any job the user may see, by any part of its id, key or marker, a value of its payload or a
    provider's answer. The job a whole id or key names opens at once: the usual case is an id
    pasted from an alert or a customer's email."""
    form = SearchForm(request.GET)
    fence = fence_of(request.user)
    result = find_jobs(form.query(), fence, cursor=form.cursor())
    if result.exact is not None and not request.htmx:  # results that follow the typing never navigate away
        return redirect("job_detail", job_id=result.exact.job_id)
    template = "console/search.html#search-results" if request.htmx else "console/search.html"
    pages = {
        "next_query": urlencode({"q": result.query, "before": result.next_cursor}) if result.next_cursor else None,
        "first_query": urlencode({"q": result.query}) if result.cursor else None,
    }
    # Jobs whose history was archived (issue 28) are found by the start of their id or key.
    archived = [] if result.cursor else archived_jobs(result.query, fence)
    return render(request, template, {"form": form, "result": result, "archived": archived, **pages})
