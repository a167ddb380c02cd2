"""The console's forms: filters for the read pages, and the decisions people make."""

from __future__ import annotations

from django import forms

from console.job_ids import reject_control_characters
from console.selectors.approvals import DISSENT, SORTS, ApprovalFilter
from console.selectors.audit import AuditFilter
from console.selectors.queue import TABS, QueueFilter
from ledger.actions import registered_actions
from reconciliation.registry import APPROVAL_DECISIONS, JOB_DECISIONS, REGISTRY, bulk_decisions

# A corrected payload typed into the job page: as large as the API lets a payload be enqueued.
PAYLOAD_MAX_CHARS = 64 * 1024
AGES = [("", "any age"), ("5", "older than 5 min"), ("60", "older than 1 h"), ("1440", "older than 1 day")]
PAGE_SIZES = [(50, "50"), (100, "100"), (200, "200"), (500, "500")]


class NoteField(forms.CharField):
    def __init__(self, **kwargs):
        super().__init__(
            label="Note",
            max_length=2000,
            widget=forms.Textarea(attrs={"rows": 2, "required": True}),
            help_text="Required: why, for the audit trail.",
            **kwargs,
        )


class QueueFilterForm(forms.Form):
    tab = forms.ChoiceField(choices=[(k, label) for k, (label, _) in TABS.items()], required=False)
    status = forms.ChoiceField(required=False)
    action = forms.ChoiceField(required=False)
    tenant = forms.CharField(required=False, max_length=100, validators=[reject_control_characters])
    # The menu offers the usual ages; a link (an alert's) may ask for any number of minutes.
    # At most 100 years: beyond that the cut-off is before year 1 (a link asking more is ignored).
    older_than = forms.IntegerField(label="Age", min_value=1, max_value=100 * 365 * 24 * 60, required=False,
                                    widget=forms.Select(choices=AGES))
    # An alert's link asks for its bound to the second (never rounded to a minute).
    older_than_s = forms.FloatField(min_value=0, max_value=100 * 365 * 24 * 3600, required=False,
                                    widget=forms.HiddenInput)
    q = forms.CharField(
        label="Job id or key", required=False, max_length=320, validators=[reject_control_characters]
    )
    sort = forms.ChoiceField(choices=[("oldest", "oldest first"), ("newest", "newest first")], required=False)
    # The menu offers the usual sizes; a link may ask for any size up to the bound.
    size = forms.IntegerField(
        label="Rows", min_value=1, max_value=500, required=False, widget=forms.Select(choices=PAGE_SIZES)
    )
    after = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        tab = (data or {}).get("tab") if (data or {}).get("tab") in TABS else "human"
        self.fields["status"].choices = [("", "all statuses")] + [(s.value, s.value) for s in TABS[tab][1]]
        asked = str((data or {}).get("older_than", ""))
        if asked.isdigit() and asked not in dict(AGES):  # the menu shows the age a link asked for
            self.fields["older_than"].widget.choices = [*AGES, (asked, f"older than {asked} min")]
        self.fields["action"].choices = [("", "all actions")] + [
            (a.name, a.name) for a in registered_actions()
        ]

    def spec(self) -> QueueFilter:
        """The filter to apply: a field that does not validate is ignored, not an error page."""
        self.is_valid()
        data = {name: value for name, value in self.cleaned_data.items() if name not in self.errors}
        return QueueFilter(
            tab=data.get("tab") or "human",
            # A status the tab does not list is kept, so the queue says so instead of listing everything.
            status=data.get("status") or str(self.data.get("status") or "")[:64],
            action=data.get("action") or "",
            tenant=(data.get("tenant") or "").strip(),
            older_than=data.get("older_than"),
            older_than_s=data.get("older_than_s"),
            search=(data.get("q") or "").strip(),
            newest_first=data.get("sort") == "newest",
            after=data.get("after") or "",
            size=data.get("size") or 50,
        )


class SearchForm(forms.Form):
    q = forms.CharField(label="Find a job", required=False, max_length=320, validators=[reject_control_characters])
    before = forms.CharField(required=False, max_length=20, widget=forms.HiddenInput)  # the page's cursor

    def query(self) -> str:
        """What to look for; a query that does not validate finds nothing (the page says why)."""
        return (self.cleaned_data.get("q") or "").strip() if self.is_valid() else ""

    def cursor(self) -> str:
        return (self.cleaned_data.get("before") or "") if self.is_valid() else ""


def _choices(decisions) -> list[tuple[str, str]]:
    return [(decision.name, decision.label) for decision in decisions]


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=_choices(JOB_DECISIONS))
    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    note = NoteField()
    # For a decision that takes a corrected payload (JSON; the service validates it).
    payload = forms.CharField(required=False, max_length=PAYLOAD_MAX_CHARS, strip=False)
    # The second, explicit step of a destructive decision (rendered by the server, no JS dialog).
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    # Set once the person deciding has been told that someone else is on the job.
    despite_holder = forms.BooleanField(required=False, widget=forms.HiddenInput)


class HoldForm(forms.Form):
    hold = forms.ChoiceField(choices=[("take", "I'm on it"), ("take_over", "Take over"), ("release", "Release"),
                                      ("release_other", "Release their hold")])
    # What the holder is doing: shown with their name in the queue and the panel.
    reason = forms.CharField(required=False, max_length=500, validators=[reject_control_characters])


class EvidenceField(forms.CharField):
    def __init__(self, **kwargs):
        super().__init__(label="Evidence", max_length=2000, required=False,
                         widget=forms.Textarea(attrs={"rows": 1}),
                         help_text="What you saw, for confirm or not found (the provider's log line, a ticket).",
                         **kwargs)


