"""Hostile identity and paths: model ids, snapshot names and symbolic links are refused on one line,
and whatever reaches a page's inline script cannot end it.

Model ids become folders of the site (``models/<org--name>/``) and snapshot names become paths
under ``corpus/snapshots/``; both follow the Hub's name grammar (engine.language.names.NAME_RULE). A link
under ``corpus/``, ``gpus/``, ``static/`` or ``docs/`` could read and publish any file of the
machine that builds, so links are refused there. Every corpus case runs the real CLI on a copy of
the corpus and checks: exit 2, one stderr line naming the file (and line and field when there is
one), nothing written, and nothing of the linked file in the output. The site cases render from a
small build made once for the module.
"""
from __future__ import annotations

import dataclasses
import json
import re
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from engine import api
from tests.bad_input_helpers import cli_status as main, copy_corpus, fresh_api_cache  # noqa: F401 (fixture)
from engine.language.corpus import load_corpus
from engine.language.names import slug
from engine.language.errors import SpecError, Where
from engine.verify.evidence import snapshot_name, source_path

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its build twice.
pytestmark = pytest.mark.xdist_group("bad_input_identity")

REPO = Path(__file__).resolve().parent.parent
QWEN = "models/Qwen--Qwen3-8B.yaml"
CANARY = "CANARY-4f1d9c"          # planted in every file a link points at; must never be printed or written


def secret(tmp_path: Path) -> Path:
    """A file outside the corpus, valid YAML whose every value is the canary."""
    path = tmp_path / "outside" / "secret.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"source: {CANARY}\nfields: {{model_type: {CANARY}}}\n")
    return path


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(root: Path, tmp_path: Path, capsys, place: str, says: str, hint: str) -> None:
    """`build` and `show` on ``root`` both exit 2 with one line `error: <place>: ...says... — ...hint...`,
    write nothing and print nothing of the canary."""
    out = tmp_path / "out"
    before = files_under(root)
    for argv in (["build", "--out", str(out), "--quiet"], ["show", "Qwen3-8B"]):
        code = main(["--corpus", str(root), *argv])
        captured = capsys.readouterr()
        assert code == 2, f"{argv[0]}: exit {code}, stderr {captured.err!r}"
        assert captured.out == "" and captured.err.count("\n") == 1, captured
        message = captured.err.rstrip("\n")
        assert message.startswith(f"error: {place}"), f"expected {place}, got {message!r}"
        problem, dash, fix = message.partition(" — ")
        assert says in problem and dash and hint in fix, message
        assert CANARY not in captured.err
    assert not out.exists() or not files_under(out), "a refused build wrote files"
    assert files_under(root) == before, "the corpus was modified"


def line_of(path: Path, needle: str) -> int:
    text = path.read_text()
    assert text.count(needle) == 1, needle
    return text[: text.index(needle)].count("\n") + 1


# -- model ids ----------------------------------------------------------------------------------------

BAD_IDS = {
    "dot-dot-replaces-the-gallery": "'..'",
    "script-in-id": "'evil/<!--<script>'",
    "path-traversal": "'Qwen/../../etc'",
    "absolute-path": "'/etc/passwd'",
    "no-org": "Qwen3-8B",
    "three-parts": "Qwen/Qwen3/8B",
    "double-dash-collides-with-the-slug": "Qwen/Qwen3--8B",
    "leading-dot": "Qwen/.Qwen3-8B",
    "leading-dash": "-Qwen/Qwen3-8B",
    "trailing-dot": "Qwen/Qwen3-8B.",
    "space": "'Qwen/Qwen3 8B'",
    "backslash": "'Qwen\\\\Qwen3-8B'",
    "non-ascii": "Qwen/Qwén3-8B",
    "too-long": "Qwen/" + "a" * 97,
    "newline-and-escape": '"Qwen/\\nQwen\\u001b[31m"',
}   # a value of the wrong kind (a number) is the schema's: tests/test_schema.py


