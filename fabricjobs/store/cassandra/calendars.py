"""The calendars table (IPF's job calendars): a few small rows, each written whole and read by
name by the nodes that fire its jobs. Plain writes, no LWT: the last CREATECALENDAR wins."""

from __future__ import annotations

from ...calendar import Calendar, from_text
from .session import Session


class Calendars(Session):
    def put_calendar(self, calendar: Calendar) -> None:
        stmt = self._stmt(("calput",), "INSERT INTO k2_calendars (name, rules, updated) VALUES (?, ?, toTimestamp(now()))")
        self._run(stmt, (calendar.name, calendar.text))

    def calendar(self, name: str) -> Calendar | None:
        rows = list(self._run(self._stmt(("calget",), "SELECT name, rules FROM k2_calendars WHERE name = ?"), (name,)))
        return from_text(rows[0]["name"], rows[0]["rules"] or "") if rows else None

    def calendars(self) -> list[Calendar]:
        rows = self._run(self._stmt(("calall",), "SELECT name, rules FROM k2_calendars"), ())
        return sorted((from_text(r["name"], r["rules"] or "") for r in rows), key=lambda c: c.name)

    def delete_calendar(self, name: str) -> bool:
        if self.calendar(name) is None:
            return False
        self._run(self._stmt(("caldel",), "DELETE FROM k2_calendars WHERE name = ?"), (name,))
        return True
