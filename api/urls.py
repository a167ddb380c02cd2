from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

from api import batches, reconciliations  # noqa: F401 - their endpoints join the API
from api.http import edge, error_response
from api.views import api

app_name = "api"


@csrf_exempt
def _no_endpoint(request, rest: str = ""):
    return error_response(404, "not_found", f"no API endpoint at {request.path}")


ninja_patterns, _, _ = api.urls
for pattern in ninja_patterns:
    pattern.callback = edge(pattern.callback)

# Job ids containing "/" cannot be addressed here; the API refuses to enqueue them.
urlpatterns = [*ninja_patterns, re_path(r"^(?P<rest>[\s\S]*)$", edge(_no_endpoint))]
