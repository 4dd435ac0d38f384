"""``/healthz`` (the process answers) and ``/readyz`` (it can reach the store): no token, for
load balancers and orchestrators."""

from __future__ import annotations

import logging

import anyio
import anyio.to_thread

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...errors import StoreError
from ..errors import public

log = logging.getLogger("fabricjobs.web")

router = APIRouter(tags=["health"])


#: /readyz reads the store on threads of its own: the server's pool may be full of long
#: requests (web/limits.py), and an orchestrator must still be answered.
_READY_THREADS = anyio.CapacityLimiter(4)


@router.head("/healthz", include_in_schema=False)  # (HEAD: what some load balancers probe with)
@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Answered on the server's event loop: no thread of its pool is needed."""
    return {"status": "ok"}


@router.head("/readyz", include_in_schema=False)
@router.get("/readyz", responses={503: {"description": "the store cannot be reached"}})
async def readyz(request: Request) -> JSONResponse:
    """Ready when a read of the store's ``nodes`` table answers within 2 s."""
    store = request.app.state.api.store
    try:
        await anyio.to_thread.run_sync(lambda: store.nodes(timeout=2.0), limiter=_READY_THREADS)
    except StoreError as exc:
        return JSONResponse({"error": "StoreError", "message": public(request, str(exc))}, status_code=503)
    except Exception as exc:  # whatever the driver raised: not ready, and the log says why
        log.warning("readiness check failed: %r", exc)
        return JSONResponse({"error": "StoreError", "message": "the store cannot be read"}, status_code=503)
    return JSONResponse({"status": "ready"})
