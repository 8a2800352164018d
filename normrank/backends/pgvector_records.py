"""``PgVectorRecordIndex``: a :class:`~normrank.backends.pgvector.PgVectorNormIndex` that also
keeps the adapters' documents (one JSON record per string id) in the same database.

Beside the vectors table ``<table>`` it keeps ``<table>_docs (key bigint PRIMARY KEY REFERENCES
<table>(id) ON DELETE CASCADE, id text UNIQUE NOT NULL, record json NOT NULL, parsed jsonb
GENERATED ALWAYS AS (record::jsonb) STORED)``: ``record`` keeps the text as written (key order
and numbers come back as they went in), filters read ``parsed`` (parsing ``record`` per row
and query made a filtered search of 10,000 rows 1.5-2x slower). A write of vectors and records (:meth:`PgVectorRecordIndex.add_records`) is one transaction: the vectors'
own ``add`` / ``remove`` run inside it (as savepoints) and commit or roll back with the records.
Removing a vector removes its record (the foreign key cascades), so the two tables cannot drift
apart through this class; :meth:`PgVectorRecordIndex.load_records` refuses a vector without a record.

Filters reach SQL as a small tree (:data:`Where`), with the semantics of Python on the record
(``have = record[path[0]].get(path[1])``, ``None`` when missing; a comparison Python would
refuse with ``TypeError`` is false): :func:`where_sql` composes it with bound parameters only
(names through ``psycopg.sql``, values as named ``%(p0)s`` parameters), and :meth:`PgVectorRecordIndex.search_where`
ranks the passing rows exactly by ``cos * w**alpha`` (the expression of ``pgvector_sql.W``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from normrank.backends import pgvector_sql as S
from normrank.backends.pgvector import REGISTRY, PgVectorNormIndex, _checked_table, _pg
from normrank.errors import (
    CorruptIndexError,
    DuplicateIdError,
    IndexStateError,
    InvalidInputError,
    InvalidParameterError,
    UnknownIdError,
)
from normrank.search.norm_band import start_search
from normrank.validation import MAX_ABS_ALPHA, as_ids

__all__ = ["PgVectorRecordIndex", "Where", "records_table", "table_dim", "where_sql"]

#: A filter tree: ``("and", [w, ...])``, ``("or", [w, ...])``, ``("not", w)``,
#: ``("cmp", path, op, value)`` with ``op`` one of eq ne gt gte lt lte in nin and ``value`` a
#: str, int, float, bool or None (a list of them for in / nin), ``("null", path)`` (the value is
#: missing or null), ``("empty", path)`` (missing, null, ``""`` or ``[]``), ``("sid_in", [ids])``,
#: ``("exists", path)`` (the key is there, even holding null), ``("like", path, pattern, ilike)``
#: (a string value matching SQL ``LIKE`` / ``ILIKE`` pattern, ``\\`` escaping).
#: ``path`` is a tuple of keys into the record, e.g. ``("metadata", "year")``.
Where = tuple

_SCALAR = (str, int, float, bool, type(None))
_ORDER = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def records_table(table: str) -> str:
    """The records table's name for vectors table ``table``."""
    return f"{_checked_table(table)}_docs"


def table_dim(conninfo: str, table: str) -> int | None:
    """The dimension normrank registered for ``table`` (``None`` if it is not a normrank table)."""
    psycopg, _ = _pg()
    from psycopg import sql

    name = _checked_table(table)
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if (
                conn.execute(
                    "SELECT to_regclass(%s)", (sql.Identifier(REGISTRY).as_string(conn),)
                ).fetchone()[0]
                is None
            ):
                return None
            S.check_registry(conn, sql.Identifier(REGISTRY))
            row = conn.execute(
                sql.SQL("SELECT dim FROM {} WHERE table_oid = to_regclass(%s)").format(
                    sql.Identifier(REGISTRY)
                ),
                (sql.Identifier(name).as_string(conn),),
            ).fetchone()
    except psycopg.Error as e:
        raise IndexStateError(f"cannot read the registry of {conninfo!r}: {e}") from e
    return None if row is None else int(row[0])


# -- NUL characters -------------------------------------------------------------------------------

# PostgreSQL's text and jsonb cannot hold U+0000 (psycopg refuses to send it, jsonb to parse it).
# It is refused before anything is sent, naming where it sits, rather than stored altered.
_NUL = "PostgreSQL text cannot hold the NUL character (U+0000): remove it (a store kept in memory accepts it)"


