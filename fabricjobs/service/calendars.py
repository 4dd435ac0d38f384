"""CREATECALENDAR, DROPCALENDAR and CALENDARS (IPF's job calendars), and the check of a job's
CALENDAR= that STARTJOB and UPDATEJOB make. The nodes' schedulers read the calendars when a
fire is due (node/scheduler.py); nothing here touches a job row."""

from __future__ import annotations

from ..calendar import make_calendar
from ..commands import statements
from ..errors import CalendarNotFound, CommandError, ValidationError
from ..result import Result
from ..schedule import Schedule
from .core import ServiceCore
from .session import Session

CALENDAR_COLUMNS = ("Name", "Rules", "Status")
CALENDARS_COLUMNS = ("Name", "Rules", "Live Jobs")


class CalendarCommands(ServiceCore):
    def create_calendar(self, cmd: statements.CreateCalendar, session: Session) -> Result:
        calendar = make_calendar(cmd.name, cmd.rules)  # the parser checked them; a client may not have
        existed = self.store.calendar(calendar.name) is not None
        self.store.put_calendar(calendar)
        return Result(CALENDAR_COLUMNS, ((calendar.name, _shown(calendar.text), "replaced" if existed else "created"),))

    def drop_calendar(self, cmd: statements.DropCalendar, session: Session) -> Result:
        first, count = None, 0
        for job in self.store.each_live():  # a page at a time: a count and one example is all it keeps
            if job.calendar == cmd.name:
                first, count = first or job, count + 1
        if first is not None:
            raise CommandError(f"calendar {cmd.name!r} is named by {count} live job(s), e.g. {first.key}: "
                               "UPDATEJOB ... CALENDAR='' (or STOPJOB) them first; nothing was dropped")
        calendar = self.store.calendar(cmd.name)
        if calendar is None or not self.store.delete_calendar(cmd.name):
            raise CalendarNotFound(f"No such calendar {cmd.name!r}")
        return Result(CALENDAR_COLUMNS, ((cmd.name, _shown(calendar.text), "dropped"),))

    def calendars(self, cmd: statements.Calendars, session: Session) -> Result:
        users: dict[str, int] = {}
        for job in self.store.each_live():
            if job.calendar:
                users[job.calendar] = users.get(job.calendar, 0) + 1
        return Result(CALENDARS_COLUMNS, tuple((c.name, _shown(c.text), users.get(c.name, 0))
                                               for c in self.store.calendars()))

    def _calendar(self, name: str | None, schedule: Schedule) -> str:
        """A job's CALENDAR=, checked: a stored calendar, on a recurring job ('' : none)."""
        if not name:
            return ""
        self._stored_calendar(name)
        if not schedule.is_recurring:
            raise ValidationError(f"CALENDAR='{name}' needs a recurring job: EXEC_INTERVAL='HH:MM:SS' or a cron "
                               "expression (a calendar skips fires; a one-time job has one)")
        return name

    def _stored_calendar(self, name: str) -> None:
        if self.store.calendar(name) is None:
            raise CalendarNotFound(f"No such calendar {name!r} (CREATECALENDAR '{name}' EXCLUDE '...' makes one)")


def _shown(text: str) -> str:
    return "; ".join(text.splitlines())
