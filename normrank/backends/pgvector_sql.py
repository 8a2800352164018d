"""The SQL statements of :mod:`normrank.backends.pgvector`, one per search round, and the SQL function.

Every statement takes all queries of a call at once (``unnest`` of the query vectors, their
alphas and, for the second round, their band edges, ``WITH ORDINALITY``) and returns one row per
query with its top-k as two arrays, so a batch is one round trip per round and only ``k``
results per query cross the connection. Scores are computed in SQL by one expression,
:data:`W`: ``cos * w**alpha`` with ``w = coalesce(weight, norm)``, ``w**alpha`` as
``exp(alpha * ln w)`` clamped like :func:`normrank.scoring.norm_weight` (PostgreSQL raises on
float8 overflow and underflow). The table name only enters as a ``psycopg.sql.Identifier``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from normrank.errors import DimensionMismatchError, IndexStateError
from normrank.scoring import WEIGHT_CAP
from normrank.search.bound import SCORE_ROUNDING, cosine_slack

_LN_CAP = repr(math.log(WEIGHT_CAP))
BASE = "coalesce(weight, norm)"


def W(alpha: str, base: str = BASE) -> str:
    """SQL text of ``base ** alpha`` (both SQL expressions of ours, never user text)."""
    return f"exp(least(greatest(({alpha}) * ln({base}), -700), {_LN_CAP}))"


_QUERIES = "unnest(%b::vector[], %s::float8[]) WITH ORDINALITY AS q(v, a, qi)"
_TOP = "array_agg(id ORDER BY s DESC, id) AS ids, array_agg(s ORDER BY s DESC, id) AS ss"


def _vectors(unit_q: np.ndarray) -> list[np.ndarray]:
    return [np.ascontiguousarray(v, dtype=np.float32) for v in unit_q]


def _pairs(rows: list[tuple]) -> list[tuple[list[int], list[float]]]:
    return [(r[0] or [], r[1] or []) for r in rows]


def exact_rows(conn: Any, t: Any, unit_q: np.ndarray, alphas: np.ndarray, k: int) -> list:
    """Per query, the exact top-``k`` over every row (a sequential scan)."""
    from psycopg import sql

    q = sql.SQL(
        "SELECT r.ids, r.ss FROM " + _QUERIES + ", LATERAL (SELECT " + _TOP + " FROM (SELECT id, "
        "-(embedding <#> q.v) * " + W("q.a") + " AS s FROM {t} ORDER BY s DESC, id LIMIT {k}) x) r "
        "ORDER BY q.qi"
    ).format(t=t, k=sql.Literal(k))
    return _pairs(conn.execute(q, (_vectors(unit_q), alphas.tolist())).fetchall())


def plain_rows(conn: Any, t: Any, unit_q: np.ndarray, k: int) -> list:
    """Per query, the HNSW cosine top-``k`` (alpha = 0)."""
    from psycopg import sql

    if unit_q.shape[0] == 1:  # the plain statement itself
        v = unit_q[0].astype(np.float32)
        # The plain query's very shape, so that the planner costs (and plans) it alike.
        q1 = sql.SQL("SELECT id, embedding <#> %b AS d FROM {t} ORDER BY d LIMIT {k}").format(
            t=t, k=sql.Literal(k)
        )
        got = sorted(conn.execute(q1, (v,)).fetchall(), key=lambda r: (r[1], r[0]))  # ties: id order
        return [([r[0] for r in got], [-r[1] for r in got])]

    q = sql.SQL(
        "SELECT r.ids, r.ss FROM unnest(%b::vector[]) WITH ORDINALITY AS q(v, qi), LATERAL (SELECT "
        + _TOP
        + " FROM (SELECT id, -(embedding <#> q.v) AS s FROM {t} ORDER BY embedding <#> q.v LIMIT {k}) x) r "
        "ORDER BY q.qi"
    ).format(t=t, k=sql.Literal(k))
    return _pairs(conn.execute(q, (_vectors(unit_q),)).fetchall())


def candidates(
    conn: Any, t: Any, unit_q: np.ndarray, *, trigger: str, depth: int, registry: str = "normrank_tables"
):
    """One statement (one snapshot, even outside a transaction): the table's ``(oid, generation,
    tgenabled of its generation trigger or None)`` from the registry, or None where it is not
    registered, and per query the HNSW cosine top-``depth`` as ``(ids, cosines)``, best first
    (the client band's candidates, :mod:`normrank.backends.pgvector_band`)."""
    from psycopg import sql

    inner = "SELECT array_agg(id ORDER BY d, id) AS ids, array_agg(-d ORDER BY d, id) AS cs FROM (SELECT id, "
    if unit_q.shape[0] == 1:
        per = f"SELECT 1::bigint AS qi, x.* FROM ({inner}embedding <#> %b AS d FROM {{t}} ORDER BY embedding <#> %b LIMIT {{depth}}) y) x"
        args: tuple = (unit_q[0].astype(np.float32), unit_q[0].astype(np.float32))
    else:
        per = (
            f"SELECT q.qi, x.* FROM unnest(%b::vector[]) WITH ORDINALITY AS q(v, qi), LATERAL ({inner}"
            "embedding <#> q.v AS d FROM {t} ORDER BY embedding <#> q.v LIMIT {depth}) y) x"
        )
        args = (_vectors(unit_q),)
    q = sql.SQL(
        "WITH g AS (SELECT r.table_oid, r.generation, (SELECT tg.tgenabled::text FROM pg_trigger tg "
        "WHERE tg.tgrelid = r.table_oid AND tg.tgname = %s) AS en FROM {reg} r "
        "WHERE r.table_oid = to_regclass(%s)) "
        "SELECT g.table_oid, g.generation, g.en, c.ids, c.cs FROM g LEFT JOIN LATERAL ("
        + per
        + ") c ON true "
        "ORDER BY c.qi"
    ).format(t=t, depth=sql.Literal(int(depth)), reg=sql.Identifier(registry))
    rows = conn.execute(q, (trigger, t.as_string(conn), *args)).fetchall()
    if not rows:
        return None, []
    return (int(rows[0][0]), int(rows[0][1]), rows[0][2]), [(r[3] or [], r[4] or []) for r in rows]


def vectors_of(conn: Any, t: Any, ids: np.ndarray) -> np.ndarray:
    """The unit vectors of ``ids`` (float32 ``(m, dim)``), in the order of ``ids``."""
    from psycopg import sql

    q = sql.SQL(
        "SELECT e.embedding FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(id, o) JOIN {t} e USING (id) "
        "ORDER BY u.o"
    ).format(t=t)
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(q, (ids.tolist(),)).fetchall()
    if not rows:
        return np.empty((0, 0), dtype=np.float32)
    return np.stack(
        [r[0].to_numpy() if hasattr(r[0], "to_numpy") else np.asarray(r[0]) for r in rows]
    ).astype(np.float32, copy=False)


def first_rows(
    conn: Any, t: Any, unit_q: np.ndarray, alphas: np.ndarray, *, k: int, depth: int, trust: int, band: int
) -> list:
    """First round, per query: ``(top ids, top scores, cosine at the trusted rank, rows in the
    band, the band's innermost base, the smallest and the largest base of the table)`` over the ``depth`` best cosines (HNSW) and the ``band``
    extreme bases on the side alpha favours (b-tree), all scored in SQL."""
    from psycopg import sql

    fetch = f"SELECT id, -(embedding <#> q.v) AS c, {BASE} AS b FROM {{t}}"
    q = sql.SQL(
        "SELECT r.*, m.lo, m.hi FROM " + _QUERIES + ", LATERAL ("
        f"WITH cand AS ({fetch} ORDER BY embedding <#> q.v LIMIT {{depth}}), "
        f"band AS (({fetch} WHERE q.a > 0 ORDER BY {BASE} DESC LIMIT {{band}}) "
        f"UNION ALL ({fetch} WHERE q.a < 0 ORDER BY {BASE} ASC LIMIT {{band}})), "
        "u AS (SELECT id, c, b FROM cand UNION SELECT id, c, b FROM band), "
        f"top AS (SELECT id, c * {W('q.a', 'b')} AS s FROM u ORDER BY s DESC, id LIMIT {{k}}) "
        "SELECT (SELECT array_agg(id ORDER BY s DESC, id) FROM top) AS ids, "
        "(SELECT array_agg(s ORDER BY s DESC, id) FROM top) AS ss, "
        "(SELECT c FROM cand ORDER BY c DESC OFFSET greatest(least({trust}, (SELECT count(*) FROM cand)) - 1, 0) "
        "LIMIT 1) AS trusted_cosine, (SELECT count(*) FROM band) AS nb, "
        "CASE WHEN q.a > 0 THEN (SELECT min(b) FROM band) ELSE (SELECT max(b) FROM band) END AS edge"
        f") r, (SELECT min({BASE}) AS lo, max({BASE}) AS hi FROM {{t}}) m ORDER BY q.qi"
    ).format(
        t=t, k=sql.Literal(k), depth=sql.Literal(depth), band=sql.Literal(band), trust=sql.Literal(trust)
    )
    rows = conn.execute(q, (_vectors(unit_q), alphas.tolist())).fetchall()
    return [
        (
            ids or [],
            ss or [],
            None if c is None else float(c),
            int(nb),
            None if e is None else float(e),
            lo,
            hi,
        )
        for ids, ss, c, nb, e, lo, hi in rows
    ]


def band_rows(
    conn: Any, t: Any, unit_q: np.ndarray, alphas: np.ndarray, edges: np.ndarray, *, k: int
) -> list:
    """Second round, per query: the top-``k`` of every row whose base lies beyond its edge on
    the side alpha favours (a b-tree range; every row when the edge is 0 or +inf)."""
    from psycopg import sql

    score = f"SELECT id, -(embedding <#> q.v) * {W('q.a')} AS s FROM {{t}}"
    q = sql.SQL(
        "SELECT r.ids, r.ss FROM unnest(%b::vector[], %s::float8[], %s::float8[]) WITH ORDINALITY "
        "AS q(v, a, e, qi), LATERAL (SELECT " + _TOP + " FROM ("
        f"({score} WHERE q.a > 0 AND {BASE} > q.e) UNION ALL ({score} WHERE q.a < 0 AND {BASE} < q.e) "
        "ORDER BY s DESC, id LIMIT {k}) x) r ORDER BY q.qi"
    ).format(t=t, k=sql.Literal(k))
    return _pairs(conn.execute(q, (_vectors(unit_q), alphas.tolist(), edges.tolist())).fetchall())


def fill_one(scores: np.ndarray, ids: np.ndarray, i: int, top_ids: list, top_s: list) -> None:
    m = min(len(top_ids), scores.shape[1])
    scores[i, :m] = top_s[:m]
    ids[i, :m] = top_ids[:m]


def fill(scores: np.ndarray, ids: np.ndarray, rows: np.ndarray, results: list) -> None:
    for i, (top_ids, top_s) in zip(rows.tolist(), results, strict=True):
        fill_one(scores, ids, i, top_ids, top_s)


def merge_one(scores: np.ndarray, ids: np.ndarray, i: int, more_ids: list, more_s: list) -> None:
    """Row ``i``'s top-k merged with more results (an id in both counts once), in the SQL
    order: score descending, then id."""
    best: dict[int, float] = {int(d): float(s) for d, s in zip(ids[i], scores[i], strict=True) if d >= 0}
    best.update({int(d): float(s) for d, s in zip(more_ids, more_s, strict=True)})
    ranked = sorted(best.items(), key=lambda p: (-p[1], p[0]))[: scores.shape[1]]
    fill_one(scores, ids, i, [d for d, _ in ranked], [s for _, s in ranked])


# normrank.search.plan.plan_search's depth and trusted rank for an HNSW at efSearch {ef}, in SQL
# for the function's own k (integer division as Python's //; the table's row count caps the
# depth through LIMIT, the trusted rank through the rows fetched). tests/test_pgvector_plan.py
# checks them against plan_search over a grid of (k, k_factor, ef).
PLAN_DEPTH = "least(greatest(k * {kf}, {ef} / 8), greatest({ef}, k))"
PLAN_TRUST = "least(" + PLAN_DEPTH + ", greatest(2 * k, {ef} / 8))"


def can_beat_sql(kth: str, c: str, w_hi: str, w_lo: str, dim: int) -> str:
    """SQL text of :func:`normrank.search.bound.unseen_can_beat` (its operations in its order,
    its margins as literals: float8 gives the same answer bit for bit) over the SQL expressions
    ``kth``, ``c`` (trusted cosine), ``w_hi`` / ``w_lo`` (largest and smallest weight), for
    vectors of length ``dim``."""
    c_hi = f"({c} + {cosine_slack(dim)!r}::float8)"
    top = f"greatest({c_hi} * {w_hi}, {c_hi} * {w_lo})"
    return f"({top} + {SCORE_ROUNDING!r}::float8 * abs({top}) > {kth})"


def weight_limit_sql(kth: str, c: str, dim: int) -> str:
    """SQL text of :func:`normrank.search.bound.weight_limit`, and of the condition under which
    it means something (the trusted cosine plus its margin positive): ``(limit, condition)``."""
    c_hi = f"({c} + {cosine_slack(dim)!r}::float8)"
    return f"({kth} / ({c_hi} * {1.0 + SCORE_ROUNDING!r}::float8))", f"({c_hi} > 0)"


# The SQL function: the one bound (normrank.search.bound, its text from can_beat_sql and
# weight_limit_sql) at the plan's depths, with the band read off the bound in one step. The
# index scan's breadth is capped at pgvector's 1,000 (deeper candidates come from the iterative
# scan, where the server has one); a plain query the index scan answers short (dead rows in the
# graph) is answered by an exact scan.
_FUNCTION = (
    """
DECLARE
  depth int := """
    + PLAN_DEPTH
    + """;
  trust int := """
    + PLAN_TRUST
    + """;
  b_lo float8; b_hi float8; trusted_cosine float8; kth float8; w_hi float8; w_lo float8; edge float8;
  top_ids bigint[]; top_s float8[]; cs float8[]; got int;
BEGIN
  IF k IS NULL OR k < 1 THEN RAISE EXCEPTION 'k must be an integer >= 1'; END IF;
  IF alpha IS NULL OR NOT abs(alpha) <= 16 THEN RAISE EXCEPTION 'alpha must lie in [-16, 16]'; END IF;
  IF query IS NULL OR vector_norm(query) = 0 THEN RAISE EXCEPTION 'the query has zero length'; END IF;
  query := l2_normalize(query);
  PERFORM set_config('hnsw.ef_search', least(greatest({ef}, depth), {cap})::text, true);
  IF alpha = 0 THEN
    SELECT array_agg(x.id ORDER BY x.c DESC, x.id), array_agg(x.c ORDER BY x.c DESC, x.id)
      INTO top_ids, top_s
      FROM (SELECT t.id, -(t.embedding <#> query) AS c FROM {t} t
             ORDER BY t.embedding <#> query LIMIT k) x;
    IF coalesce(cardinality(top_ids), 0) < k THEN
      RETURN QUERY SELECT t.id, -(t.embedding <#> query) AS s FROM {t} t ORDER BY s DESC, t.id LIMIT k;
    ELSE
      RETURN QUERY SELECT u.i, u.s FROM unnest(top_ids, top_s) AS u(i, s);
    END IF;
    RETURN;
  END IF;
  SELECT min(coalesce(t.weight, t.norm)), max(coalesce(t.weight, t.norm)) INTO b_lo, b_hi FROM {t} t;
  IF b_lo IS NULL THEN RETURN; END IF;
  SELECT array_agg(x.id ORDER BY x.s DESC, x.id), array_agg(x.s ORDER BY x.s DESC, x.id),
         array_agg(x.c ORDER BY x.c DESC)
    INTO top_ids, top_s, cs
    FROM (SELECT t.id, -(t.embedding <#> query) AS c,
                 -(t.embedding <#> query) * {w_row} AS s
            FROM {t} t ORDER BY t.embedding <#> query LIMIT depth) x;
  got := coalesce(cardinality(cs), 0);
  trusted_cosine := cs[least(trust, got)];
  kth := CASE WHEN got >= k THEN top_s[k] ELSE '-Infinity'::float8 END;
  w_hi := greatest({w_lo_b}, {w_hi_b});
  w_lo := least({w_lo_b}, {w_hi_b});
  IF got > 0 AND NOT {can_beat} THEN
    RETURN QUERY SELECT u.i, u.s FROM unnest(top_ids[1:k], top_s[1:k]) AS u(i, s);
    RETURN;
  END IF;
  IF got = 0 OR NOT {limit_holds} OR kth <= 0 THEN
    edge := CASE WHEN alpha > 0 THEN 0 ELSE 'Infinity'::float8 END;
  ELSE
    edge := exp(least(ln({limit}) / alpha, 700));
  END IF;
  RETURN QUERY SELECT y.i, y.s FROM (
      SELECT u.i, u.s FROM unnest(top_ids, top_s) AS u(i, s)
      UNION
      SELECT t.id, -(t.embedding <#> query) * {w_row} FROM {t} t
       WHERE alpha > 0 AND coalesce(t.weight, t.norm) > edge
      UNION
      SELECT t.id, -(t.embedding <#> query) * {w_row} FROM {t} t
       WHERE alpha < 0 AND coalesce(t.weight, t.norm) < edge
    ) y ORDER BY y.s DESC, y.i LIMIT k;
END
"""
)


def install_function(
    conn: Any, t: Any, name: str, *, dim: int, k_factor: int, ef_search: int, iterative: bool, ef_cap: int
) -> None:
    """``CREATE OR REPLACE FUNCTION name(query vector, alpha float8, k int) RETURNS TABLE(id
    bigint, score float8)`` over table ``t``; its body is composed with the table as an
    Identifier and passed as one quoted literal. STABLE: both of its rounds read the snapshot
    of the statement that calls it, whatever other clients commit meanwhile. ``ef_search``: the
    breadth the plan is made for (as the client's searches), sent capped at pgvector's
    ``ef_cap``; ``dim``: the table's vector length (the bound's cosine margin); ``iterative``: the server's pgvector has ``hnsw.iterative_scan`` (>= 0.8), set
    for the function's calls only, as its ``ef_search``."""
    from psycopg import sql

    limit, limit_holds = weight_limit_sql("kth", "trusted_cosine", dim)
    body = (
        sql.SQL(_FUNCTION)
        .format(
            t=t,
            kf=sql.Literal(int(k_factor)),
            ef=sql.Literal(int(ef_search)),
            cap=sql.Literal(int(ef_cap)),
            w_row=sql.SQL(W("alpha", "coalesce(t.weight, t.norm)")),
            w_lo_b=sql.SQL(W("alpha", "b_lo")),
            w_hi_b=sql.SQL(W("alpha", "b_hi")),
            can_beat=sql.SQL(can_beat_sql("kth", "trusted_cosine", "w_hi", "w_lo", dim)),
            limit=sql.SQL(limit),
            limit_holds=sql.SQL(limit_holds),
        )
        .as_string(conn)
    )
    scan = sql.SQL(" SET hnsw.iterative_scan = strict_order" if iterative else "")
    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}(query vector, alpha float8, k int) "
            "RETURNS TABLE (id bigint, score float8) LANGUAGE plpgsql STABLE "
            "SET hnsw.ef_search = {ef}{scan} AS {body}"
        ).format(
            fn=sql.Identifier(name),
            ef=sql.Literal(min(int(ef_search), int(ef_cap))),
            scan=scan,
            body=sql.Literal(body),
        )
    )


