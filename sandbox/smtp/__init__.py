"""The SMTP sandbox: a real mail server (aiosmtpd) that Reckon did not write the protocol of.

``server`` runs it (SMTP for sending, a small HTTP API for looking messages up), ``archive`` keeps
every message it accepted, ``faults`` decides which transactions to break and how, ``testing``
runs it as a subprocess for tests and tools.
"""
