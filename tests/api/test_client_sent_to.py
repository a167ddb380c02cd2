"""reckon_client's begin says where the worker sends the effect (against a real gunicorn)."""

import pytest
from reckon_client import Client

from ledger.models import LedgerEvent
from tests.api.conftest import issue
from tests.conftest import latest_attempt

pytestmark = pytest.mark.django_db(transaction=True)


def test_lease_begin_records_where_the_effect_goes(api_server):
    client = Client(api_server.url, issue(["acme"], ["ext.alpha"], name="client-sent-to"))
    client.enqueue("cs-1", tenant="acme", action="ext.alpha", payload={"to": "ann"})
    lease = client.claim_lease("cs-1", worker="w")
    begun = lease.begin(sent_to="https://billing.example/acct_1")
    assert begun["attempt"]["sent_to"] == "https://billing.example/acct_1"
    lease.succeeded("r-1")
    assert latest_attempt("cs-1").sent_to == "https://billing.example/acct_1"
    assert LedgerEvent.objects.get(job__job_id="cs-1", kind="side_effect_started").evidence["sent_to"] == \
        "https://billing.example/acct_1"
