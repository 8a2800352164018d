"""Specific vs general answer pairs (issue 39): the pair builders on a tiny WordNet database and a
tiny manual, and the Table 5 statistics against closed forms and scipy."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from normrank.corpus.depthset import build_depthset
from normrank.corpus.specificity import (
    WordNetMissingError,
    document_order,
    manual_pairs,
    one_per,
    open_wordnet,
    sample_pairs,
    wordnet_pairs,
)
from normrank.errors import MissingDependencyError
from normrank.sweep.specificity import matched_mask, paired_z, sign_flip_p, specificity_table

# (key, lemmas, hypernym key, gloss): a tiny noun hierarchy in WordNet 3.0's database format
SYNSETS = [
    ("entity", ["entity"], None, "that which is perceived or known or inferred to have its own distinct existence"),
    ("animal", ["animal", "beast"], "entity", "a living organism characterized by voluntary movement"),
    ("dog", ["dog", "domestic_dog"], "animal", "a member of the genus Canis that has been domesticated by man"),
    ("cat", ["cat"], "animal", "feline mammal usually having thick soft fur; a cat is kept as a pet"),
    ("pup", ["pup"], "dog", "a young one"),  # under 5 words
    ("hound", ["hound", "hound_dog"], ("dog", "animal"), "any of several breeds of dog used for hunting typically having large drooping ears"),
]  # fmt: skip


def write_wordnet(folder: Path) -> None:
    """data.noun / index.noun in WordNet's database format (byte offsets as line keys), and the
    other files NLTK's reader opens on start-up, empty."""
    folder.mkdir()

    def line(key: str, offsets: dict[str, int]) -> str:
        _, lemmas, hyper, gloss = next(s for s in SYNSETS if s[0] == key)
        words = " ".join(f"{w} 0" for w in lemmas)
        hypers = (hyper,) if isinstance(hyper, str) else hyper or ()
        ptrs = " ".join([f"{len(hypers):03d}", *(f"@ {offsets[h]:08d} n 0000" for h in hypers)])
        return f"{offsets[key]:08d} 03 n {len(lemmas):02x} {words} {ptrs} | {gloss}  \n"

    offsets = {s[0]: 0 for s in SYNSETS}
    pos = 0
    for key, *_ in SYNSETS:  # offsets have a fixed width: lengths do not depend on them
        offsets[key] = pos
        pos += len(line(key, offsets).encode())
    (folder / "data.noun").write_text("".join(line(k, offsets) for k, *_ in SYNSETS))
    index = sorted((w.lower(), offsets[k]) for k, lemmas, *_ in SYNSETS for w in lemmas)
    (folder / "index.noun").write_text("".join(f"{w} n 1 0 1 0 {o:08d}  \n" for w, o in index))
    for name in (
        "index.verb",
        "index.adj",
        "index.adv",
        "data.adj",
        "noun.exc",
        "verb.exc",
        "adj.exc",
        "adv.exc",
    ):
        (folder / name).write_text("")


def test_wordnet_pairs_from_a_tiny_database(tmp_path):
    write_wordnet(tmp_path / "wn")
    pairs, counts = wordnet_pairs(tmp_path / "wn")
    gloss = {k: g for k, _, _, g in SYNSETS}
    # entity: no hypernym; cat: its gloss names it; pup: "a young one" is under 5 words; hound:
    # its own gloss says "dog", not "hound": kept, with the hypernym of the smaller offset (animal;
    # NLTK returns a synset's hypernyms in an order that changes from run to run)
    assert [(p.question, p.specific, p.general) for p in pairs] == [
        ("What is a animal?", gloss["animal"], gloss["entity"]),
        ("What is a dog?", gloss["dog"], gloss["animal"]),
        ("What is a hound?", gloss["hound"], gloss["animal"]),
    ]
    assert pairs[1].meta["synset"] == "dog.n.01" and pairs[1].meta["hypernym"] == "animal.n.01"
    assert counts == {"noun synsets": 6, "no hypernym": 1, "gloss under 5 words": 1,
                      "gloss names the lemma": 1, "same gloss": 0, "kept": 3}  # fmt: skip
    # one per hypernym: entity's one child, and one of animal's two (dog, hound)
    assert {p.meta["hypernym"] for p in one_per(pairs, "hypernym")} == {"entity.n.01", "animal.n.01"}
    assert len(one_per(pairs, "hypernym")) == 2


