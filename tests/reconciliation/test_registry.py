"""One registry of decisions: every decision declared once, and what reads it agrees with it."""

from approvals import services as approvals
from console.access import READERS
from console.forms import ApprovalDecisionForm, BulkDecisionForm, DecisionForm
from reconciliation import decisions
from reconciliation.registry import APPROVAL_DECISIONS, JOB_DECISIONS, REGISTRY, bulk_decisions


def test_every_job_decision_has_one_service_and_every_service_a_declaration():
    assert list(decisions.DECISIONS) == [d.name for d in JOB_DECISIONS]
    assert set(decisions._SERVICES) == {d.name for d in JOB_DECISIONS}
    assert all(callable(getattr(approvals, d.name)) for d in APPROVAL_DECISIONS)


def test_names_and_keys_are_unique_and_roles_are_console_roles():
    assert len(REGISTRY) == len(JOB_DECISIONS) + len(APPROVAL_DECISIONS)
    keys = [d.key for d in REGISTRY.values() if d.key]
    assert len(keys) == len(set(keys))
    # The job page's own keys: the note, next job, back to the queue, yes / go back, the list.
    assert not set(keys) & {"/", "]", "u", "y", "?"}
    assert {d.role for d in REGISTRY.values()} <= set(READERS)
    assert all(d.label and d.help for d in REGISTRY.values())


def test_the_forms_offer_what_the_registry_declares():
    assert [name for name, _ in DecisionForm.base_fields["decision"].choices] == [d.name for d in JOB_DECISIONS]
    assert [name for name, _ in BulkDecisionForm.base_fields["decision"].choices] == [d.name for d in bulk_decisions()]
    assert dict(ApprovalDecisionForm.base_fields["decision"].choices) == {d.name: d.label for d in APPROVAL_DECISIONS}


def test_a_decision_that_asks_first_says_what_it_will_do():
    assert {d.name for d in JOB_DECISIONS if d.confirm} == {"close_failed", "cancel_job"}
    assert all(d.danger for d in JOB_DECISIONS if d.confirm)
