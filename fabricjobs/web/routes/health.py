"""``/healthz`` (the process answers) and ``/readyz`` (it can reach the store): no token, for
load balancers and orchestrators."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...errors import StoreError

log = logging.getLogger("fabricjobs.web")

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "the store cannot be reached"}})
def readyz(request: Request) -> JSONResponse:
    """Ready when a read of the store's ``nodes`` table answers within 2 s."""
    try:
        request.app.state.api.store.nodes(timeout=2.0)
    except StoreError as exc:
        return JSONResponse({"error": "StoreError", "message": str(exc)}, status_code=503)
    except Exception as exc:  # whatever the driver raised: not ready, and the log says why
        log.warning("readiness check failed: %r", exc)
        return JSONResponse({"error": "StoreError", "message": "the store cannot be read"}, status_code=503)
    return JSONResponse({"status": "ready"})
