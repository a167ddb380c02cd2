"""The OpenAPI 3.1 description of /api/v1/, written out by hand beside the views it describes."""

from __future__ import annotations

from functools import cache

from ledger.states import Delivery, Execution, JobStatus, SideEffect

JSON = "application/json"


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _string(max_length: int, description: str = "", **extra) -> dict:
    return {"type": "string", "minLength": 1, "maxLength": max_length, "description": description, **extra}


def _body(properties: dict, required: list[str]) -> dict:
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"required": True, "content": {JSON: {"schema": schema}}}


def _answer(description: str, schema: dict) -> dict:
    return {"description": description, "content": {JSON: {"schema": schema}}}


ERRORS = {
    "400": "invalid body or fields (`fields` names each one)",
    "401": "no token, an unknown token or a revoked token",
    "403": "the token's scope does not cover this tenant and action",
    "404": "no such job",
    "405": "wrong method",
    "413": "body over the size limit",
}


def _errors(*codes: str, conflict: str = "") -> dict:
    answers = {code: {"$ref": f"#/components/responses/E{code}"} for code in codes}
    if conflict:
        answers["409"] = _answer(conflict, _ref("Error"))
    return answers


LEASE = {
    "owner": _string(200, "the worker that holds the lease (as given when claiming)"),
    "fencing_token": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1, "description": "from the claim"},
}
STALE = "stale_lease: the lease is no longer current (nothing changed; the rejection is recorded)"
EVIDENCE = {"type": "object", "description": "what the worker saw, stored with the event"}


def _lease_write(summary: str, extra: dict, required: list[str], ok: str, conflict: str) -> dict:
    return {
        "post": {
            "summary": summary,
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "requestBody": _body({**LEASE, **extra}, ["owner", "fencing_token", *required]),
            "responses": {"200": _answer(ok, _ref("Result")), **_errors(*ERRORS, conflict=conflict)},
        }
    }