def nul_at(value: Any, path: str = "") -> str | None:
    """Where a NUL character sits in a JSON value (its keys and strings), as ``['a'][0]``; None if nowhere."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, v in value.items():
            here = f"{path}[{key!r}]"
            if isinstance(key, str) and "\x00" in key:
                return here + " (the key)"
            if (found := nul_at(v, here)) is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if (found := nul_at(v, f"{path}[{i}]")) is not None:
                return found
    return None


def _check_records(ids: Sequence[Any], records: Sequence[Any]) -> None:
    for sid, rec in zip(ids, records, strict=True):
        if isinstance(sid, str) and "\x00" in sid:
            raise InvalidInputError(f"document id {sid!r}: {_NUL}")
        if (where := nul_at(rec)) is not None:
            raise InvalidInputError(f"document {sid!r}, field {where}: {_NUL}")


# -- filters as SQL ------------------------------------------------------------------------------


def _check_value(v: Any, what: str) -> None:
    if not isinstance(v, _SCALAR) or (isinstance(v, float) and not math.isfinite(v)):
        raise InvalidParameterError(
            f"{what}: a SQL filter value is a str, finite number, bool or None, got {v!r}"
        )
    if isinstance(v, str) and "\x00" in v:
        raise InvalidParameterError(f"{what}: filter value {v!r}: {_NUL}")


def _path(path: Any) -> list[str]:
    if not isinstance(path, tuple) or not path or not all(isinstance(p, str) for p in path):
        raise InvalidParameterError(f"a filter path is a non-empty tuple of str keys, got {path!r}")
    if any("\x00" in p for p in path):
        raise InvalidParameterError(f"filter key path {path!r}: {_NUL}")
    return list(path)


def _bind(params: dict[str, Any], value: Any, cast: str) -> str:
    """A named placeholder for ``value`` (named, so that one value may be referenced twice)."""
    name = f"p{len(params)}"
    params[name] = value
    return f"%({name})s::{cast}"


def _eq(sql: Any, h: Any, v: Any, params: dict[str, Any]) -> Any:
    """``have == v`` as Python decides it for a scalar ``v`` (bools are the numbers 0 and 1)."""
    if v is None:
        return sql.SQL("({h} IS NULL OR jsonb_typeof({h}) = 'null')").format(h=h)
    if isinstance(v, str):
        p = _bind(params, v, "text")
        return sql.SQL(
            "coalesce(jsonb_typeof({h}) = 'string' AND ({h} #>> '{{}}') = " + p + ", false)"
        ).format(h=h)
    p = _bind(params, _number(v), "numeric")
    return sql.SQL("coalesce({n} = " + p + ", false)").format(n=_num(sql, h))


def _number(v: Any) -> str:
    # The shortest repr of a float: numeric order and equality then agree with Python's floats.
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def _num(sql: Any, h: Any) -> Any:
    # A JSON number, or a JSON bool as 0 / 1 (Python's True == 1); NULL for anything else.
    return sql.SQL(
        "(CASE jsonb_typeof({h}) WHEN 'number' THEN ({h})::numeric "
        "WHEN 'boolean' THEN (CASE WHEN {h} = 'true'::jsonb THEN 1 ELSE 0 END)::numeric END)"
    ).format(h=h)


def _order(sql: Any, h: Any, op: str, v: Any, params: dict[str, Any]) -> Any:
    """``have <op> v``; false where Python raises TypeError (None, mixed kinds, containers)."""
    if v is None:
        return sql.SQL("false")
    if isinstance(v, str):  # code-point order, as Python compares str
        p = _bind(params, v, "text")
        return sql.SQL(
            "coalesce(jsonb_typeof({h}) = 'string' AND ({h} #>> '{{}}') COLLATE \"C\" "
            + _ORDER[op]
            + " "
            + p
            + ", false)"
        ).format(h=h)
    p = _bind(params, _number(v), "numeric")
    return sql.SQL("coalesce({n} " + _ORDER[op] + " " + p + ", false)").format(n=_num(sql, h))


def _at(sql: Any, path: Any, params: dict[str, Any]) -> Any:
    return sql.SQL("(d.parsed #> " + _bind(params, _path(path), "text[]") + ")")


def _node(sql: Any, w: Any, params: dict[str, Any]) -> Any:
    if not isinstance(w, tuple) or not w:
        raise InvalidParameterError(f"not a filter node: {w!r}")
    kind = w[0]
    if kind in ("and", "or"):
        if len(w) != 2 or not isinstance(w[1], list):
            raise InvalidParameterError(f"{kind} takes a list of filter nodes, got {w!r}")
        if not w[1]:
            return sql.SQL("true" if kind == "and" else "false")
        glue = " AND " if kind == "and" else " OR "
        return sql.SQL("({})").format(sql.SQL(glue).join([_node(sql, x, params) for x in w[1]]))
    if kind == "not" and len(w) == 2:
        return sql.SQL("(NOT {})").format(_node(sql, w[1], params))
    if kind == "sid_in" and len(w) == 2 and isinstance(w[1], list) and all(isinstance(s, str) for s in w[1]):
        if bad := [s for s in w[1] if "\x00" in s]:
            raise InvalidParameterError(f"document ids {bad!r}: {_NUL}")
        return sql.SQL("(d.id = ANY(" + _bind(params, list(w[1]), "text[]") + "))")
    if kind == "null" and len(w) == 2:
        return _eq(sql, _at(sql, w[1], params), None, params)
    if kind == "empty" and len(w) == 2:
        h = _at(sql, w[1], params)
        return sql.SQL("({h} IS NULL OR {h} IN ('null'::jsonb, '\"\"'::jsonb, '[]'::jsonb))").format(h=h)
    if kind == "exists" and len(w) == 2:  # the key is there, even holding null
        return sql.SQL("({} IS NOT NULL)").format(_at(sql, w[1], params))
    if kind == "like" and len(w) == 4 and isinstance(w[2], str) and isinstance(w[3], bool):
        h, like = _at(sql, w[1], params), " ILIKE " if w[3] else " LIKE "
        p = _bind(params, w[2], "text")
        return sql.SQL(
            "coalesce(jsonb_typeof({h}) = 'string' AND ({h} #>> '{{}}')" + like + p + ", false)"
        ).format(h=h)
    if kind == "cmp" and len(w) == 4:
        _, path, op, v = w
        h = _at(sql, path, params)
        if op in ("in", "nin"):
            if not isinstance(v, list):
                raise InvalidParameterError(f"{op} takes a list of values, got {v!r}")
            for x in v:
                _check_value(x, op)
            parts = [_eq(sql, h, x, params) for x in v]
            inside = sql.SQL("({})").format(sql.SQL(" OR ").join(parts)) if parts else sql.SQL("false")
            return inside if op == "in" else sql.SQL("(NOT {})").format(inside)
        _check_value(v, op)
        if op == "eq":
            return _eq(sql, h, v, params)
        if op == "ne":
            return sql.SQL("(NOT {})").format(_eq(sql, h, v, params))
        if op in _ORDER:
            return _order(sql, h, op, v, params)
        raise InvalidParameterError(f"unknown comparison {op!r}: use eq ne gt gte lt lte in nin")
    raise InvalidParameterError(f"not a filter node: {w!r}")


def where_sql(where: Where) -> tuple[Any, dict[str, Any]]:
    """``(SQL condition over the records row d, its named parameters)``: never NULL, values bound."""
    from psycopg import sql

    params: dict[str, Any] = {}
    return _node(sql, where, params), params


# -- the index -----------------------------------------------------------------------------------


class PgVectorRecordIndex(PgVectorNormIndex):
    """:class:`PgVectorNormIndex` plus the records table ``<table>_docs`` (module docstring).

    Same arguments as :class:`PgVectorNormIndex`; ``dim=None`` reads the dimension of an
    existing table from the registry (:class:`InvalidParameterError` if the table is new).
    A vectors table that holds rows but no records table (written by ``PgVectorNormIndex``
    alone) is refused with :class:`IndexStateError`, never opened as an empty store.
    """

    keeps_records = True

    def __init__(self, conninfo: str, table: str, dim: int | None = None, **options: Any) -> None:
        _pg()
        if not isinstance(conninfo, str):
            raise InvalidParameterError(f"conninfo must be a libpq connection string, got {type(conninfo)}")
        known = table_dim(conninfo, table)
        if dim is None:
            if known is None:
                raise InvalidParameterError(
                    f"table {table!r} does not exist yet in this database: pass dim= to create it"
                )
            dim = known
        super().__init__(conninfo, table, dim, **options)
        from psycopg import sql

        self.records_table = records_table(table)
        self._d = sql.Identifier(self.records_table)
        self._run(self._setup_records)

    def _setup_records(self, conn: Any) -> None:
        from psycopg import sql

        conn.execute("SELECT pg_advisory_xact_lock(hashtext('normrank setup'))")
        if conn.execute("SELECT to_regclass(%s)", (self._d.as_string(conn),)).fetchone()[0] is None:
            n = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self._t)).fetchone()[0]
            if n:
                raise IndexStateError(
                    f"table {self.table!r} holds {n} vectors but no records table {self.records_table!r}: "
                    "it was written without records (keep loading it with KeyedStore.load and its JSON "
                    "file), or use another table"
                )
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {d} (key bigint PRIMARY KEY REFERENCES {t} (id) ON DELETE CASCADE, "
                    "id text NOT NULL UNIQUE, record json NOT NULL, "
                    "parsed jsonb GENERATED ALWAYS AS (record::jsonb) STORED)"
                ).format(d=self._d, t=self._t)
            )
            return
        have = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                (self._d.as_string(conn),),
            ).fetchall()
        )
        want = {"key": "bigint", "id": "text", "record": "json", "parsed": "jsonb"}
        if any(have.get(c) != kind for c, kind in want.items()):
            raise IndexStateError(
                f"table {self.records_table!r} exists but is not normrank's records table "
                f"(columns {sorted(have.items())}): choose another table name"
            )

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One transaction on this object's connection, under its lock: the vectors' own writes
        called inside join it as savepoints. Database errors become typed errors."""
        psycopg, _ = _pg()
        with self._lock:
            conn = self._connection()
            try:
                with conn.transaction():
                    yield conn
            except psycopg.errors.UniqueViolation as e:
                self._recount()
                raise DuplicateIdError(f"ids already in {self.records_table}: {e.diag.message_detail}") from e
            except psycopg.Error as e:
                self._recount()
                raise IndexStateError(f"PostgreSQL refused the operation on {self.records_table}: {e}") from e
            except BaseException:
                self._recount()
                raise

    def _recount(self) -> None:
        # The vectors' add / remove counted rows that were rolled back; the count only sizes the
        # first band of a search, so a connection too broken to recount keeps the old one.
        with suppress(IndexStateError):
            self._n = self._count()

    def add_records(
        self,
        x: ArrayLike,
        keys: ArrayLike,
        ids: Sequence[str],
        records: Sequence[dict[str, Any]],
        replaced: ArrayLike = (),
    ) -> None:
        """In ONE transaction: add vectors ``x`` under int ``keys``, remove the vectors (and so
        the records) of the keys ``replaced``, and insert one record per string id. It commits
        whole or not at all."""
        keys = as_ids(keys)
        gone = as_ids(np.asarray(replaced, dtype=np.int64).reshape(-1))
        if not (len(ids) == len(records) == keys.size):
            raise InvalidInputError(f"{keys.size} keys, {len(ids)} ids and {len(records)} records")
        _check_records(ids, records)
        if len(set(ids)) != len(ids):
            raise DuplicateIdError("ids repeat within one add_records call")
        from psycopg import sql
        from psycopg.types.json import Json

        try:
            with self._transaction() as conn:
                PgVectorNormIndex.add(self, x, ids=keys)
                if gone.size:
                    PgVectorNormIndex.remove(self, gone)
                copy = sql.SQL("COPY {} (key, id, record) FROM STDIN").format(self._d)
                with conn.cursor() as cur, cur.copy(copy) as cp:
                    for key, sid, rec in zip(keys.tolist(), ids, records, strict=True):
                        cp.write_row((key, sid, Json(rec)))
        except (DuplicateIdError, UnknownIdError) as e:
            # The keys and overwritten rows come from what this store read of the table: a key
            # taken, a row gone or an id already there means someone else wrote it since.
            raise IndexStateError(
                f"another client wrote {self.table!r} since this store read it ({e}); nothing was "
                "written: one writer per table at a time, reopen the store (from_postgres, "
                "KeyedStore.from_index) to see the other writes, then write again"
            ) from e

    def update_records(self, keys: Sequence[int], records: Sequence[dict[str, Any]]) -> None:
        """Rewrite the records of existing ``keys`` (one transaction)."""
        if not keys:
            return
        _check_records([f"key {k}" for k in keys], records)
        from psycopg import sql

        q = sql.SQL(
            "UPDATE {d} SET record = u.r FROM unnest(%s::bigint[], %s::json[]) AS u(k, r) "
            "WHERE {d}.key = u.k AND {d}.record::text IS DISTINCT FROM u.r::text"
        ).format(d=self._d)
        with self._transaction() as conn:
            conn.execute(q, ([int(k) for k in keys], [json.dumps(r, allow_nan=False) for r in records]))

    def load_records(self) -> list[tuple[int, str, dict[str, Any]]]:
        """Every ``(key, id, record)``, by key, read in one snapshot; :class:`CorruptIndexError` if
        a vector has no record (the foreign key rules out the other way round)."""
        from psycopg import sql

        def read(conn: Any) -> tuple[list, int]:
            rows = conn.execute(
                sql.SQL("SELECT key, id, record FROM {} ORDER BY key").format(self._d)
            ).fetchall()
            orphans = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {t} t WHERE NOT EXISTS (SELECT 1 FROM {d} d WHERE d.key = t.id)"
                ).format(t=self._t, d=self._d)
            ).fetchone()[0]
            return rows, int(orphans)

        rows, orphans = self._run(read, read_only=True)
        if orphans:
            raise CorruptIndexError(
                f"{orphans} vectors of {self.table!r} have no record in {self.records_table!r} "
                "(written by PgVectorNormIndex directly?): remove them or add their records"
            )
        return [(int(k), str(s), r) for k, s, r in rows]

    def stored_alpha(self) -> float | None:
        """The store's alpha as last saved in the database (a JSON comment on the records table,
        ``{"alpha": a}``), or None when none was: reopening keeps the alpha a store was built with,
        as a FAISS store's folder does."""
        got = self._run(
            lambda c: c.execute(
                "SELECT obj_description(to_regclass(%s), 'pg_class')", (self._d.as_string(c),)
            ).fetchone()[0],
            read_only=True,
        )
        try:
            value = json.loads(got)["alpha"] if got else None
        except (ValueError, TypeError, KeyError):
            raise CorruptIndexError(
                f"the comment on {self.records_table!r} is not normrank's ({got!r}): reset it with "
                f"COMMENT ON TABLE {self.records_table} IS NULL"
            ) from None
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not abs(float(value)) <= MAX_ABS_ALPHA  # NaN included
        ):
            raise CorruptIndexError(
                f"the comment on table {self.records_table!r} saves alpha {value!r}, not a number in "
                f"[-{MAX_ABS_ALPHA:g}, {MAX_ABS_ALPHA:g}]: set it with COMMENT ON TABLE "
                f"{self.records_table} IS '{{\"alpha\": 0.5}}' (your alpha), or reset it with "
                f"COMMENT ON TABLE {self.records_table} IS NULL to take the alpha the store is opened with"
            )
        return None if value is None else float(value)

    def store_alpha(self, alpha: float) -> None:
        """Save ``alpha`` as the store's (one statement; what :meth:`stored_alpha` reads)."""
        from psycopg import sql

        text = json.dumps({"alpha": float(alpha)}, allow_nan=False)
        q = sql.SQL("COMMENT ON TABLE {d} IS {c}").format(d=self._d, c=sql.Literal(text))
        with self._transaction() as conn:
            conn.execute(q)

    def next_key(self) -> int:
        """The next default id of the vectors table: after the largest present and every id
        removed (0 when it never held any)."""
        return int(self._run(self._next_id, read_only=True))

    def search_where(
        self, q: ArrayLike, k: int, *, alpha: float | None = None, where: Where | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` by ``cos(q, d) * w**alpha`` over the rows whose record passes ``where``
        (every row when ``None``), in one SQL statement; ``(scores, keys)`` as :meth:`search`
        (one query, padded with ``-inf`` / ``-1``), equal scores in key order."""
        unit_q, alphas, scores, ids = start_search(q, k, self.dim, self.alpha if alpha is None else alpha)
        if unit_q.shape[0] != 1:
            raise InvalidInputError(f"search_where takes one query, got {unit_q.shape[0]}")
        from psycopg import sql

        cond, params = (sql.SQL("true"), {}) if where is None else where_sql(where)
        q_sql = sql.SQL(
            "SELECT t.id, -(t.embedding <#> %(qv)s::vector) * "
            + S.W("%(qa)s::float8", "coalesce(t.weight, t.norm)")
            + " AS s FROM {t} t JOIN {d} d ON d.key = t.id"
            " WHERE {cond} ORDER BY s DESC, t.id LIMIT {k}"
        ).format(t=self._t, d=self._d, cond=cond, k=sql.Literal(int(scores.shape[1])))
        args = {"qv": np.ascontiguousarray(unit_q[0], dtype=np.float32), "qa": float(alphas[0]), **params}
        rows = self._run(lambda c: c.execute(q_sql, args).fetchall(), single=True)
        S.fill_one(scores, ids, 0, [r[0] for r in rows], [r[1] for r in rows])
        return scores, ids
