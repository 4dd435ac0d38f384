"""Calendars (IPF's job calendars): CALENDARS, CREATECALENDAR and DROPCALENDAR.

``/calendars/{name}`` is one stored calendar: PUT makes or replaces it, DELETE drops it. Who may
change one is who may run CREATECALENDAR through ``POST /commands`` (auth.STATEMENT_NEEDS: an
admin), since a calendar changes the fires of every job that names it, whoever started them.
A calendar has no Notes: who made, replaced or dropped one is the audit line of ``execute``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from ...commands import statements as st
from ...errors import CalendarNotFound
from ..auth import STATEMENT_NEEDS, requires
from ..schemas import Calendar, CalendarBody, CalendarChange, records
from ..tokens import TokenInfo
from . import execute, segment

router = APIRouter(tags=["calendars"])
CALENDAR = "/calendars/{name}"
Viewer = Depends(requires(STATEMENT_NEEDS[st.Calendars], "read calendars"))
Maker = Depends(requires(STATEMENT_NEEDS[st.CreateCalendar], "create or replace calendars"))
Dropper = Depends(requires(STATEMENT_NEEDS[st.DropCalendar], "drop calendars"))


@router.get("/calendars", response_model=list[Calendar],  # type: ignore[valid-type]
            summary="Every stored calendar, its rules and how many live jobs name it (CALENDARS)")
def list_calendars(request: Request, who: TokenInfo = Viewer) -> list[dict[str, Any]]:
    return records(execute(request, who, st.Calendars()))


@router.get(CALENDAR, response_model=Calendar, summary="One stored calendar (its row of CALENDARS)")
def get_calendar(request: Request, name: str, who: TokenInfo = Viewer) -> dict[str, Any]:
    wanted = segment(name)
    found = [c for c in records(execute(request, who, st.Calendars())) if c["name"] == wanted]
    if not found:
        raise CalendarNotFound(f"No such calendar {wanted!r}")
    return found[0]


@router.put(CALENDAR, response_model=CalendarChange, status_code=201,
            responses={200: {"model": CalendarChange, "description": "an existing calendar replaced"}},
            summary="Make (201) or replace (200) a calendar (CREATECALENDAR ... EXCLUDE ...)")
def put_calendar(request: Request, response: Response, name: str, body: CalendarBody,
                 who: TokenInfo = Maker) -> dict[str, Any]:
    made = records(execute(request, who, st.CreateCalendar(segment(name), tuple(body.exclude))))[0]
    if made["status"] == "replaced":
        response.status_code = 200
    return made


@router.delete(CALENDAR, response_model=CalendarChange,
               summary="Drop a calendar (DROPCALENDAR); 409 while a live job names it")
def drop_calendar(request: Request, name: str, who: TokenInfo = Dropper) -> dict[str, Any]:
    return records(execute(request, who, st.DropCalendar(segment(name))))[0]
