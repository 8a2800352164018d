"""``PgVectorNormIndex``: norm-weighted search ``cos(q, d) * ||d||**alpha`` inside PostgreSQL + pgvector.

Each row holds the unit vector (``embedding vector(dim)``), the raw norm (``norm real``) and an
optional custom base (column ``weight real``, its stored name: NULL unless
:meth:`PgVectorNormIndex.set_bases` set it); ``coalesce(weight, norm)`` is the base alpha
exponentiates (a search's weight is ``base**alpha``), with a b-tree index on it. An
HNSW index with ``vector_ip_ops`` ranks the unit vectors by cosine.

Search (``exact=False``) follows :mod:`normrank.search.ann`, with its sizes and bound test
(:mod:`normrank.search.norm_band`): one SQL statement fetches the ``depth`` best cosines per
query from the HNSW index, and the client scans the documents in weight order from a copy it
holds, checked against the table's generation counter (:mod:`normrank.backends.pgvector_band`).
With ``client_band = False``, or where the generation trigger is disabled, the band is scored in
SQL instead: the first band of extreme weights on the side alpha favours (a b-tree scan) with
the cosines, then, when the k-th score does not beat the bound, every row beyond the band edge
read off the bound (a b-tree range). Both are exact up to what the HNSW index misses.
``exact=True`` ranks every row in SQL. The searches and the settings they send live in
:mod:`normrank.backends.pgvector_search` (k rows whenever k rows exist). Whatever a search reads beyond its one statement runs in
one REPEATABLE READ transaction with it, so every query's result is that of one committed state
whatever other clients write meanwhile.

Every ``add`` / ``remove`` / ``set_bases`` is one transaction: it commits whole or not at all.
Table and column names only ever reach SQL through ``psycopg.sql.Identifier``. docs/postgres.md
shows the SQL migration of an existing pgvector table and the SQL function
(:meth:`PgVectorNormIndex.install_sql_function`) for applications that query in SQL alone.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.backends import pgvector_band as B
from normrank.backends import pgvector_sql as S
from normrank.backends.pgvector_search import EF_CAP, Searches, breadth
from normrank.errors import (
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    MissingDependencyError,
    UnknownIdError,
)
from normrank.validation import (
    Checked,
    as_alpha,
    as_count,
    as_flag,
    as_id_list,
    as_ids,
    as_k_factor,
    as_positive_int,
    as_vectors,
    as_weights,
    bases_argument,
    deprecated,
    split_norms,
)

__all__ = ["REGISTRY", "PgVectorNormIndex"]

#: The table that lists normrank's tables (one row per table: its oid, dim, whether custom bases are set: column custom_weights).
REGISTRY = "normrank_tables"
# 2: the generation trigger (pgvector_band); 3: the next-id triggers (pgvector_sql.next_id_tracking).
# A table of an older format gets them when reopened.
_FORMAT = 3
# Plain identifiers only: the derived index names (table + suffix) must stay within
# PostgreSQL's 63 bytes, or two of them could be truncated to the same name.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
# An add of at least this many rows, and more than the table holds, rebuilds the HNSW graph
# after the copy instead of inserting row by row (3,000 x 32: 1.0 s against 3.8 s), with this
# much maintenance memory (a graph that does not fit builds far slower).
_REBUILD_MIN = 1000
_BUILD_MEMORY = "512MB"


def _pg() -> tuple[Any, Any]:
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError as e:
        raise MissingDependencyError(
            "the PostgreSQL backend needs psycopg and pgvector: pip install 'normrank[postgres]'"
        ) from e
    return psycopg, register_vector


def _sql() -> Any:
    from psycopg import sql

    return sql


def _checked_table(table: object) -> str:
    if not isinstance(table, str) or not _NAME.fullmatch(table):
        raise InvalidParameterError(
            f"table must be a plain identifier (letters, digits, _; at most 48 characters, not "
            f"starting with a digit), got {table!r}: names are quoted, never formatted into SQL"
        )
    return table


class PgVectorNormIndex(Searches):
    """A PostgreSQL table searched by ``cos(q, d) * ||d||**alpha``; API as :class:`normrank.NormIndex`.

    Args:
        conninfo: a libpq connection string or URI (``"postgresql://user@host/db"``).
        table: table name (a plain identifier, used case-sensitively, always quoted). Created
            with its indexes if it does not exist; an existing normrank table is reopened (its
            dimension checked); any other table is refused (:class:`IndexStateError`) unless
            ``adopt=True`` after the migration of docs/postgres.md.
        dim: vector dimension.
        exact: rank every row in SQL (a sequential scan): equals ``NormIndex``'s exact top-k.
        m / ef_construction: HNSW graph parameters, fixed when the table is created.
        ef_search: pgvector's ``hnsw.ef_search`` for searches (raised to the cosine depth when
            a search needs more; at most pgvector's 1,000 reach the server,
            :mod:`normrank.backends.pgvector_search`).
        alpha: default exponent (``search(..., alpha=)`` overrides it, per query if wanted).
        k_factor: the cosine fetch is at least ``k * k_factor`` deep.
        n_tail: size of the first extreme-weight band (default: :func:`normrank.search.norm_band.first_band`).
        adopt: register an existing table that has the columns of docs/postgres.md.

    ``search`` returns ``(scores, ids)``: float32 / int64 ``(nq, k)``, padded with ``-inf`` /
    ``-1``. Ids are non-negative integers (the ``id bigint`` primary key). One connection per
    object, used under a lock: share an object between threads, or open one per thread for
    parallel searches. A broken connection (server restart) is reopened at the next call.
    """

    k_factor = Checked(lambda v, _name: as_k_factor(v))
    #: Scan the weight band in the client (default) rather than score it in SQL.
    client_band = Checked(as_flag)
    n_tail = Checked(as_count)
    ef_search = Checked(as_positive_int)
    exact = Checked(as_flag)

    def __init__(
        self,
        conninfo: str,
        table: str,
        dim: int,
        *,
        exact: bool = False,
        m: int = 16,
        ef_construction: int = 64,
        ef_search: int = 100,
        alpha: float = 0.0,
        k_factor: int = 10,
        n_tail: int | None = None,
        adopt: bool = False,
    ) -> None:
        _pg()
        if not isinstance(conninfo, str):
            raise InvalidParameterError(f"conninfo must be a libpq connection string, got {type(conninfo)}")
        self.table = _checked_table(table)
        self.dim = as_positive_int(dim, "dim")
        if self.dim > 16000:
            raise InvalidParameterError(f"pgvector stores at most 16,000 dimensions, got {self.dim}")
        self.m, self.ef_construction = (
            as_positive_int(m, "m"),
            as_positive_int(ef_construction, "ef_construction"),
        )
        self.exact, self.ef_search, self.k_factor, self.n_tail = exact, ef_search, k_factor, n_tail
        self.client_band = True
        self.alpha = float(as_alpha(alpha, 1)[0])
        adopt = as_flag(adopt, "adopt")
        self.conninfo = conninfo
        self._lock = threading.RLock()
        self._conn: Any = None
        self.last_widened = 0  # queries of the last search that needed the second round
        self._iterative = False  # the server's pgvector has iterative index scans (>= 0.8)
        self._copy = B.ClientCopy()  # what the client-side band scan holds of the table
        sql = _sql()
        self._t = sql.Identifier(self.table)
        self._reg = sql.Identifier(REGISTRY)
        with self._lock:
            self._setup(adopt)
            self._n = self._count()

    # -- connection and schema ------------------------------------------------------------------

    def _connection(self) -> Any:
        psycopg, register_vector = _pg()
        if self._conn is None or self._conn.closed or self._conn.broken:
            try:
                self._conn = psycopg.connect(self.conninfo, autocommit=True)
            except psycopg.Error as e:
                raise IndexStateError(f"cannot connect to PostgreSQL ({self.conninfo!r}): {e}") from e
            row = self._conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            if row:
                register_vector(self._conn)
                self._iterative = S.version_at_least(row[0], (0, 8))
        return self._conn

    def _run(self, fn, *, read_only: bool = False, single: bool = False, ef: int | None = None) -> Any:
        """``fn(conn)`` in one transaction (REPEATABLE READ READ ONLY when ``read_only``; the
        pipeline's implicit one when ``single``: ``fn`` runs one statement, which sees one snapshot
        by itself). ``ef``: a search's HNSW breadth, set for that transaction only
        (:func:`normrank.backends.pgvector_search.breadth`), never remembered.
        Database errors become :class:`IndexStateError`; a write that failed rolled back whole."""
        psycopg, _ = _pg()
        with self._lock:
            conn = self._connection()
            try:
                if single:  # settings and statement in one round trip, one implicit transaction
                    with conn.pipeline():
                        if ef is not None:
                            breadth(conn, ef, self._iterative)
                        return fn(conn)
                if not read_only:
                    with conn.transaction():
                        return fn(conn)
                # Pipelined: BEGIN and the settings go out with the first query, one round trip.
                with conn.pipeline(), conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    if ef is not None:
                        breadth(conn, ef, self._iterative)
                    return fn(conn)
            except psycopg.errors.UniqueViolation as e:
                raise DuplicateIdError(f"ids already in {self.table}: {e.diag.message_detail}") from e
            except psycopg.Error as e:
                raise IndexStateError(f"PostgreSQL refused the operation on {self.table}: {e}") from e

    def _setup(self, adopt: bool) -> None:
        psycopg, register_vector = _pg()
        sql = _sql()
        conn = self._connection()
        try:
            with conn.transaction():
                # One setup at a time across clients: CREATE ... IF NOT EXISTS races otherwise.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('normrank setup'))")
                if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
                    conn.execute("CREATE EXTENSION vector")
                register_vector(conn)
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (table_oid oid PRIMARY KEY, dim int NOT NULL, "
                        "custom_weights boolean NOT NULL DEFAULT false, format int NOT NULL)"
                    ).format(self._reg)
                )
                S.check_registry(conn, self._reg)
                reg_schema = conn.execute(
                    "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.oid = to_regclass(%s)",
                    (self._reg.as_string(conn),),
                ).fetchone()[0]
                oid = self._oid(conn)
                if oid is None:
                    S.create_table(
                        conn,
                        self._t,
                        self.table,
                        dim=self.dim,
                        m=self.m,
                        ef_construction=self.ef_construction,
                    )
                    conn.execute(
                        sql.SQL("INSERT INTO {} VALUES (%s, %s, false, %s)").format(self._reg),
                        (self._oid(conn), self.dim, _FORMAT),
                    )
                elif not conn.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE table_oid = %s").format(self._reg), (oid,)
                ).fetchone():
                    if not adopt:
                        raise IndexStateError(
                            f"table {self.table!r} exists but is not a normrank table: choose another "
                            "name, or migrate it (docs/postgres.md) and pass adopt=True"
                        )
                    S.check_columns(conn, self._t, self.table, self.dim)
                    S.check_rows(conn, self._t, self.table)
                    conn.execute(
                        sql.SQL("INSERT INTO {} VALUES (%s, %s, false, %s)").format(self._reg),
                        (oid, self.dim, _FORMAT),
                    )
                else:
                    S.check_columns(conn, self._t, self.table, self.dim)
                # Every write, by normrank or plain SQL, bumps the table's generation: the client
                # copy of the band search (pgvector_band) is checked against it. A table of format 1
                # gets the trigger here, when reopened (refused if this role may not create it).
                B.generation_trigger(conn, self._t, self.table, reg_schema, REGISTRY)
                S.next_id_tracking(conn, self._t, self.table, reg_schema, REGISTRY)
                conn.execute(
                    sql.SQL("UPDATE {} SET format = %s WHERE table_oid = %s AND format < %s").format(
                        self._reg
                    ),
                    (_FORMAT, self._oid(conn), _FORMAT),
                )
        except psycopg.errors.InsufficientPrivilege as e:
            raise IndexStateError(
                f"not allowed to set up {self.table!r} ({e}); a superuser runs CREATE EXTENSION vector once"
            ) from e
        except psycopg.Error as e:
            raise IndexStateError(f"PostgreSQL could not set up {self.table!r}: {e}") from e

    def _next_id(self, conn: Any) -> int:
        """The next default id: after the largest id present and every id removed (``next_id``
        in the registry, raised before each removing statement by the table's trigger,
        :func:`normrank.backends.pgvector_sql.next_id_tracking`), so that a removed id is never
        handed out again, as in NormIndex."""
        sql = _sql()
        q = sql.SQL(
            "SELECT greatest(coalesce(max(id) + 1, 0), (SELECT next_id FROM {reg} WHERE table_oid = %s)) FROM {t}"
        ).format(reg=self._reg, t=self._t)
        return int(conn.execute(q, (self._oid(conn),)).fetchone()[0])

    def _oid(self, conn: Any) -> int | None:
        name = self._t.as_string(conn)
        row = conn.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def close(self) -> None:
        """Close the connection (idempotent; the next call would reopen it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> PgVectorNormIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bookkeeping ----------------------------------------------------------------------------

    def _count(self) -> int:
        sql = _sql()
        return int(
            self._run(lambda c: c.execute(sql.SQL("SELECT count(*) FROM {}").format(self._t)).fetchone()[0])
        )

    def __len__(self) -> int:
        with self._lock:
            self._n = self._count()
            return self._n

    @property
    def ntotal(self) -> int:
        return len(self)

    def refresh(self) -> None:
        """Re-read the row count that sizes the first band (after writes by other clients)."""
        len(self)

    @property
    def location(self) -> str:
        """Where the vectors are, for people (the contract's optional ``location``): a saved store
        over this index names it when it is loaded without the index."""
        return f"table {self.table!r}"

    def __repr__(self) -> str:
        return (
            f"PgVectorNormIndex(table={self.table!r}, dim={self.dim}, alpha={self.alpha}, "
            f"ef_search={self.ef_search}, exact={self.exact})"
        )

    def _custom(self, conn: Any) -> bool:
        sql = _sql()
        row = conn.execute(
            sql.SQL("SELECT custom_weights FROM {} WHERE table_oid = %s").format(self._reg),
            (self._oid(conn),),
        ).fetchone()
        if row is None:
            raise IndexStateError(f"table {self.table!r} is no longer registered in {REGISTRY}")
        return bool(row[0])

    def _column(self, expr: str) -> tuple[np.ndarray, np.ndarray]:
        sql = _sql()
        q = sql.SQL("SELECT id, " + expr + " FROM {} ORDER BY id").format(self._t)  # expr: our constants
        rows = self._run(lambda c: c.execute(q).fetchall(), read_only=True)
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, np.array([r[1] for r in rows], dtype=np.float32)

    @property
    def ids(self) -> np.ndarray:
        """int64 ids, ascending."""
        return self._column("norm")[0]

    @property
    def norms(self) -> np.ndarray:
        """float32 raw norms aligned with :attr:`ids`."""
        return self._column("norm")[1]

    @property
    def bases(self) -> np.ndarray:
        """The per-document bases that alpha exponentiates (a search's weight is ``base**alpha``),
        aligned with :attr:`ids`: the norms unless set by :meth:`set_bases`."""
        return self._column("coalesce(weight, norm)")[1]  # column weight: the custom base

    @property
    def weights(self) -> np.ndarray:
        """Deprecated: :attr:`bases` (the values before the power, not the weights ``base**alpha``)."""
        deprecated("PgVectorNormIndex.weights", "PgVectorNormIndex.bases")
        return self.bases

    def norm_of(self, ids: ArrayLike) -> np.ndarray:
        """Raw norms of ``ids`` (float32); raises :class:`UnknownIdError` for an id not present."""
        arr = as_id_list(ids)
        sql = _sql()
        q = sql.SQL("SELECT id, norm FROM {} WHERE id = ANY(%s)").format(self._t)
        found = dict(self._run(lambda c: c.execute(q, (arr.tolist(),)).fetchall(), read_only=True))
        missing = [int(i) for i in arr if int(i) not in found]
        if missing:
            raise UnknownIdError(f"unknown ids: {missing[:10]}")
        return np.array([found[int(i)] for i in arr], dtype=np.float32)

    def __contains__(self, id_: object) -> bool:
        if not isinstance(id_, int | np.integer) or isinstance(id_, bool) or int(id_) < 0:
            return False
        sql = _sql()
        q = sql.SQL("SELECT 1 FROM {} WHERE id = %s").format(self._t)
        return self._run(lambda c: c.execute(q, (int(id_),)).fetchone(), read_only=True) is not None

    def reconstruct(self, id_: int) -> np.ndarray:
        """The raw vector of ``id_`` (unit direction times norm; float32 rounding ~1e-7)."""
        one = as_id_list(id_, what="id")
        if one.shape != (1,):
            raise InvalidInputError(f"expected one id, got {one.size}")
        sql = _sql()
        q = sql.SQL("SELECT embedding, norm FROM {} WHERE id = %s").format(self._t)
        row = self._run(lambda c: c.execute(q, (int(one[0]),)).fetchone(), read_only=True)
        if row is None:
            raise UnknownIdError(f"unknown id: {int(one[0])}")
        return (np.asarray(row[0].to_numpy() if hasattr(row[0], "to_numpy") else row[0]) * row[1]).astype(
            np.float32
        )

    # -- mutation -------------------------------------------------------------------------------

    def _lock_table(self, conn: Any) -> None:
        # Writers of this table queue here (two default-id adds at once would clash).
        conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (self._oid(conn),))

    def _count_in(self, conn: Any) -> int:
        sql = _sql()
        return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self._t)).fetchone()[0])

    def add(
        self,
        x: ArrayLike,
        ids: ArrayLike | None = None,
        *,
        bases: ArrayLike | None = None,
        weights: ArrayLike | None = None,
    ) -> np.ndarray:
        """Add raw vectors ``x`` (n, dim); returns their int64 ids (default: after the largest).

        One transaction: every row is committed when this returns, or none. An id already in
        the table raises :class:`DuplicateIdError`; with custom bases set (:meth:`set_bases`),
        ``bases`` for the new rows are required (``weights``: its deprecated name). A bulk add (>= 1,000 rows, more than the table holds)
        rebuilds the HNSW index in the same transaction, faster than row-by-row inserts;
        searches by other clients wait for it to commit.
        """
        bases = bases_argument(bases, weights, "PgVectorNormIndex")
        unit, norms = split_norms(as_vectors(x, self.dim))
        n = unit.shape[0]
        w = None if bases is None else as_weights(bases, n, what="bases")
        given = None if ids is None else as_ids(ids, n)
        sql = _sql()

        def write(conn: Any) -> np.ndarray:
            self._lock_table(conn)
            custom = self._custom(conn)
            if custom and w is None and n:
                raise InvalidInputError("this table has custom bases: pass bases= for the new rows")
            if w is not None and not custom:
                raise InvalidInputError("bases= is for a table with custom bases (set_bases first)")
            if given is None:
                top = self._next_id(conn)
                new_ids = np.arange(top, top + n, dtype=np.int64)
            else:
                new_ids = given
                present = conn.execute(
                    sql.SQL("SELECT id FROM {} WHERE id = ANY(%s) ORDER BY id LIMIT 10").format(self._t),
                    (new_ids.tolist(),),
                ).fetchall()
                if present:
                    raise DuplicateIdError(f"ids already in {self.table}: {[r[0] for r in present]}")
            if n == 0:
                return new_ids
            # column weight holds the custom base (NULL: the norm is the base)
            copy = sql.SQL("COPY {} (id, embedding, norm, weight) FROM STDIN WITH (FORMAT BINARY)").format(
                self._t
            )
            wl = [None] * n if w is None else w.tolist()
            graphs = S.hnsw_indexes(conn, self._t) if n >= _REBUILD_MIN and n > self._count_in(conn) else []
            for name, _ in graphs:  # rebuilt below, in this transaction: a failure restores them
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
            with conn.cursor() as cur, cur.copy(copy) as cp:
                cp.set_types(["int8", "vector", "float4", "float4"])
                for i, v, nv, wv in zip(new_ids.tolist(), unit, norms.tolist(), wl, strict=True):
                    cp.write_row((i, v, nv, wv))
            if graphs:
                conn.execute(f"SET LOCAL maintenance_work_mem = '{_BUILD_MEMORY}'")
                for _, definition in graphs:
                    conn.execute(definition)  # pg_get_indexdef's own text for that index
            return new_ids

        with self._lock:
            out = self._run(write)
            self._n += n
            return out

    def remove(self, ids: ArrayLike) -> int:
        """Remove ``ids`` in one transaction; unknown ids raise :class:`UnknownIdError` and remove nothing."""
        arr = as_ids(ids)
        sql = _sql()

        def delete(conn: Any) -> int:
            self._lock_table(conn)
            gone = conn.execute(
                sql.SQL("DELETE FROM {} WHERE id = ANY(%s) RETURNING id").format(self._t), (arr.tolist(),)
            ).fetchall()
            if len(gone) != arr.size:
                missing = sorted(set(arr.tolist()) - {r[0] for r in gone})
                raise UnknownIdError(f"unknown ids: {missing[:10]}")  # rolls the delete back
            conn.execute(  # as the next-id trigger does, which may be disabled: never default ids again
                sql.SQL("UPDATE {} SET next_id = greatest(next_id, %s) WHERE table_oid = %s").format(
                    self._reg
                ),
                (int(arr.max()) + 1, self._oid(conn)),
            )
            return len(gone)

        if not arr.size:
            return 0
        with self._lock:
            out = self._run(delete)
            self._n -= out
            return out

    def set_bases(self, bases: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Score by ``cos * base**alpha`` with your own per-document ``base`` instead of the norm
        (one transaction; stored in the column ``weight``).

        ``bases`` align with ``ids`` (default: :attr:`ids`, ascending) and must cover every row.
        """
        sql = _sql()
        arr = None if ids is None else as_ids(ids)

        def update(conn: Any) -> None:
            self._lock_table(conn)
            have = [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(self._t))]
            target = np.array(have, dtype=np.int64) if arr is None else arr
            if target.size != len(have) or (arr is not None and set(arr.tolist()) != set(have)):
                raise InvalidInputError(
                    f"bases must cover all {len(have)} documents of {self.table}, got {target.size} ids"
                )
            w = as_weights(bases, target.size, what="bases")
            conn.execute(
                sql.SQL(
                    "UPDATE {t} SET weight = u.w FROM unnest(%s::bigint[], %s::real[]) AS u(id, w) WHERE {t}.id = u.id"
                ).format(t=self._t),
                (target.tolist(), w.tolist()),
            )
            conn.execute(
                sql.SQL("UPDATE {} SET custom_weights = true WHERE table_oid = %s").format(self._reg),
                (self._oid(conn),),
            )

        self._run(update)

    def clear_bases(self) -> None:
        """Score by the norms again (one transaction)."""
        sql = _sql()

        def update(conn: Any) -> None:
            self._lock_table(conn)
            conn.execute(sql.SQL("UPDATE {} SET weight = NULL WHERE weight IS NOT NULL").format(self._t))
            conn.execute(
                sql.SQL("UPDATE {} SET custom_weights = false WHERE table_oid = %s").format(self._reg),
                (self._oid(conn),),
            )

        self._run(update)

    def set_weights(self, weights: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Deprecated: :meth:`set_bases` (the values before the power, not the weights ``base**alpha``)."""
        deprecated("PgVectorNormIndex.set_weights", "PgVectorNormIndex.set_bases")
        self.set_bases(weights, ids)

    def clear_weights(self) -> None:
        """Deprecated: :meth:`clear_bases`."""
        deprecated("PgVectorNormIndex.clear_weights", "PgVectorNormIndex.clear_bases")
        self.clear_bases()

    # -- SQL function ---------------------------------------------------------------------------

    def install_sql_function(self, name: str = "normrank_search") -> None:
        """Create (or replace) the SQL function ``name(query vector, alpha float8, k int)`` that
        returns ``TABLE(id bigint, score float8)``: this table's top-``k`` by
        ``cos * w**alpha``, by the same band + bound search (docs/postgres.md)."""
        fn = _checked_table(name)
        # The plan at this ef_search, as the client's searches; sent within pgvector's limit (a
        # wider breadth scans at its limit).
        ef = self.ef_search
        self._run(
            lambda c: S.install_function(
                c,
                self._t,
                fn,
                dim=self.dim,
                k_factor=self.k_factor,
                ef_search=ef,
                iterative=self._iterative,
                ef_cap=EF_CAP,
            )
        )