@cache
def openapi_document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Reckon worker API",
            "version": "1",
            "description": (
                "Enqueue jobs and run Reckon's safe worker loop from any language: claim -> "
                "(verify identity) -> begin side effect -> call the provider with the job's "
                "idempotency key -> record success, failure or unknown. Every write after the "
                "claim carries the lease's owner and fencing token; a stale one changes nothing."
            ),
        },
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}],
        "paths": {
            "/jobs": {
                "post": {
                    "summary": "Enqueue a job (idempotent on job_id)",
                    "requestBody": _body(
                        {
                            "job_id": _string(200, "the caller's id for the logical job; no '/'"),
                            "tenant": _string(100),
                            "action": _string(100, "a registered action, e.g. mail.send"),
                            "payload": {"type": "object"},
                            "identity": {
                                "type": "object",
                                "description": "the identity the work must run as",
                            },
                        },
                        ["job_id", "tenant", "action", "payload"],
                    ),
                    "responses": {
                        "201": _answer("created", _ref("Job")),
                        "200": _answer("the same job was already enqueued; it is returned", _ref("Job")),
                        **_errors(
                            "400", "401", "403", "405", "413", conflict="job_conflict: same id, other work"
                        ),
                    },
                }
            },
            "/jobs/{job_id}": {
                "get": {
                    "summary": "A job and its attempts",
                    "parameters": [{"$ref": "#/components/parameters/JobId"}],
                    "responses": {
                        "200": _answer("the job", _ref("Job")),
                        **_errors("401", "403", "404", "405"),
                    },
                }
            },
            "/jobs/{job_id}/claim": {
                "post": {
                    "summary": "Lease the job's queued attempt, with the next fencing token",
                    "parameters": [{"$ref": "#/components/parameters/JobId"}],
                    "requestBody": _body({"worker": _string(200, "unique per delivery")}, ["worker"]),
                    "responses": {
                        "201": _answer("leased", _ref("Lease")),
                        **_errors(
                            *ERRORS,
                            conflict=(
                                "claim_refused, with `reason`: duplicate_delivery, previous_attempt_unknown, "
                                "attempt_blocked, attempts_exhausted, not_claimable"
                            ),
                        ),
                    },
                }
            },
            "/jobs/{job_id}/lease/renew": {
                "post": {
                    "summary": "Extend the lease while owner and token still match",
                    "parameters": [{"$ref": "#/components/parameters/JobId"}],
                    "requestBody": _body(LEASE, ["owner", "fencing_token"]),
                    "responses": {
                        "200": _answer("renewed", _ref("Lease")),
                        **_errors(*ERRORS, conflict=STALE),
                    },
                }
            },
            "/jobs/{job_id}/lease/identity": _lease_write(
                "Report the identity the worker really runs as; a mismatch blocks the attempt",
                {"observed": {"type": "object"}},
                ["observed"],
                "verified",
                STALE + "; identity_mismatch: the attempt is now blocked",
            ),
            "/jobs/{job_id}/lease/begin": _lease_write(
                "Mark the side effect submitted; only then call the provider",
                {},
                [],
                "submitted",
                STALE + "; invalid_transition: already begun, or identity not verified",
            ),
            "/jobs/{job_id}/lease/success": _lease_write(
                "The provider confirmed the effect",
                {"result_ref": {"type": "string", "maxLength": 500}, "evidence": EVIDENCE},
                [],
                "succeeded",
                STALE + "; invalid_transition: nothing was begun",
            ),
            "/jobs/{job_id}/lease/failure": _lease_write(
                "A definitive refusal: the provider proved nothing happened",
                {
                    "error": _string(2000),
                    "retryable": {
                        "type": "boolean",
                        "default": False,
                        "description": "queue the next attempt",
                    },
                    "evidence": EVIDENCE,
                },
                ["error"],
                "failed",
                STALE,
            ),
            "/jobs/{job_id}/lease/unknown": _lease_write(
                "The worker lost the ability to observe whether the effect happened",
                {"reason": _string(2000), "evidence": EVIDENCE},
                ["reason"],
                "unknown: the job goes to reconciliation",
                STALE + "; invalid_transition: nothing was begun",
            ),
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": _answer("OpenAPI 3.1", {"type": "object"})},
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "a worker token"}
            },
            "parameters": {
                "JobId": {"name": "job_id", "in": "path", "required": True, "schema": _string(200)},
            },
            "responses": {f"E{code}": _answer(text, _ref("Error")) for code, text in ERRORS.items()},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                                "reason": {"type": "string", "description": "why a claim was refused"},
                                "fields": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        }
                    },
                },
                "Attempt": {
                    "type": "object",
                    "properties": {
                        "number": {"type": "integer"},
                        "delivery": {"enum": list(Delivery.values)},
                        "execution": {"enum": list(Execution.values)},
                        "side_effect": {"enum": list(SideEffect.values)},
                        "lease_owner": {"type": "string"},
                        "fencing_token": {"type": ["integer", "null"]},
                        "lease_expires_at": {"type": ["string", "null"], "format": "date-time"},
                        "heartbeat_at": {"type": ["string", "null"], "format": "date-time"},
                        "observed_identity": {"type": ["object", "null"]},
                        "result_ref": {"type": "string"},
                        "error": {"type": "string"},
                        "version": {"type": "integer"},
                        "created_at": {"type": "string", "format": "date-time"},
                        "updated_at": {"type": "string", "format": "date-time"},
                    },
                },
                "Job": {
                    "type": "object",
                    "properties": {
                        "job_id": {"type": "string"},
                        "tenant": {"type": "string"},
                        "action": {"type": "string"},
                        "payload": {"type": "object"},
                        "identity": {"type": "object"},
                        "idempotency_key": {
                            "type": "string",
                            "description": "send it on every provider call",
                        },
                        "status": {"enum": list(JobStatus.values)},
                        "created_at": {"type": "string", "format": "date-time"},
                        "updated_at": {"type": "string", "format": "date-time"},
                        "attempts": {"type": "array", "items": _ref("Attempt")},
                    },
                },
                "Lease": {
                    "type": "object",
                    "properties": {
                        "job_id": {"type": "string"},
                        "attempt": {"type": "integer"},
                        "owner": {"type": "string"},
                        "fencing_token": {"type": "integer"},
                        "expires_at": {"type": "string", "format": "date-time"},
                        "job": _ref("Job"),
                    },
                },
                "Result": {
                    "type": "object",
                    "properties": {
                        "job_id": {"type": "string"},
                        "status": {"enum": list(JobStatus.values)},
                        "attempt": _ref("Attempt"),
                    },
                },
            },
        },
    }
