"""``POST /commands``: command-language text, with what ``Client.fetch`` returns for it.

For parity with the shell and for what has no route of its own (a statement's forms that name
every UID of a NAME, SET, scripts of several statements). The whole script is parsed and
checked against the token's role before any of it runs; it then runs as ``Client.fetch`` runs
it, in a session of its own. An error in a script of several statements says which one failed
(``statement``, from 1) and how many ran before it (``ran``): what they did stays done. A
script may wait once (a request waits at most 60 s, holding a long-request slot throughout,
its answer included: a FOLLOW's lines are read while it is held).
"""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Depends, Request

from ...commands import parse_script, statements as st
from ...errors import FabricJobsError, ValidationError
from ..audit import recorded
from ..auth import Need, authorize, requires, script_needs
from ..schemas import CommandBody, CommandResult, command_result
from ..tokens import TokenInfo
from . import LONG, api_of, capped, long_request

router = APIRouter(tags=["commands"])

#: Statements one request may hold: a script of cheap reads still holds a server thread for as
#: long as its statements take (0.4 ms each and more), and it is no long request (web/limits.py).
MAX_STATEMENTS = 1000
Anyone = Depends(requires(Need.READ, "run statements"))  # then each statement's own need


@router.post("/commands", response_model=CommandResult, responses=LONG,
             summary="Run command-language text; the last statement's result, as Client.fetch returns it")
def commands(request: Request, body: CommandBody,
             who: TokenInfo = Anyone) -> CommandResult:
    api = api_of(request)
    script = [_bounded(s.command) for s in parse_script(body.text, api.config.get("jobs", "MAX_COMMAND_BYTES"))]
    if len(script) > MAX_STATEMENTS:
        raise ValidationError(f"a script sent to the API has at most {MAX_STATEMENTS:,} statements (this one has "
                              f"{len(script):,}): send the rest in further requests; nothing was run")
    for i, command in enumerate(script, 1):  # (the first one the token's role does not allow is named)
        where = f" (statement {i})" if len(script) > 1 else ""
        authorize(who, script_needs([command]), f"run {type(command).__name__.upper()}{where}")
    waits = sum(_long(c) for c in script)
    if waits > 1:
        raise ValidationError(f"a script sent to the API may wait once (it has {waits} waits: WAITJOB, STOPJOB or "
                              "FINISHJOB ... WAIT, JOBLOG ... FOLLOW); send each in a request of its own")
    with recorded(who, script):  # one line in the web process's log for a script that changes anything
        if waits:
            with long_request(request, who):  # (held while the answer is made: a FOLLOW's lines come then)
                return _answer(script, *api.service().run_until_error(script, api.session(who)))
        return _answer(script, *api.service().run_until_error(script, api.session(who)))


def _answer(script: list[st.Command], results: list, error: BaseException | None) -> CommandResult:
    """The last statement's result, or the error (raised inside ``recorded``: the audit line
    says the script failed)."""
    if error is not None:
        if isinstance(error, FabricJobsError) and len(script) > 1:
            # Which statement failed, and that the ones before it ran (a STARTJOB's job stays).
            error.statement = len(results) + 1  # type: ignore[attr-defined]
            error.ran = len(results)  # type: ignore[attr-defined]
        raise error
    return command_result(results[-1]) if results else CommandResult(columns=[], rows=[])


def _long(command: st.Command) -> bool:
    """Whether ``command`` waits (a long request, web/limits.py)."""
    return (isinstance(command, st.WaitJob) or (isinstance(command, (st.StopJob, st.FinishJob)) and command.wait)
            or (isinstance(command, st.JobLog) and command.follow))  # lines as they come: .../log?follow=true


def _bounded(command: st.Command) -> st.Command:
    """A wait as long as one request may wait (routes.MAX_WAIT_SEC)."""
    if isinstance(command, (st.WaitJob, st.StopJob, st.FinishJob, st.JobLog)) and _long(command):
        return dataclasses.replace(command, timeout=capped(command.timeout))
    return command