def version_at_least(version: str, least: tuple[int, ...]) -> bool:
    """Whether an extension's version text (``"0.8.2"``) is at least ``least``."""
    parts = []
    for p in str(version).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= least


# -- schema -------------------------------------------------------------------------------------


def create_table(conn: Any, t: Any, table: str, *, dim: int, m: int, ef_construction: int) -> None:
    """The table with its HNSW index (unit vectors by inner product) and weight b-tree."""
    from psycopg import sql

    conn.execute(
        sql.SQL(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, embedding vector({d}) NOT NULL, "
            "norm real NOT NULL CHECK (norm > 0), weight real CHECK (weight > 0))"
        ).format(t=t, d=sql.Literal(dim))
    )
    conn.execute(
        sql.SQL(f"CREATE INDEX {{i}} ON {{t}} (({BASE}))").format(i=sql.Identifier(f"{table}_nr_weight"), t=t)
    )
    conn.execute(
        sql.SQL(
            "CREATE INDEX {i} ON {t} USING hnsw (embedding vector_ip_ops) WITH (m = {m}, ef_construction = {e})"
        ).format(i=sql.Identifier(f"{table}_nr_hnsw"), t=t, m=sql.Literal(m), e=sql.Literal(ef_construction))
    )


def check_columns(conn: Any, t: Any, table: str, dim: int) -> None:
    """The columns normrank reads, of the right types (other columns may sit beside them)."""
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
        (t.as_string(conn),),
    ).fetchall()
    have = dict(rows)
    want = {"id": "bigint", "embedding": f"vector({dim})", "norm": "real", "weight": "real"}
    emb = have.get("embedding", "")
    if emb.startswith("vector(") and emb != want["embedding"]:
        raise DimensionMismatchError(f"table {table!r} holds {emb}, not vector({dim})")
    wrong = [f"{c} {kind}" for c, kind in want.items() if have.get(c) != kind]
    if wrong:
        raise IndexStateError(
            f"table {table!r} lacks the columns normrank needs ({', '.join(wrong)}): "
            "see docs/postgres.md for the migration"
        )


