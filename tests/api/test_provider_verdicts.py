"""reckon_client's classification of a provider's answers: only what proves nothing happened is
retried; everything that leaves the question open is unknown."""

from __future__ import annotations

import http.client
import socket

import pytest
from reckon_client import Verdict, classify_error, classify_status


@pytest.mark.parametrize(("status", "verdict"), [
    (200, Verdict.SUCCEEDED), (201, Verdict.SUCCEEDED),
    (429, Verdict.RETRYABLE), (503, Verdict.RETRYABLE),  # the provider says it did nothing
    (400, Verdict.FAILED), (402, Verdict.FAILED), (422, Verdict.FAILED),
    (409, Verdict.UNKNOWN),  # "in progress" for this key, as after a dropped connection
    (500, Verdict.UNKNOWN), (502, Verdict.UNKNOWN), (504, Verdict.UNKNOWN),
])
def test_a_status_proves_what_it_proves(status, verdict):
    assert classify_status(status) is verdict


def test_no_answer_is_retryable_only_when_nothing_left():
    assert classify_error(ConnectionRefusedError(111, "refused"), request_sent=False) is Verdict.RETRYABLE
    assert classify_error(socket.gaierror("no such host"), request_sent=False) is Verdict.RETRYABLE
    assert classify_error(TimeoutError("timed out"), request_sent=False) is Verdict.RETRYABLE  # connecting
    for dropped in (TimeoutError("timed out"), ConnectionResetError(104, "reset"),
                    http.client.RemoteDisconnected("closed"), http.client.IncompleteRead(b"")):
        assert classify_error(dropped, request_sent=True) is Verdict.UNKNOWN
