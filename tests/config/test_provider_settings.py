"""RECKON_PROVIDER_LIMITS: known provider limits per process, read strictly."""

import pytest

from config.settings import envrates


def test_limits_are_read_by_provider_name(monkeypatch):
    monkeypatch.setenv("RECKON_PROVIDER_LIMITS", "billing=50, mail=12.5,webhook hooks.example:443=5")
    assert envrates("RECKON_PROVIDER_LIMITS") == {"billing": 50.0, "mail": 12.5, "webhook hooks.example:443": 5.0}
    monkeypatch.setenv("RECKON_PROVIDER_LIMITS", "")
    assert envrates("RECKON_PROVIDER_LIMITS") == {}


@pytest.mark.parametrize("value", ["billing", "billing=", "=5", "billing=fast", "billing=0", "billing=-3", "billing=nan"])
def test_a_bad_limit_is_refused_with_its_item_named(monkeypatch, value):
    monkeypatch.setenv("RECKON_PROVIDER_LIMITS", value)
    with pytest.raises(ValueError, match="RECKON_PROVIDER_LIMITS takes NAME=REQUESTS_PER_S"):
        envrates("RECKON_PROVIDER_LIMITS")