_REGISTRY_COLUMNS = {"table_oid": "oid", "dim": "integer", "custom_weights": "boolean", "format": "integer"}


def check_registry(conn: Any, reg: Any) -> None:
    """The registry table ``reg`` (as the search path finds it) is normrank's: a user table of
    that name would otherwise fail later on an INSERT that names no cause."""
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
        (reg.as_string(conn),),
    ).fetchall()
    have = dict(rows)
    if rows and any(have.get(c) != kind for c, kind in _REGISTRY_COLUMNS.items()):
        name = reg.as_string(conn)
        raise IndexStateError(
            f"a table {name} exists but is not normrank's (columns {sorted(have.items())}): normrank "
            f"lists its tables in a table of that name; rename yours (ALTER TABLE {name} RENAME TO ...) "
            "or use another database or schema (search_path)"
        )


def check_rows(conn: Any, t: Any, table: str) -> None:
    """An adopted table's rows: norms set and positive, no weights, unit-length embeddings."""
    from psycopg import sql

    bad = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {} WHERE norm IS NULL OR NOT norm > 0 OR weight IS NOT NULL "
            "OR abs(vector_norm(embedding) - 1) > 1e-3"
        ).format(t)
    ).fetchone()[0]
    if bad:
        raise IndexStateError(
            f"{bad} rows of {table!r} have no positive norm, a weight, or an embedding that "
            "is not unit length: run the migration of docs/postgres.md first"
        )