@pytest.mark.parametrize("value", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_model_id_must_be_a_hub_id(value, tmp_path, capsys):
    root = copy_corpus(tmp_path)
    spec = root / QWEN
    spec.write_text(spec.read_text().replace("model: Qwen/Qwen3-8B\n", f"model: {value}\n", 1))
    place = f"corpus/{QWEN}:{line_of(spec, 'model: ')}: model: model id "
    refused(root, tmp_path, capsys, place, "is not a Hugging Face id `org/name`", "Qwen/Qwen3-8B")


def test_model_id_must_agree_with_its_file_name(tmp_path, capsys):
    root = copy_corpus(tmp_path)
    spec = root / QWEN
    spec.write_text(spec.read_text().replace("model: Qwen/Qwen3-8B\n", "model: Qwen/Qwen3-8B-Renamed\n", 1))
    refused(root, tmp_path, capsys, f"corpus/{QWEN}:1: model: ", "differs from its file name",
            "corpus/models/Qwen--Qwen3-8B-Renamed.yaml")


def test_slug_is_one_to_one_for_valid_ids(corpus):
    """Every id of the corpus is valid and its slug is its file name (what the loader enforces)."""
    for model_id, model in corpus.models.items():
        assert Path(model.where.file).stem == slug(model_id)
        assert slug(model_id).count("--") == 1


# -- snapshot names ---------------------------------------------------------------------------------

BAD_SNAPSHOTS = {
    "parent-folders": "../../../outside/secret",
    "absolute": "/etc/hostname",
    "dot-dot": "..",
    "folder-inside-snapshots": "sub/Qwen--Qwen3-8B",
    "three-parts": "a--b--c",
}   # a value of the wrong kind (a number, a list) is the schema's: tests/test_schema.py


@pytest.mark.parametrize("value", BAD_SNAPSHOTS.values(), ids=BAD_SNAPSHOTS.keys())
def test_snapshot_must_be_a_name_inside_the_snapshots_folder(value, tmp_path, capsys):
    root = copy_corpus(tmp_path)
    secret(tmp_path)                       # what ../../../outside/secret.yaml would read
    spec = root / QWEN
    spec.write_text(spec.read_text().replace("model: Qwen/Qwen3-8B\n", f"model: Qwen/Qwen3-8B\nsnapshot: {value}\n", 1))
    place = f"corpus/{QWEN}:{line_of(spec, 'snapshot: ')}: snapshot: snapshot "
    refused(root, tmp_path, capsys, place, "is not a snapshot name", "corpus/snapshots/")


def test_evidence_refuses_a_hand_made_snapshot_path(corpus):
    """engine.verify.evidence builds paths from the snapshot name: a ModelSpec not made by the loader is
    checked again there."""
    model = corpus.models["Qwen/Qwen3-8B"]
    assert snapshot_name(model) == "Qwen--Qwen3-8B"

    def forged(file: str):
        return dataclasses.replace(model, snapshot=dataclasses.replace(model.snapshot, where=Where(file)))

    # only the base name is used, so a path with folders cannot lead out of corpus/snapshots/
    name = snapshot_name(forged("corpus/snapshots/../../../etc/passwd.yaml"))
    assert name == "passwd"
    assert source_path(corpus.root, name).resolve().is_relative_to((corpus.root / "snapshots").resolve())
    for file in ("corpus/snapshots/...yaml", "corpus/snapshots/a b.yaml", "corpus/snapshots/.yaml"):
        with pytest.raises(SpecError, match="is not a snapshot name"):
            snapshot_name(forged(file))
    with pytest.raises(SpecError, match="is not a snapshot name"):
        source_path(corpus.root, "../../etc/passwd")


# -- symbolic links in corpus/ and gpus/ -----------------------------------------------------------------

def _environ() -> Path:
    return Path("/proc/self/environ")


@pytest.mark.parametrize("case", ["spec-file-to-outside", "snapshot-to-proc-environ", "folder-to-outside",
                                  "link-inside-the-corpus"])
def test_symlinks_under_the_corpus_are_refused(case, tmp_path, capsys):
    root = copy_corpus(tmp_path)
    outside = secret(tmp_path)
    if case == "spec-file-to-outside":
        target = tmp_path / "outside" / "Qwen--Qwen3-8B.yaml"
        shutil.copy(root / QWEN, target)
        (root / QWEN).unlink()
        (root / QWEN).symlink_to(target)
        link = QWEN
    elif case == "snapshot-to-proc-environ":
        link = "snapshots/zz-environ.yaml"
        (root / link).symlink_to(_environ() if _environ().exists() else outside)
    elif case == "folder-to-outside":
        shutil.rmtree(root / "components" / "drafts")
        (root / "components" / "drafts").symlink_to(outside.parent, target_is_directory=True)
        link = "components/drafts"
    else:            # a link whose target stays inside is refused too: the rule is "no links"
        link = "snapshots/alias.yaml"
        (root / link).symlink_to(root / "snapshots" / "Qwen--Qwen3-8B.yaml")
    refused(root, tmp_path, capsys, f"corpus/{link}: ", "is a symbolic link", "commit the file itself")


def test_symlinked_gpu_file_is_refused(tmp_path, monkeypatch, capsys):
    """A link in gpus/: refused by the loader, and by `deploy` run inside a checkout that has it."""
    from engine.deploy.hardware import load_gpus
    copy_corpus(tmp_path)                        # tmp_path is a checkout: corpus/models/ and gpus/
    gpus = tmp_path / "gpus"
    shutil.copytree(REPO / "gpus", gpus)
    (gpus / "zz.yaml").symlink_to(secret(tmp_path))
    with pytest.raises(SpecError) as err:
        load_gpus(gpus)
    assert err.value.one_line().startswith("gpus/zz.yaml: is a symbolic link") and CANARY not in str(err.value)
    monkeypatch.chdir(tmp_path)
    code = main(["deploy", "Qwen3-8B", "--gpu", "H100"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith("error: gpus/zz.yaml: is a symbolic link") and CANARY not in captured.err


# -- the site: a small build, links in static/ and docs/, what pages contain ---------------------------

TINY_GRID = {
    "doc": "One GPU type, one count, one point per list.",
    "gpus": ["H100"], "gpu_counts": [1], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024, 4096], "beyond_max_context": 2, "output_lengths": [64], "batches": [1, 8]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 1, "input": 1024, "output": 64}]},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """``build/results`` for Qwen3-8B over a one-GPU grid (the site cases render from copies)."""
    from engine.batch.results import build
    out = tmp_path_factory.mktemp("identity-build")
    grid = out / "grid.yaml"
    grid.write_text(yaml.safe_dump(TINY_GRID, sort_keys=False))
    build(load_corpus(), out, ["Qwen3-8B"], grid, jobs=1)
    assert (out / "results" / "models.parquet").exists()
    return out / "results"


