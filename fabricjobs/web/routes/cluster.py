"""The cluster: its nodes (NODES, NODES DETAILS), their running tasks (PS) and KILL."""

from __future__ import annotations

from typing import Annotated, Any, Union

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field

from ...commands import statements as st
from ..auth import Need, requires
from ..schemas import Message, Node, NodeDetail, Task, records
from ..tokens import TokenInfo
from . import api_of, execute, segment

router = APIRouter(tags=["cluster"])
Viewer = Depends(requires(Need.READ, "read the cluster"))
Killer = Depends(requires(Need.OPERATE, "kill tasks"))


#: NODES DETAILS's rows, else NODES's (tried in that order: a NODES row lacks the details).
_NODES = Annotated[Union[list[NodeDetail], list[Node]], Field(union_mode="left_to_right")]  # type: ignore[valid-type]


@router.get("/nodes", response_model=_NODES,
            summary="The cluster's nodes (NODES; details=true: NODES DETAILS)")
def nodes(request: Request, details: bool = Query(False, description="each node's incarnation, beat, heartbeat, "
                                                  "zone, addresses, priorities and tasks too"),
          who: TokenInfo = Viewer) -> list[dict[str, Any]]:
    return records(execute(request, who, st.Nodes(details=details)))


@router.get("/ps", response_model=list[Task],  # type: ignore[valid-type]
            summary="Running tasks (PS; all=true: PS ALL)")
def ps(request: Request, all: bool = True,
       node: str | None = Query(None, description="only this node's tasks (PS on that node)"),
       who: TokenInfo = Viewer) -> list[dict[str, Any]]:
    api = api_of(request)
    session = api.session(who)
    session.node = node
    return records(api.service().execute(st.Ps(all=all and node is None), session))


@router.post("/nodes/{node}/tasks/{task}/kill", response_model=Message, status_code=202,
             summary="End a task at once (KILL); the node carries it out within one pass")
def kill(request: Request, node: str, task: int,
         who: TokenInfo = Killer) -> dict[str, Any]:
    result = execute(request, who, st.Kill(node=segment(node), task=task))
    return {"status": result.status or ""}