def hnsw_indexes(conn: Any, t: Any) -> list[tuple[str, str]]:
    """``(name, CREATE INDEX statement)`` of each HNSW index on the table, from the catalog."""
    return conn.execute(
        "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = to_regclass(%s) AND a.amname = 'hnsw'",
        (t.as_string(conn),),
    ).fetchall()


# The trigger function (in the registry's schema, shared by every table) that raises a table's
# next_id past its largest id before a statement removes rows (DELETE, TRUNCATE, UPDATE of id).
_NEXT_ID_FN = "normrank_keep_next_id"


def next_id_tracking(conn: Any, t: Any, table: str, reg_schema: str, registry: str) -> None:
    """The registry's ``next_id`` column (added where an older registry lacks it: 0 for tables
    already registered, whose removed ids were not kept) and the statement-level trigger on
    ``t`` that, before a ``DELETE``, ``TRUNCATE`` or ``UPDATE OF id`` (by normrank or plain SQL),
    raises it past the largest id present, in the same transaction: so default ids, which start
    after both it and ``max(id)``, never reuse a removed id. One b-tree lookup a statement."""
    from psycopg import sql

    reg = sql.Identifier(reg_schema, registry)
    has_col = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'next_id' AND NOT attisdropped",
        (reg.as_string(conn),),
    ).fetchone()
    if not has_col:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN next_id bigint NOT NULL DEFAULT 0").format(reg))
    fn = sql.Identifier(reg_schema, _NEXT_ID_FN)
    if conn.execute("SELECT to_regprocedure(%s)", (fn.as_string(conn) + "()",)).fetchone()[0] is None:
        # One function for every table: the table comes in as TG_RELID (quoted by regclass).
        body = (
            "BEGIN EXECUTE format('UPDATE "
            + reg.as_string(conn).replace("'", "''")
            + " SET next_id = greatest(next_id, (SELECT coalesce(max(id) + 1, 0) FROM %s)) "
            "WHERE table_oid = %s', TG_RELID::regclass, TG_RELID); RETURN NULL; END"
        )
        conn.execute(
            sql.SQL("CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS {}").format(
                fn, sql.Literal(body)
            )
        )
    name = f"{table}_nr_next_id"  # at most 48 + 11 characters: within PostgreSQL's 63
    found = conn.execute(
        "SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s", (t.as_string(conn), name)
    ).fetchone()
    if not found:
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER {} BEFORE DELETE OR TRUNCATE OR UPDATE OF id ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(name), t, fn)
        )