@pytest.fixture
def fake_repo(tmp_path, monkeypatch):
    """The renderer pointed at a copy of static/ and docs/ under ``tmp_path/repo`` (never the real
    tree: other tests render the real one meanwhile)."""
    from site_builder import pages, sources
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "static", repo / "static")
    shutil.copytree(REPO / "docs", repo / "docs")
    shutil.copy(REPO / "CONTRIBUTING.md", repo / "CONTRIBUTING.md")
    monkeypatch.setattr(sources, "REPO", repo)
    monkeypatch.setattr(sources, "STATIC", repo / "static")
    monkeypatch.setattr(pages, "DOCS", [(name, repo / path.relative_to(REPO), title) for name, path, title in pages.DOCS])
    return repo


def render_refused(results: Path, tmp_path: Path, place: str) -> None:
    from site_builder.render import render_site
    out = tmp_path / "out"
    with pytest.raises(SpecError) as err:
        render_site(results, out)
    line = err.value.one_line()
    assert line.startswith(f"{place}: is a symbolic link") and "commit the file itself" in line, line
    assert "\n" not in line and CANARY not in line
    assert not (out / "site").exists(), "a refused render published a site"
    for path in out.rglob("*"):
        assert not path.is_symlink(), path
        assert not path.is_file() or CANARY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("target", ["proc-environ", "outside-file", "outside-folder"])
def test_symlink_in_static_is_refused(results, fake_repo, tmp_path, target):
    outside = secret(tmp_path)
    link = fake_repo / "static" / "js" / "env.js"
    if target == "proc-environ" and _environ().exists():
        link.symlink_to(_environ())
    elif target == "outside-folder":
        link = fake_repo / "static" / "extra"
        link.symlink_to(outside.parent, target_is_directory=True)
    else:
        link.symlink_to(outside)
    render_refused(results, tmp_path, link.relative_to(fake_repo).as_posix())


@pytest.mark.parametrize("which", ["a-doc-page", "the-docs-folder"])
def test_symlink_in_docs_is_refused(results, fake_repo, tmp_path, which):
    outside = secret(tmp_path)
    if which == "a-doc-page":
        (fake_repo / "docs" / "results.md").unlink()
        (fake_repo / "docs" / "results.md").symlink_to(outside)
        place = "docs/results.md"
    else:
        shutil.copytree(fake_repo / "docs", outside.parent / "docs")
        shutil.rmtree(fake_repo / "docs")
        (fake_repo / "docs").symlink_to(outside.parent / "docs", target_is_directory=True)
        place = "docs"
    render_refused(results, tmp_path, place)