class BulkEvidence:
    """A decision that takes evidence, on many jobs at once, needs it: one sentence says what was
    seen for every one of them (one at a time, the job page's note carries it)."""

    def clean(self):
        cleaned = super().clean()
        decision = REGISTRY.get(cleaned.get("decision", ""))
        if decision is not None and decision.takes_evidence and not (cleaned.get("evidence") or "").strip():
            self.add_error("evidence", f"{decision.label} on many jobs needs evidence: say what you saw "
                                       "for every one of them (the provider's log line, a ticket).")
        return cleaned


class BulkDecisionForm(BulkEvidence, forms.Form):
    decision = forms.ChoiceField(choices=_choices(bulk_decisions()))
    note = NoteField()
    evidence = EvidenceField()
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        self.selected: list[tuple[str, int]] = []
        for value in data.getlist("selected") if data is not None else []:
            version, _, job_id = value.partition(":")
            if version.isdigit() and job_id:
                self.selected.append((job_id, int(version)))

    def clean(self):
        if not self.selected:
            raise forms.ValidationError("Select at least one job.")
        return super().clean()


class BulkRunForm(BulkEvidence, forms.Form):
    """The bulk form with "every job matching this filter" ticked: no selection, the filter."""

    decision = forms.ChoiceField(choices=_choices(bulk_decisions()))
    note = NoteField()
    evidence = EvidenceField()
    # Cancelling every matching job is confirmed on a page of its own first.
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)


class ApprovalDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=_choices(APPROVAL_DECISIONS))
    note = NoteField()


class ApprovalFilterForm(forms.Form):
    action = forms.ChoiceField(required=False)
    tenant = forms.CharField(required=False, max_length=100, validators=[reject_control_characters])
    requested_by = forms.CharField(label="Requested by", required=False, max_length=200,
                                   validators=[reject_control_characters])
    q = forms.CharField(label="Job id", required=False, max_length=320, validators=[reject_control_characters])
    dissent = forms.ChoiceField(label="Dissent", choices=list(DISSENT.items()), required=False)
    sort = forms.ChoiceField(label="Order", choices=list(SORTS.items()), required=False)

    FIELDS = ("action", "tenant", "requested_by", "q", "dissent", "sort")

    def __init__(self, data=None, *, actions=(), **kwargs):
        super().__init__(data, **kwargs)
        asked = str((data or {}).get("action") or "")
        self.fields["action"].choices = [("", "all actions")] + [(a, a) for a in sorted({*actions, *([asked] if asked else [])})]

    def spec(self) -> ApprovalFilter:
        """The filter to apply: a field that does not validate is ignored, not an error page."""
        self.is_valid()
        data = {name: value for name, value in self.cleaned_data.items() if name not in self.errors}
        return ApprovalFilter(action=data.get("action") or "", tenant=(data.get("tenant") or "").strip(),
                              requested_by=(data.get("requested_by") or "").strip(),
                              search=(data.get("q") or "").strip(), dissent=data.get("dissent") or "",
                              sort=data.get("sort") or "oldest")


class BulkApprovalForm(forms.Form):
    """Approve or reject the selected requests, or every one the filter matches (`scope`)."""

    decision = forms.ChoiceField(choices=_choices(APPROVAL_DECISIONS))
    note = NoteField()
    scope = forms.ChoiceField(choices=[("selected", "selected"), ("filter", "every request matching")],
                              required=False)
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        self.selected = [int(v) for v in (data.getlist("selected") if data is not None else []) if v.isdigit()]


class AuditFilterForm(forms.Form):
    q = forms.CharField(label="Find", required=False, max_length=320, validators=[reject_control_characters])
    job = forms.CharField(label="Job id", required=False, max_length=200, validators=[reject_control_characters])
    key = forms.CharField(
        label="Idempotency key", required=False, max_length=320, validators=[reject_control_characters]
    )
    actor = forms.CharField(required=False, max_length=200, validators=[reject_control_characters])
    kind = forms.CharField(required=False, max_length=64, validators=[reject_control_characters])
    since = forms.DateTimeField(
        label="From", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = forms.DateTimeField(
        label="Until", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    before = forms.CharField(required=False, widget=forms.HiddenInput)
    size = forms.IntegerField(min_value=1, max_value=1000, required=False, widget=forms.HiddenInput)

    def spec(self) -> AuditFilter:
        self.is_valid()
        data = {name: value for name, value in self.cleaned_data.items() if name not in self.errors}
        return AuditFilter(
            q=(data.get("q") or "").strip(),
            job=(data.get("job") or "").strip(),
            key=(data.get("key") or "").strip(),
            actor=(data.get("actor") or "").strip(),
            kind=(data.get("kind") or "").strip(),
            since=data.get("since"),
            until=data.get("until"),
            before=data.get("before") or "",
            size=data.get("size") or 100,
        )


class ShiftForm(forms.Form):
    since = forms.DateTimeField(label="From", required=False,
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    until = forms.DateTimeField(label="Until", required=False,
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def range(self):
        """(since, until) asked for; a field that does not validate is ignored (since: my sign-in)."""
        self.is_valid()
        data = {name: value for name, value in self.cleaned_data.items() if name not in self.errors}
        return data.get("since"), data.get("until")


SILENCE_HOURS = [(1, "1 hour"), (4, "4 hours"), (24, "24 hours")]


class AlertActionForm(forms.Form):
    action = forms.ChoiceField(choices=[("acknowledge", "Acknowledge"), ("silence", "Silence")])
    note = NoteField()
    # The menu's lengths; the service refuses anything beyond RECKON_ALERT_SILENCE_MAX_H.
    hours = forms.FloatField(label="For", required=False, min_value=0, widget=forms.Select(choices=SILENCE_HOURS))
