"""RECKON_PROVIDER_LIMITS: known provider limits per process, read strictly."""

import pytest

from config.env import Rates


def test_limits_are_read_by_provider_name():
    assert Rates("RECKON_PROVIDER_LIMITS", "billing=50, mail=12.5,webhook hooks.example:443=5") == {
        "billing": 50.0, "mail": 12.5, "webhook hooks.example:443": 5.0}
    assert Rates("RECKON_PROVIDER_LIMITS", " , ") == {}


@pytest.mark.parametrize("value", ["billing", "billing=", "=5", "billing=fast", "billing=0", "billing=-3", "billing=nan"])
def test_a_bad_limit_is_refused_with_its_item_named(value):
    with pytest.raises(ValueError, match="RECKON_PROVIDER_LIMITS takes NAME=REQUESTS_PER_S"):
        Rates("RECKON_PROVIDER_LIMITS", value)
