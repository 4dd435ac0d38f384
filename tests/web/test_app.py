"""The application in-process (an ASGI client, no socket), on a real SQLite store, for what a
running server cannot be made to do on demand: a store that went away, a bug in a route, a
damaged tokens file; and the tables that must cover the whole language."""

from __future__ import annotations

import logging
import typing

import warnings

import pytest

from fabricjobs.commands import statements as st
from fabricjobs.config import load_config
from fabricjobs.service import (
    CALENDAR_COLUMNS, CALENDARS_COLUMNS, DELETED_COLUMNS, FULL_COLUMNS, HISTORY_COLUMNS, NODES_COLUMNS, NODES_DETAIL_COLUMNS,
    PS_COLUMNS, RECENT_COLUMNS,
)
from fabricjobs.store import open_store
from fabricjobs.web.app import Api, KeepSegments, create_app
from fabricjobs.web.auth import STATEMENT_NEEDS, Need, script_needs
from fabricjobs.web.schemas import COLUMN_TYPES, field_name
from fabricjobs.web.tokens import Role, TokenFile
from backends import add_sections, make_backend_config


@pytest.fixture
def made(request, tmp_path):
    """An app on a fresh store, with an admin token; (client, api, token)."""
    def make(**web):
        path = make_backend_config(request, "sqlite", tmp_path)
        if web:
            add_sections(path, {"web": web})
        cfg = load_config(path)
        api = Api(open_store(cfg), cfg, TokenFile(cfg.get("web", "TOKENS_FILE")))
        token = api.tokens.create("root", Role.ADMIN)
        request.addfinalizer(api.store.close)
        with warnings.catch_warnings():  # starlette would rather its test client ran on httpx2
            warnings.simplefilter("ignore")
            from fastapi.testclient import TestClient
        return TestClient(KeepSegments(create_app(api)), raise_server_exceptions=False), api, token
    return make


def test_a_store_that_went_away_is_503_and_readyz_says_so(made):
    client, api, token = made()
    assert client.get("/readyz").json() == {"status": "ready"}
    api.store.close()
    assert client.get("/readyz").status_code == 503
    answer = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 503 and answer.json() == {"error": "StoreError", "message": "store is closed"}
    assert client.get("/healthz").status_code == 200  # the process itself is up


def test_a_bug_is_a_500_with_an_incident_id_logged_with_its_traceback_and_never_shown(made, monkeypatch, caplog):
    client, api, token = made()

    def broken(self, query):
        raise RuntimeError("a bug with a secret path /etc/shadow")

    monkeypatch.setattr(type(api.service()), "list_jobs", broken)
    with caplog.at_level(logging.ERROR, logger="fabricjobs.web"):
        answer = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 500 and answer.json()["error"] == "InternalError"
    assert answer.headers.get_list("x-content-type-options") == ["nosniff"]  # (as every other answer)
    assert "Traceback" not in answer.text and "shadow" not in answer.text
    incident = answer.json()["message"].split()[2].rstrip(";")
    assert any(incident in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_damaged_tokens_file_is_refused_in_words(made):
    client, api, token = made()
    api.tokens.path.write_text("{not json")
    answer = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 500 and answer.json()["error"] == "ConfigError"
    assert "is damaged" in answer.json()["message"] and "Traceback" not in answer.text


def test_the_openapi_document_can_be_kept_for_token_holders(made):
    client, api, token = made(OPENAPI_NEEDS_TOKEN="true")
    assert client.get("/api/v1/openapi.json").status_code == 401
    doc = client.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
    assert doc.status_code == 200 and doc.json()["openapi"].startswith("3.")


def test_every_statement_of_the_language_has_a_need_and_an_unknown_one_needs_admin():
    assert set(STATEMENT_NEEDS) == set(typing.get_args(st.Command))
    assert script_needs([st.JobStatus(), st.Nodes()]) is Need.READ
    assert script_needs([st.JobStatus(), st.Kill("n", 1)]) is Need.OPERATE
    assert script_needs([object()]) is Need.ADMIN
    assert script_needs([st.JobHistory("USER_JOB", "a"), st.DeleteHistory("USER_JOB", "a", "u")]) is Need.ADMIN


def test_every_column_the_api_shows_has_a_json_type_and_a_distinct_name():
    for columns in (FULL_COLUMNS, HISTORY_COLUMNS, NODES_COLUMNS, PS_COLUMNS, DELETED_COLUMNS, NODES_DETAIL_COLUMNS,
                    RECENT_COLUMNS, CALENDAR_COLUMNS, CALENDARS_COLUMNS):
        assert set(columns) <= set(COLUMN_TYPES)
        assert len({field_name(c) for c in columns}) == len(columns)
    assert field_name("Duration (ms)") == "duration_ms" and field_name("Ownership Candidates Num") == "ownership_candidates_num"
