"""CSV downloads that a spreadsheet opens as data, never as formulas.

OWASP's CSV injection guidance: a cell must not begin with `=`, `+`, `-`, `@`, tab or carriage
return, or a spreadsheet may evaluate it; such a cell is prefixed with a single quote, every
cell is wrapped in double quotes and embedded double quotes are doubled (the csv module's
QUOTE_ALL), so a separator or quote inside a value cannot start a new cell either.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence

from django.http import StreamingHttpResponse

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value):
    """The cell as text. Leading whitespace is looked past as well: some spreadsheets trim it
    before they decide whether a cell is a formula."""
    if isinstance(value, str) and (
        value.startswith(FORMULA_TRIGGERS) or value.lstrip().startswith(FORMULA_TRIGGERS)
    ):
        return "'" + value
    return value


class _Echo:
    """A file-like object whose write() hands the line back, for csv.writer in a stream."""

    def write(self, value: str) -> str:
        return value


def csv_download(filename: str, header: Sequence[str], rows: Iterable[Sequence]) -> StreamingHttpResponse:
    """Stream `rows` under `header` as an attachment, every cell neutralised."""
    writer = csv.writer(_Echo(), quoting=csv.QUOTE_ALL)

    def lines():
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([neutralise(cell) for cell in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
