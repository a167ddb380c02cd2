"""Writing many rows in one statement: the set-based SQL under `transitions.Batch`.

Rows travel as ONE jsonb parameter unpacked by the database (binding thousands of parameters
costs far more than the statement itself). Only the transition layer calls these.
"""

from __future__ import annotations

import functools
import json
from datetime import date, datetime, time
from decimal import Decimal
from uuid import UUID

from django.db import connection
from django.db.models import JSONField


def _json_value(field, value):
    """A column's value as JSON that PostgreSQL's jsonb_to_recordset reads back as that column."""
    if value is None:
        return None
    if isinstance(field, JSONField):
        return json.loads(json.dumps(value, cls=field.encoder)) if field.encoder else value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | UUID):
        return str(value)
    return value


def _records(fields, rows, extra=()) -> tuple[str, list[str], list]:
    """Rows of values for `fields` (then for `extra` columns, given as (alias, type)) as ONE
    jsonb parameter, unpacked in order by the database:

        ROWS FROM (jsonb_to_recordset(%s::jsonb) AS (c0 type, ...)) WITH ORDINALITY AS v(c0, ..., position)

    (one parameter rather than one per value: binding thousands of parameters costs far more
    than the statement). Returns the FROM item, the field columns' aliases and the parameters."""
    aliases = [f"c{i}" for i in range(len(fields))]
    types = [(f.target_field if f.is_relation else f).db_type(connection) for f in fields]
    names, types = aliases + [alias for alias, _ in extra], types + [kind for _, kind in extra]
    converters = [functools.partial(_json_value, f) for f in fields] + [lambda x: x] * len(extra)
    document = [
        {name: convert(value) for name, convert, value in zip(names, converters, row, strict=True)}
        for row in rows
    ]
    source = (
        f"ROWS FROM (jsonb_to_recordset(%s::jsonb) AS ({', '.join(f'{n} {t}' for n, t in zip(names, types, strict=True))})) "
        f"WITH ORDINALITY AS v({', '.join(names)}, position)"
    )
    return source, aliases, [json.dumps(document)]


def insert_objects(objs: list) -> None:
    """Insert unsaved model instances of one model in one statement, in order, and set their
    primary keys (`INSERT ... SELECT ... FROM <the rows as one jsonb> ORDER BY position`).
    Columns with a database default are left to it. Row triggers fire per row, in order."""
    if not objs:
        return
    model, quote = type(objs[0]), connection.ops.quote_name
    fields = [f for f in model._meta.concrete_fields if not f.primary_key and not f.has_db_default()]
    for obj in objs:  # a foreign key to an instance saved since it was assigned takes its id now
        obj._prepare_related_fields_for_save(operation_name="insert_objects")
    source, aliases, params = _records(fields, [[getattr(obj, f.attname) for f in fields] for obj in objs])
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "  # nosec B608  # identifiers from model metadata, quoted; values bound as one jsonb parameter
        f"SELECT {', '.join(f'v.{a}' for a in aliases)} FROM {source} "
        f"ORDER BY v.position RETURNING {quote(model._meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for obj, (pk,) in zip(objs, cursor.fetchall(), strict=True):
            obj.pk = pk
            obj._state.adding, obj._state.db = False, connection.alias


def update_from_values(model, *, match, names, rows, extra=(), set_sql=()) -> list:
    """One statement for many rows, each with its own values:

        UPDATE t SET name = v.cJ, ... FROM <the rows as one jsonb> AS v WHERE t.match = v.cI AND ...

    Each row is (values of the `match` fields, values of the `names` fields to set[, values of
    the `extra` columns, which `set_sql` may use as v.alias]). Returns the primary keys changed.
    """
    quote = connection.ops.quote_name
    matched = [model._meta.get_field(name) for name in match]
    assigned = [model._meta.get_field(name) for name in names]
    if not rows or not (assigned or set_sql):
        return []
    source, aliases, params = _records(
        matched + assigned, [[*row[0], *row[1], *(row[2] if len(row) > 2 else ())] for row in rows], extra
    )
    assignments = [f"{quote(f.column)} = v.{a}" for f, a in zip(assigned, aliases[len(matched):], strict=True)]
    condition = " AND ".join(f"t.{quote(f.column)} = v.{a}" for f, a in zip(matched, aliases, strict=False))
    sql = (
        f"UPDATE {quote(model._meta.db_table)} AS t SET {', '.join(assignments + list(set_sql))} "  # nosec B608  # identifiers from model metadata, quoted; values bound as one jsonb parameter
        f"FROM {source} WHERE {condition} RETURNING t.{quote(model._meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]
