"""The worker loop's three common steps as database functions: one round trip each.

claim -> begin side effect -> record success is the ledger's hot path. Each function does what
the Python transition does for the ordinary case (lock the job row; then, in a new statement so
it sees what the lock's previous holder wrote, compare-and-set the attempt on every condition the
Python path checks; update the job; insert the event; all in the caller's transaction) and
returns the changed attempt row. In any other case it changes nothing and
returns no row; ledger.services.worker then runs the general Python path, which decides and
records every refusal. Called only from ledger.services.worker.
"""

from django.db import migrations

SNAPSHOT = (
    "jsonb_build_object('job', {status}, 'attempt', a.number, 'delivery', a.delivery_state, "
    "'execution', a.execution_state, 'side_effect', a.side_effect_state)"
)

# What the attempt was: pinned by the compare-and-set's conditions (and the consistency checks).
BEFORE = (
    "jsonb_build_object('job', {status}, 'attempt', a.number, 'delivery', '{delivery}', "
    "'execution', '{execution}', 'side_effect', '{side_effect}')"
)

EVENT = (
    "INSERT INTO ledger_ledgerevent (job_id, attempt_id, actor_type, actor, kind, \"before\", \"after\", note, "  # nosec B608  # a PL/pgSQL template filled from this module's constants
    "evidence, prev_hash, hash) VALUES (j.id, a.id, 'worker', left({actor}, 200), '{kind}', before, "
    + SNAPSHOT.format(status="{status}")
    + ", '', {evidence}, '', '');"
)

# A claim need not be durable when it is its own transaction (p_own_transaction): if a crash
# loses it, the worker's next step (a compare-and-set on owner and token) is refused, and that
# step's synchronous commit flushes the WAL up to and including the claim. So the claim commits
# without waiting for the WAL flush; begin side effect and every result still wait for it.
CLAIM = f"""
CREATE OR REPLACE FUNCTION reckon_claim(p_job text, p_worker text, p_ttls jsonb, p_own_transaction boolean)
RETURNS SETOF ledger_attempt LANGUAGE plpgsql AS $$
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
    now_ts timestamptz;
    token bigint;
BEGIN
    SELECT * INTO j FROM ledger_job WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND OR j.recovery_pending OR j.status IN ('succeeded', 'failed', 'cancelled')
       OR NOT p_ttls ? j.action THEN
        RETURN;
    END IF;
    now_ts := clock_timestamp();
    token := j.lease_seq + 1;
    UPDATE ledger_attempt SET version = version + 1, updated_at = statement_timestamp(),
        delivery_state = 'leased', execution_state = 'running', lease_owner = p_worker, lease_token = token,
        lease_expires_at = now_ts + (p_ttls ->> j.action)::float8 * interval '1 second', heartbeat_at = now_ts
    WHERE id = (SELECT id FROM ledger_attempt WHERE job_id = j.id ORDER BY number DESC LIMIT 1)
      AND execution_state = 'not_started'
    RETURNING * INTO a;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_own_transaction THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    before := {BEFORE.format(status="j.status", delivery="queued", execution="not_started",
                             side_effect="not_attempted")};
    UPDATE ledger_job SET status = 'running', updated_at = statement_timestamp(), lease_seq = token WHERE id = j.id;
    {EVENT.format(actor="p_worker", kind="claimed", status="'running'",
                  evidence="jsonb_build_object('fencing_token', token, 'lease_ttl_s', p_ttls -> j.action)")}
    RETURN NEXT a;
END $$;
"""  # nosec B608  # DDL filled from this module's constants

# The lease must be this attempt's current, unexpired one; identity verified when the job has one.
BEGIN = f"""
CREATE OR REPLACE FUNCTION reckon_begin(p_job text, p_attempt bigint, p_owner text, p_token bigint, p_ttls jsonb)
RETURNS SETOF ledger_attempt LANGUAGE plpgsql AS $$
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
    now_ts timestamptz;
BEGIN
    SELECT * INTO j FROM ledger_job WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND OR j.recovery_pending OR NOT p_ttls ? j.action THEN
        RETURN;
    END IF;
    now_ts := clock_timestamp();
    UPDATE ledger_attempt SET version = version + 1, updated_at = statement_timestamp(),
        side_effect_state = 'submitted', heartbeat_at = now_ts
    WHERE id = p_attempt AND job_id = j.id AND execution_state = 'running' AND lease_owner = p_owner
      AND lease_token = p_token AND lease_expires_at > now_ts AND side_effect_state = 'not_attempted'
      AND (j.identity IS NULL OR j.identity = '{{}}'::jsonb OR observed_identity IS NOT NULL)
    RETURNING * INTO a;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    before := {BEFORE.format(status="j.status", delivery="leased", execution="running",
                             side_effect="not_attempted")};
    {EVENT.format(actor="p_owner", kind="side_effect_started", status="j.status",
                  evidence="jsonb_build_object('idempotency_key', j.idempotency_key)")}
    RETURN NEXT a;
END $$;
"""  # nosec B608  # DDL filled from this module's constants

# A result may arrive after the lease expired, as long as no one else has taken the attempt.
SUCCEED = f"""
CREATE OR REPLACE FUNCTION reckon_succeed(p_job text, p_attempt bigint, p_owner text, p_token bigint,
                                          p_result_ref text, p_evidence jsonb)
RETURNS SETOF ledger_attempt LANGUAGE plpgsql AS $$
DECLARE
    j ledger_job%ROWTYPE;
    a ledger_attempt%ROWTYPE;
    before jsonb;
BEGIN
    SELECT * INTO j FROM ledger_job WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE ledger_attempt SET version = version + 1, updated_at = statement_timestamp(),
        delivery_state = 'acknowledged', execution_state = 'succeeded', side_effect_state = 'confirmed',
        result_ref = left(p_result_ref, 500)
    WHERE id = p_attempt AND job_id = j.id AND execution_state = 'running' AND lease_owner = p_owner
      AND lease_token = p_token AND side_effect_state = 'submitted'
    RETURNING * INTO a;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    before := {BEFORE.format(status="j.status", delivery="leased", execution="running", side_effect="submitted")};
    UPDATE ledger_job SET status = 'succeeded', updated_at = statement_timestamp() WHERE id = j.id;
    {EVENT.format(actor="p_owner", kind="succeeded", status="'succeeded'", evidence="p_evidence")}
    RETURN NEXT a;
END $$;
"""  # nosec B608  # DDL filled from this module's constants

DROP = [
    "DROP FUNCTION IF EXISTS reckon_claim(text, text, jsonb, boolean)",
    "DROP FUNCTION IF EXISTS reckon_begin(text, bigint, text, bigint, jsonb)",
    "DROP FUNCTION IF EXISTS reckon_succeed(text, bigint, text, bigint, text, jsonb)",
]


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0004_chain_gate_counters"),
    ]

    operations = [
        migrations.RunSQL([CLAIM, BEGIN, SUCCEED], DROP),
    ]