def test_built_site_holds_no_link_and_nothing_from_outside(results, tmp_path):
    """Every path of a rendered site is a regular file or folder that resolves inside the site, and
    no file is the build machine's environment."""
    from site_builder.render import render_site
    site = render_site(results, tmp_path / "out")
    environ = _environ().read_bytes() if _environ().exists() else b""
    root = site.resolve()
    count = 0
    for path in site.rglob("*"):
        assert not path.is_symlink(), path
        assert path.is_file() or path.is_dir(), path
        assert path.resolve().is_relative_to(root), path
        if path.is_file():
            count += 1
            assert not environ or path.read_bytes() != environ, path
    assert count > 20 and (site / "index.html").is_file() and (site / "models" / "Qwen--Qwen3-8B" / "index.html").is_file()


# -- JSON in pages ----------------------------------------------------------------------------------

HOSTILE = ["evil/<!--<script>", "</script><script>alert(1)</script>", "</SCRIPT >", "a\u2028b\u2029c",
           "&amp; ' \" <b>", "<!-- unclosed"]


class _Scripts(HTMLParser):
    """Every <script> element of a page: its attributes and its text, as a browser tokenizes them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict, str]] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self._open = dict(attrs)
            self.scripts.append((self._open, ""))

    def handle_data(self, data):
        if self._open is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._open = None


def page_scripts(html: str) -> list[tuple[dict, str]]:
    parser = _Scripts()
    parser.feed(html)
    parser.close()
    return parser.scripts


def test_script_json_cannot_close_or_comment_out_a_script():
    from site_builder.templating import script_json
    data = {"ids": HOSTILE, HOSTILE[0]: HOSTILE[3]}
    text = script_json(data)
    for raw in "<>&'\u2028\u2029":
        assert raw not in text, raw
    assert "\\u003c!--\\u003cscript\\u003e" in text and "\\u2028" in text and "\\u2029" in text
    assert json.loads(text) == data                      # the same data to JSON.parse
    with pytest.raises(ValueError):
        script_json({"x": float("nan")})                 # not JSON: never written into a page


def test_page_data_with_hostile_strings_stays_one_script(tmp_path):
    """A page rendered through the real templates with hostile strings in its page data and in
    template text: the page-data script parses back to the same data, and no other script appears."""
    from site_builder.templating import environment
    from site_builder.writer import Site
    site = Site(tmp_path, environment())
    data = {"page": "doc", "slug": "evil--<!--<script>", "names": HOSTILE}
    site.page("x", "doc.html", HOSTILE[1], data, body="")
    html = (tmp_path / "x" / "index.html").read_text()
    scripts = page_scripts(html)
    names = [attrs.get("id") or re.sub(r"\.[0-9a-f]{8}\.js$", ".js", attrs.get("src", "").rsplit("/", 1)[-1])
             for attrs, _ in scripts]     # static files are published under content-hashed names
    assert names == ["page-data", "site.js"]
    assert json.loads(scripts[0][1]) == data
    assert "<!--" not in scripts[0][1] and "</" not in scripts[0][1]
    assert environment().from_string("{{ v|tojson }}").render(v=HOSTILE) == \
        '["evil/\\u003c!--\\u003cscript\\u003e", "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e", ' \
        '"\\u003c/SCRIPT \\u003e", "a\\u2028b\\u2029c", "\\u0026amp; \\u0027 \\" \\u003cb\\u003e", "\\u003c!-- unclosed"]'


def test_rendered_pages_keep_their_scripts_with_a_hostile_model_name(results, tmp_path):
    """The whole site rendered from results whose model document carries hostile text (the
    engine refuses such ids, but names, notes and docs are free text from specs): on every page the
    page-data block parses as JSON and the scripts are exactly the template's."""
    from site_builder.render import render_site
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    doc_path = copy / "models" / "Qwen--Qwen3-8B.json"
    doc = json.loads(doc_path.read_text())
    doc["name"], doc["notes"], doc["family"] = HOSTILE[0], HOSTILE[1], HOSTILE[3]
    doc_path.write_text(json.dumps(doc))
    site = render_site(copy, tmp_path / "out")
    pages = list(site.rglob("*.html"))
    assert len(pages) > 5
    for page in pages:
        html = page.read_text()
        scripts = page_scripts(html)
        data = [text for attrs, text in scripts if attrs.get("id") == "page-data"]
        assert len(data) == 1, page
        json.loads(data[0])
        assert all("src" in attrs and not text.strip() for attrs, text in scripts if attrs.get("id") != "page-data"), page
        assert HOSTILE[1] not in html, page
