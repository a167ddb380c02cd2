"""Named fault points in the worker loop, armed from a worker process's environment.

    RECKON_FAULT_POINT=after_provider_success RECKON_FAULT_JOBS=chaos-17 RECKON_FAULT_DIR=/tmp/x \\
        python manage.py qcluster

When a worker reaches the armed point for a matching job, it writes `<dir>/<job>.<point>` with
its pid and stops itself with SIGSTOP, so the test can SIGKILL it at exactly that point. Each
job/point fires once (the file is the record), so a redelivery after the kill runs through.
Unarmed, a fault point is one comparison against None.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

POINTS = (
    "before_call",  # claimed (and identity verified), side effect not yet begun
    "during_call",  # the request is on the wire, the answer not yet read
    "after_provider_success",  # the provider answered 2xx, nothing written locally yet
    "after_local_write",  # the result is recorded, the queue has not acknowledged the task
    # The retention pass (ledger/services/retention.py); the "job" is the partition's name.
    "archive_written",  # the archive file is in place, nothing recorded in the database yet
    "partition_dropped",  # checkpoint and tombstones written, the partition dropped, not committed
)

_ARMED = os.environ.get("RECKON_FAULT_POINT") or None
_JOBS = tuple(j for j in os.environ.get("RECKON_FAULT_JOBS", "").split(",") if j)
_DIR = Path(os.environ["RECKON_FAULT_DIR"]) if os.environ.get("RECKON_FAULT_DIR") else None

if _ARMED is not None and _ARMED not in POINTS:
    raise ValueError(f"RECKON_FAULT_POINT={_ARMED!r} is not one of {', '.join(POINTS)}")
# The records decide whether a point fires again: a folder shared between runs (or users) would let
# stale or planted records silence a fault, so an armed worker must be given its own.
if _ARMED is not None and _DIR is None:
    raise ValueError("RECKON_FAULT_POINT needs RECKON_FAULT_DIR: a folder of this run's own for the fired records")


def fault_point(name: str, job_id: str) -> None:
    if _ARMED is None or name != _ARMED:
        return
    if _JOBS and not any(job_id == j or (j.endswith("*") and job_id.startswith(j[:-1])) for j in _JOBS):
        return
    _DIR.mkdir(parents=True, exist_ok=True)
    record = _DIR / f"{job_id}.{name}"
    try:
        with open(record, "x") as fired:
            fired.write(str(os.getpid()))
    except FileExistsError:
        return  # fired once already for this job: let the redelivery through
    os.kill(os.getpid(), signal.SIGSTOP)