def test_wordnet_missing_says_which_package_to_install(tmp_path):
    with pytest.raises(WordNetMissingError, match="apt-get install wordnet-base") as e:
        open_wordnet(tmp_path / "nowhere")
    assert isinstance(e.value, MissingDependencyError)
    write_wordnet(tmp_path / "wn")
    (tmp_path / "wn" / "index.noun").unlink()
    with pytest.raises(WordNetMissingError, match=r"index\.noun"):
        wordnet_pairs(tmp_path / "wn")


@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").is_file(), reason="wordnet-base not installed")
def test_the_installed_wordnet_opens_with_its_lexicographer_names():
    wn = open_wordnet()
    dog = wn.synset("dog.n.01")
    assert dog.lexname() == "noun.animal"  # lexnames read from the package's man page
    assert {h.name() for h in dog.hypernyms()} == {"canine.n.02", "domestic_animal.n.01"}


MANUAL = """# Guide

Zebra paragraph: the guide starts with this general introduction to the tool.

Another guide paragraph that comes second in the document order here, and it is long.

## Install

Install the tool with the package manager of your system first.

### From source

Clone the repository and build it with the usual compiler tools.

## Use

Run the tool on a folder of files to get a report back quickly.
"""


def test_manual_pairs_take_the_first_paragraph_of_a_heading_and_of_its_child(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(MANUAL)
    build_depthset([tmp_path / "docs"], tmp_path / "set")
    order = document_order([tmp_path / "docs"])
    paras = [b for b in MANUAL.split("\n\n") if not b.startswith("#")]
    first, second = paras[0].strip(), paras[1].strip()
    assert order[first.casefold()] < order[second.casefold()]
    pairs, counts = manual_pairs(tmp_path / "set", order)
    got = {p.question: (p.specific, p.general) for p in pairs}
    assert got == {
        "Guide Install": (paras[2].strip(), first),
        "Guide Install From source": (paras[3].strip(), paras[2].strip()),
        "Guide Use": (paras[4].strip(), first),
    }
    assert counts["top level"] == 1 and counts["kept"] == 3
    # without the order, "first" falls back to the smallest paragraph id
    sha = {t: hashlib.sha1(t.casefold().encode()).hexdigest() for t in (first, second)}
    no_order = {p.question: p.general for p in manual_pairs(tmp_path / "set")[0]}
    assert no_order["Guide Use"] == min(sha, key=sha.get)
    # paragraphs over max_words are not used: the page's are 12 and 15 words, Install's 11
    assert [len(p.split()) for p in paras[:4]] == [12, 15, 11, 11]
    capped, c = manual_pairs(tmp_path / "set", order, max_words=11)
    assert [p.question for p in capped] == ["Guide Install From source"]
    assert c["parent has no usable paragraph"] == 2
    assert len(one_per(pairs, "parent_id")) == 2  # Install and Use share the page as parent


def test_sample_pairs_is_seeded_and_keeps_order():
    pairs = list(range(100))
    a, b = sample_pairs(pairs, 10, seed=3), sample_pairs(pairs, 10, seed=3)
    assert a == b == sorted(a) and len(set(a)) == 10
    assert sample_pairs(pairs, None) == pairs and sample_pairs(pairs, 500) == pairs


def test_paired_z_is_the_one_sample_t_statistic():
    from scipy.stats import ttest_1samp

    rng = np.random.default_rng(0)
    for n in (2, 7, 1000):
        d = rng.normal(0.3, 2.0, n)
        assert paired_z(d) == pytest.approx(ttest_1samp(d, 0).statistic, rel=1e-12)
    assert paired_z(np.zeros(5)) == 0.0 and paired_z(np.full(5, -1.0)) == -math.inf


def test_sign_flip_p_exact_against_closed_forms():
    # all equal: only the all-plus and all-minus flips reach |mean|: p = 2 / 2^n
    assert sign_flip_p(np.full(8, 0.5), permutations=10**6) == pytest.approx(2 / 256)
    # 1, 2, 3: sums over the 8 sign vectors are +-6, +-4, +-2, 0, 0; |sum| >= 6 in 2 of 8
    assert sign_flip_p(np.array([1.0, 2.0, 3.0]), permutations=10**6) == pytest.approx(0.25)
    assert sign_flip_p(np.array([1.0, -1.0]), permutations=10**6) == pytest.approx(1.0)


def test_sign_flip_p_by_sampling_matches_the_normal_limit():
    from scipy.stats import norm

    rng = np.random.default_rng(1)
    d = rng.normal(0.0, 1.0, 400)
    d += 0.08 - d.mean()  # |sum| / sqrt(sum of squares) about 1.6
    # under sign flips, sum(Δ) has mean 0 and variance sum(Δ²): the CLT gives p in closed form
    expected = 2 * norm.sf(abs(d.sum()) / np.sqrt((d**2).sum()))
    assert 0.05 < expected < 0.2
    assert sign_flip_p(d, permutations=40_000, seed=2) == pytest.approx(expected, abs=0.02)
    assert sign_flip_p(np.abs(d), permutations=999) == pytest.approx(1 / 1000)


def test_matched_mask_within_ten_percent_of_the_longer():
    a, b = np.array([100, 100, 100, 90, 10]), np.array([110, 112, 90, 100, 12])
    assert matched_mask(a, b).tolist() == [True, False, True, True, False]


def _vectors(norms: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    return dirs / np.linalg.norm(dirs, axis=1, keepdims=True) * norms[:, None]


def test_specificity_table_residual_removes_a_pure_length_law():
    rng = np.random.default_rng(4)
    n, dim = 300, 16
    len_s, len_g = rng.integers(5, 40, n).astype(float), rng.integers(20, 80, n).astype(float)
    law = lambda x: 3.0 * x**-0.2  # noqa: E731  the norm is length and nothing else
    q = rng.normal(size=(n, dim))
    s, g = (
        _vectors(law(len_s), q + 0.5 * rng.normal(size=(n, dim))),
        _vectors(law(len_g), rng.normal(size=(n, dim))),
    )
    t = specificity_table(q, s, g, len_s, len_g, permutations=999)
    delta = law(len_s) - law(len_g)
    assert t["all"]["z"] == pytest.approx(paired_z(delta))
    assert t["all"]["pct_norm_down"] == pytest.approx(100 * np.mean(delta < 0))
    assert t["all"]["z"] > 10  # the shorter specific answers have the larger norms
    assert t["fit"]["slope"] == pytest.approx(-0.2) and t["fit"]["r2"] == pytest.approx(1.0)
    assert t["residual"]["mean_delta"] == 0.0 and t["residual"]["z"] == 0.0  # nothing left
    assert t["residual"]["pct_norm_down"] == 0.0 and t["residual"]["p"] == 1.0
    cos_s = (q * s).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(s, axis=1)
    cos_g = (q * g).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(g, axis=1)
    assert t["all"]["pct_cos_down"] == pytest.approx(100 * np.mean(cos_s < cos_g))
    m = matched_mask(len_s, len_g)
    assert t["matched"]["n"] == int(m.sum()) and t["matched"]["z"] == pytest.approx(paired_z(delta[m]))


def test_specificity_table_residual_keeps_what_length_does_not_explain():
    rng = np.random.default_rng(5)
    n, dim = 400, 8
    len_s, len_g = rng.integers(5, 60, n).astype(float), rng.integers(5, 60, n).astype(float)
    ns = np.exp(1.0 - 0.3 * np.log(len_s) - 0.1 + 0.05 * rng.normal(size=n))  # specific: 10% smaller
    ng = np.exp(1.0 - 0.3 * np.log(len_g) + 0.05 * rng.normal(size=n))
    s, g = _vectors(ns, rng.normal(size=(n, dim))), _vectors(ng, rng.normal(size=(n, dim)))
    t = specificity_table(rng.normal(size=(n, dim)), s, g, len_s, len_g, permutations=999)
    # reference: least squares over both answers with numpy, residual gap in log units
    x, y = np.log(np.r_[len_s, len_g]), np.log(np.r_[ns, ng])
    coef, *_ = np.linalg.lstsq(np.c_[np.ones(2 * n), x], y, rcond=None)
    r = y - np.c_[np.ones(2 * n), x] @ coef
    assert t["residual"]["mean_delta"] == pytest.approx(float(np.mean(r[:n] - r[n:])))
    assert t["residual"]["z"] == pytest.approx(paired_z(r[:n] - r[n:]))
    assert t["residual"]["z"] < -10 and t["residual"]["p"] == pytest.approx(1 / 1000)
