"""No text from a corpus file runs as script on the site (issue 35, item 1).

Specs, components, GPU files, lineage, variants, contracts, fusion tables, collectives, dims, slots,
roles, quant schemes, the grid, snapshot evidence and the docs pages arrive in strangers' pull
requests. The fixture copies the corpus and gpus/, plants a payload in every free-text field of
every file kind (:data:`FREE_TEXT`: an ``<img onerror>``, an attribute breaker ``"><svg onload>``, a
``'><script>`` and a ``javascript:`` URL; the docs pages get raw HTML and every ``javascript:`` /
``data:`` link form Markdown has), builds two small models with it, and visits every page type in
Chromium with no Content-Security-Policy (``archledger serve`` and other hosts send none), the
playground's live picks included (the KDA pick draws the diff whose "as in <model name>" line was
written with ``innerHTML``). Each page must show the payload as text (so the field reached it) and
hold no element, attribute or URL the payload would add; ``window.__pwned`` must stay unset.

Names that become files, URLs or symbols have a grammar (ids: letters, digits, ``-_.``): where it
refuses the payload, the refusal is asserted instead (:data:`NAMES`); a name the grammar accepts
today is planted like free text, so either way it never reaches a page as markup. A last test
keeps the mechanism in place: no HTML sink in static/js but site.js ``archSVG`` (the one parser of
markup, for the build's drawings), no ``|safe`` in templates/ but the reviewed ones.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from engine.language.errors import SpecError
from site_builder.sources import REPO
from tests.site_helpers import served
from tests.test_site_browser import _open, moved_on

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its planted site twice.
pytestmark = pytest.mark.xdist_group("site_xss")

BASE, SLUG = "Qwen/Qwen3-8B", "Qwen--Qwen3-8B"
#: The second model: its gated DeltaNet is drawn on the components pages, so the GQA -> GDN diff page
#: exists and the playground's GDN pick loads its drawing from there.
OTHER, OTHER_SLUG = "Qwen/Qwen3.5-27B", "Qwen--Qwen3.5-27B"
VARIANT = "Qwen3-32B-GDN"           # rebased on BASE so that it is built with it
#: What a page shows where a planted field reached it (as text, never as an element).
MARK = '<img src=x onerror="window.__pwned=1">'
PAYLOAD = (MARK + '"><svg onload="window.__pwned=2"></svg>' + "'><script>window.__pwned=3</script>"
           + " javascript:window.__pwned=4")
#: Fields holding prose or a citation, per file kind (every YAML file under corpus/ and gpus/): the
#: payload is appended to each string under these keys, at any depth. ``src`` in a spec or a
#: component is a quote of the modeling code, checked against the snapshot's excerpts by the source
#: guard: the planted quotes are added to the models' excerpts too (a pull request can change both).
FREE_TEXT = {"name", "family", "notes", "note", "doc", "description", "label", "src", "sources", "vendor", "link",
             "lineage", "version", "arch"}
#: A measured kernel table's provenance text (gpus/measured/: benchmarks/import_kernels.py).
MEASURED_TEXT = {"licence_src", "device", "selection"}
#: The models' snapshot evidence: where it says it was read from.
SNAPSHOT_TEXT = {"source", "file", "tool"}
#: The docs pages: raw HTML and every link form Markdown has for a script URL.
DOC_PAYLOAD = f"""

## Planted {MARK}

{PAYLOAD} <script>window.__pwned=5</script> <iframe src="javascript:window.__pwned=6"></iframe>

[a](javascript:window.__pwned=7) [b](JaVaScRiPt:window.__pwned=8) [c]( javascript:window.__pwned=9)
<javascript:window.__pwned=10> [d](data:text/html,%3Cscript%3Ewindow.__pwned=11%3C/script%3E)
[e](&#106;avascript:window.__pwned=12) [f][ref] ![g](x" onerror="window.__pwned=13) [h](vbscript:msgbox)

[ref]: javascript:window.__pwned=14
"""
#: Names with a grammar, as label -> the edits that rename one consistently (file, text, planted
#: text): each is refused when loaded, or, if the grammar accepts it today, kept in the planted
#: corpus like free text.
NAMES = {
    "model id": [(f"corpus/models/{SLUG}.yaml", f"model: {BASE}", f"model: 'Qwen/{MARK}'")],
    "model_type": [(f"corpus/models/{SLUG}.yaml", "model_type: qwen3", f"model_type: '{MARK}'")],
    "variant id": [(f"corpus/variants/{VARIANT}.yaml", f"variant: {VARIANT}", f"variant: '{MARK}'")],
    "GPU name": [("gpus/b200.yaml", "gpu: B200", f"gpu: '{MARK}'")],
    "component name": [("corpus/components/library/kda_attention.yaml", "component: kda_attention",
                        f"component: '{MARK}'")],
    "quant scheme": [("corpus/quant/bf16.yaml", "scheme: bf16", f"scheme: '{MARK}'")],
    "contract id": [("corpus/contracts/attention/gqa.yaml", "model: contract/gqa", f"model: 'contract/{MARK}'")],
    # the block's last node (nothing names it in an ``in:``), its checkpoint module kept
    "graph node name": [("corpus/components/library/gqa_attention.yaml", "\n  o_proj:\n    op: linear\n",
                         f"\n  'o_proj {MARK}':\n    module: o_proj\n    op: linear\n")],
    "layer template name": [(f"corpus/models/{SLUG}.yaml", "\n  block:\n", f"\n  '{MARK}':\n"),
                            (f"corpus/models/{SLUG}.yaml", "template: block", f"template: '{MARK}'"),
                            (f"corpus/variants/{VARIANT}.yaml", "  templates:\n  - block\n", f"  templates:\n  - '{MARK}'\n")],
}
GRID = {"doc": f"One GPU, one point. {PAYLOAD}", "gpus": ["B200"], "gpu_counts": [1], "beyond_fit": 1,
        "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
        "frameworks": ["sglang"], "kv_dtypes": ["bf16"],
        "scenarios": {"input_lengths": [4096], "beyond_max_context": 2, "output_lengths": [1024], "batches": [1, 8]},
        "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 1, "input": 4096, "output": 1024}]},
        "sizing": {"scenarios": [{"input": 4096, "output": 1024}], "gpus": ["B200"], "frameworks": ["sglang"],
                   "kv_dtypes": ["bf16"], "max_gpus": 1}}


#: The test's own YAML reading and writing (libyaml's where installed: a third of the fixture's time)
_LOADER, _DUMPER = getattr(yaml, "CSafeLoader", yaml.SafeLoader), getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _plant(value, key=None, planted=None):
    """``value`` with the payload appended to every string under a :data:`FREE_TEXT` key;
    ``planted`` collects the new ``src`` quotes."""
    if isinstance(value, dict):        # an op's attrs name checkpoint leaves (attrs.name: dt_bias): ids
        return {k: v if k == "attrs" else _plant(v, k, planted) for k, v in value.items()}
    if isinstance(value, list):
        return [_plant(v, key, planted) for v in value]
    if isinstance(value, str) and key in FREE_TEXT:
        if key == "src" and planted is not None:
            planted.append(value + " " + PAYLOAD)
        return value + " " + PAYLOAD
    return value


def _load(root: Path) -> None:
    """Every loader a build runs (corpus, GPUs, fusion tables, contracts): SpecError on a refusal."""
    from engine.batch.contract import load_contract
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import load_gpus
    from engine.language.corpus import load_corpus
    corpus = load_corpus(root / "corpus")
    gpus = load_gpus(root / "gpus")
    load_tables(corpus.root / "fusion")
    for folder in sorted(p for p in (corpus.root / "contracts").iterdir() if p.is_dir()):
        load_contract(folder, corpus, gpus)


def plant_corpus(root: Path) -> dict[str, str]:
    """Copies of corpus/ and gpus/ under ``root`` with the payload in every free-text field and in
    every name :data:`NAMES` the grammar accepts. Returns label -> one-line refusal of the others."""
    def other(folder, names):            # two models are built: the others, their evidence and variants stay out
        keep = {"models": {f"{SLUG}.yaml", f"{OTHER_SLUG}.yaml"}, "variants": {f"{VARIANT}.yaml"}}.get(Path(folder).name)
        if Path(folder).name == "snapshots":
            return [n for n in names if not n.startswith((f"{SLUG}.", f"{OTHER_SLUG}.")) and "--" in n]
        return [n for n in names if keep and n not in keep]
    shutil.copytree(REPO / "corpus", root / "corpus", ignore=other)
    shutil.copytree(REPO / "gpus", root / "gpus")
    (root / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    quotes: list[str] = []
    for path in sorted([*(root / "corpus").rglob("*.yaml"), *(root / "gpus").rglob("*.yaml")]):
        rel = path.relative_to(root).as_posix()
        data = yaml.load(path.read_text(), Loader=_LOADER)
        if rel.startswith("corpus/snapshots/"):
            data = {k: (v + " " + PAYLOAD if k in SNAPSHOT_TEXT and isinstance(v, str) else v) for k, v in data.items()}
            if isinstance(data.get("provenance"), dict):
                data["provenance"] = {k: (v + " " + PAYLOAD if k in SNAPSHOT_TEXT else v)
                                      for k, v in data["provenance"].items()}
        elif rel.startswith("gpus/measured/"):      # measured kernel tables: names with a grammar (axes,
            # kernel, variant), numbers, and where they were read (free text)
            data["source"] = {k: (v + " " + PAYLOAD if k in MEASURED_TEXT else v) for k, v in data["source"].items()}
        elif rel == "corpus/roles.yaml":             # role -> what it is
            data = {k: v + " " + PAYLOAD for k, v in data.items()}
        elif rel == "corpus/lineage.yaml":           # a lab of the two models' (planted) families
            data["lineages"].append({"lineage": f"Lab {PAYLOAD}", "families": [f"Qwen3 {PAYLOAD}", f"Qwen3.5 {PAYLOAD}"]})
        else:
            data = _plant(data, planted=quotes)
        if rel == f"corpus/variants/{VARIANT}.yaml":
            data["base"] = BASE
        path.write_text(yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True))
    for slug in (SLUG, OTHER_SLUG):               # the planted quotes, "in the code"
        source = root / "corpus" / "snapshots" / f"{slug}.source.yaml"
        data = yaml.load(source.read_text(), Loader=_LOADER)
        data["excerpts"]["Planted.forward"] = "\n".join(quotes) + "\n"
        source.write_text(yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True))
    _load(root)                                       # free text is free: the planted corpus loads
    refused = {}
    for label, edits in NAMES.items():
        before = {rel: (root / rel).read_text() for rel, _, _ in edits}
        for rel, text, planted in edits:
            now = (root / rel).read_text()
            assert now.count(text) == 1, (label, rel, text)
            (root / rel).write_text(now.replace(text, planted))
        try:
            _load(root)
        except SpecError as err:
            refused[label] = err.one_line()
            for rel, text in before.items():
                (root / rel).write_text(text)
    return refused


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The planted corpus, its refusals, and one small build of it (results and site), its docs
    pages from planted copies."""
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder import pages, render, sources
    root = tmp_path_factory.mktemp("xss")
    refused = plant_corpus(root)
    repo = root / "repo"                      # the renderer's checkout: static/ as it is, docs planted
    shutil.copytree(sources.STATIC, repo / "static")
    docs = []
    for name, path, title in pages.DOCS:
        copy = repo / path.relative_to(REPO)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text() + DOC_PAYLOAD)
        docs.append((name, copy, title))
    grid = root / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sources, "REPO", repo)
        mp.setattr(sources, "STATIC", repo / "static")
        mp.setattr(pages, "DOCS", docs)
        report = build(load_corpus(root / "corpus"), root / "out", [BASE, OTHER], grid, gpu_root=root / "gpus", jobs=1,
                       site=render.render_staged)
    assert sorted(report.recomputed) == [BASE, OTHER] and not report.skipped, report.skipped     # published, payload and all
    return root, refused


@pytest.fixture(scope="module")
def base(planted):
    yield from served(planted[0] / "out" / "site")


def test_names_with_a_grammar_refuse_the_payload(planted):
    """Ids become file names, URLs and symbols: the loader refuses markup in them with one line
    naming the file (a name the grammar accepts is planted in the site instead, and checked there)."""
    refused = planted[1]
    for label in ("model id", "variant id", "GPU name", "component name", "quant scheme"):
        assert label in refused, f"{label}: the grammar accepted {MARK!r}"
    for label, line in refused.items():
        assert line.startswith(tuple(rel + ":" for rel, _, _ in NAMES[label])) and "\n" not in line, (label, line)


def test_every_built_page_escapes_the_payload(planted):
    """The HTML as written: no page holds the payload's markup raw (the browser test below checks
    what scripts add after load)."""
    site = planted[0] / "out" / "site"
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 15
    for page in pages:
        text = page.read_text()
        for raw in ("<img src=x", "<svg onload", "<script>window", "<iframe", 'href="javascript:', "href='javascript:"):
            assert raw not in text, (page.relative_to(site), raw)


#: In the page: what the payload would have added, and the proof that it reached the page as text.
PROBE = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (/^on/i.test(a.name)) bad.push(el.tagName + ' ' + a.name);
      if (/^(href|src|action|formaction|xlink:href|data)$/i.test(a.name) && /^\\s*(javascript|vbscript|data):/i.test(a.value))
        bad.push(el.tagName + ' ' + a.name + '=' + a.value);
    }
  }
  for (const el of document.querySelectorAll('img[src="x"], iframe, object, embed')) bad.push(el.outerHTML.slice(0, 80));
  for (const s of document.scripts) if (s.type !== 'application/json' && s.textContent.includes('__pwned')) bad.push('script');
  return {pwned: window.__pwned === undefined ? null : String(window.__pwned), bad: bad,
          shown: document.documentElement.textContent.includes('<img src=x onerror=')};
}"""


def _check(tab, where: str, shown: bool = True) -> None:
    probe = tab.page.evaluate(PROBE)
    assert probe["pwned"] is None, f"{where}: the payload ran ({probe['pwned']})"
    assert not probe["bad"], f"{where}: injected {probe['bad'][:5]}"
    assert not tab.dialogs, (where, tab.dialogs)
    if shown:
        assert probe["shown"], f"{where}: no planted text on the page (did the field stop reaching it?)"


def _open_details(tab) -> None:
    """Open every <details> (a model page's drawings load into them when opened) and let them load."""
    tab.page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    tab.settle()


def _bare(browser):  # noqa: F811
    """A tab (tests/test_site_browser.py ``_open``: errors recorded, requests off 127.0.0.1 aborted)
    whose responses carry no Content-Security-Policy, whatever the server sends: the pages must be
    safe on a host that adds none."""
    from urllib.parse import urlsplit

    from site_builder.screenshots import LOCAL_HOSTS
    tab = _open(browser, production=False)

    def route(r):                      # registered last, so it answers before _open's
        if urlsplit(r.request.url).hostname not in LOCAL_HOSTS:
            tab.blocked.append(r.request.url)
            return r.abort()
        try:
            response = r.fetch()
            return r.fulfill(response=response, headers={k: v for k, v in response.headers.items()
                                                         if not k.lower().startswith("content-security-policy")})
        except Exception as exc:
            if moved_on(exc):          # a chart drawn late, its page gone
                return None
            # any other failure (a fetch past Playwright's 30 s, seen once in a clean clone's run) fails
            # the page's request and is recorded on this tab, whose test asserts it has no errors:
            # raised here, it surfaced in whichever test made the worker's next browser call
            # (tests/test_suite_eleventh_pass.py's fixture, four errors far from their cause)
            tab.errors.append(f"the route's fetch of {r.request.url} failed: {exc}")
            try:
                r.abort()
            except Exception as failed:
                if not moved_on(failed):
                    tab.errors.append(f"and its abort failed: {failed}")
            return None
    tab.context.route("**/*", route)
    return tab


def _chart_tooltip_shows_the_payload(page) -> None:
    """Hover the components chart's marks until Vega's tooltip (HTML it builds from the data:
    vega-embed escapes it) shows a contract variant's planted name."""
    tooltip = "() => { const e = document.getElementById('vg-tooltip-element');" \
              " return e && e.classList.contains('visible') ? e.textContent : ''; }"
    marks = page.locator(".chart svg path")
    for i in range(min(marks.count(), 200)):
        try:
            marks.nth(i).hover(timeout=500, force=True)
        except Exception:         # a mark drawn off the visible chart area
            continue
        if MARK in page.evaluate(tooltip):
            return
    pytest.fail("no chart tooltip showed a planted variant name")


def test_no_page_runs_the_payload(browser, base):  # noqa: F811
    """Every page type, no CSP: the payload is text on each and never an element, handler or URL."""
    pages = ["", "landscape/", f"compare/?a={SLUG}&b={OTHER_SLUG}", "components/", "components/gqa_attention/",
             "components/diff/gqa_attention--gated_deltanet/", f"models/{OTHER_SLUG}/",
             f"models/{SLUG}/", f"models/{SLUG}/deploy/", f"models/{SLUG}/sizing/",
             f"models/{SLUG}/sizing/?scenario=1/2&fw=nope&ttft=abc&gpu=X#%E0%A4%A", f"playground/?v={VARIANT}",
             "methodology/", "methodology/results/", "methodology/security/", "downloads/"]
    tab = _bare(browser)
    try:
        for path in pages:
            tab.goto(base + path)
            tab.scroll_through()          # every chart drawn (charts are drawn once in view)
            if path.endswith("/deploy/"):
                tab.page.wait_for_function("() => document.getElementById('summary').hasAttribute('data-ready')")
            if path.startswith("compare/"):
                tab.page.wait_for_selector("#compare table")
            _open_details(tab)
            for num in tab.page.locator(".num").all()[:3]:        # formula tooltips
                num.hover()
            if path == "components/":
                _chart_tooltip_shows_the_payload(tab.page)
            _check(tab, path or "gallery", shown=path not in ("methodology/",))
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


def test_playground_live_picks_do_not_run_the_payload(browser, base, planted):  # noqa: F811
    """Every component the playground offers for each slot of the planted model: the pick's form,
    dims' sources and drawings (KDA's diff is drawn from data/playground/diffs.json.gz under an
    "as in <the model's name>" line, which carried the payload into innerHTML; GDN's is fetched
    from its components diff page)."""
    tab = _bare(browser)
    try:
        tab.goto(base + "playground/")
        page = tab.page
        page.select_option("#pick-model", BASE)
        slots = page.eval_on_selector_all("#pick-slot option", "os => os.map(o => o.value)")
        assert "attention" in slots
        picked = 0
        for slot in slots:
            page.select_option("#pick-slot", slot)
            for comp in page.eval_on_selector_all("#pick-component option", "os => os.map(o => o.value)"):
                page.select_option("#pick-component", comp)
                page.wait_for_function("() => document.getElementById('pick-status').textContent !== ''"
                                       " || document.querySelector('#pick-table tbody tr')")
                tab.settle()
                if slot == "attention" and comp == "kda_attention":
                    page.wait_for_selector("#pick-graph .graph-wrap svg")
                    line = page.inner_text("#pick-graph p")
                    assert f"as in Qwen3 8B {PAYLOAD} (new: walked there)" in line, line   # the name, as text
                    assert page.locator("#pick-graph .status-only_b").count() >= 1
                if slot == "attention" and comp == "gated_deltanet":   # drawn on the components pages: fetched
                    page.wait_for_selector("#pick-graph .graph-wrap svg")
                    href = page.get_attribute("#pick-graph p a", "href")
                    assert href.endswith("components/diff/gqa_attention--gated_deltanet/"), href
                    label = page.eval_on_selector("#pick-graph .graph-wrap svg", "s => s.textContent")
                    assert "graph node name" in planted[1] or MARK in label     # the planted node, as text
                _check(tab, f"pick {slot}={comp}", shown=False)
                picked += 1
        assert picked >= 5
        _check(tab, "playground picks")
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


#: A drawing as hostile as markup gets: every way an SVG can run script or navigate to it.
HOSTILE_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=20"><script>window.__pwned=21</script>'
               '<g class="node" onmouseover="window.__pwned=22"><a href="java\tscript:window.__pwned=23"><text>x</text></a>'
               '<a href="#c-kept"><text>kept</text></a><a xlink:href="data:text/html,x" href="sub/"><text>y</text></a></g>'
               '<foreignObject><iframe src="javascript:window.__pwned=24"></iframe></foreignObject>'
               '<image href="x" onerror="window.__pwned=25"/><use href="data:image/svg+xml,x"/>'
               '<animate attributeName="href" to="javascript:window.__pwned=26"/>'
               '<set attributeName="onmouseover" to="window.__pwned=27"/></svg>')


def test_drawings_are_adopted_without_anything_that_runs(browser, base):  # noqa: F811
    """The one function that turns markup into page nodes (site.js ``archSVG``: the model pages'
    lazily loaded drawings, the playground's diffs) drops whatever could run even if the build's
    escaping failed; the drawing's own text and in-page and relative links stay."""
    tab = _bare(browser)
    try:
        tab.goto(base + f"models/{SLUG}/")
        kept = tab.page.evaluate("""svg => { const node = window.archSVG(svg);
            document.querySelector('main').appendChild(node);
            return {links: Array.from(node.querySelectorAll('a')).map(a => a.getAttribute('href')), text: node.textContent}; }""",
                                 HOSTILE_SVG)
        tab.settle()
        tab.page.hover("main svg:last-of-type g.node", force=True)
        _check(tab, "a hostile drawing", shown=False)
        assert kept == {"links": [None, "#c-kept", "sub/"], "text": "xkepty"}, kept
        assert tab.page.evaluate("window.archSVG('<p>no drawing</p>')") is None
    finally:
        tab.context.close()


#: Where a script could turn text into markup or code. Pages write text with textContent and
#: createElement; the one parser of markup is site.js ``archSVG`` (above).
SINKS = re.compile(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write|createContextualFragment|DOMParser"
                   r"|\bsrcdoc\b|\beval\(|new Function|set(Timeout|Interval)\(\s*[\"']|setAttribute\(\s*[\"']on")
#: Template output that autoescape does not touch, each with where its text is made safe.
RAW = {("component.html", "svg"): "site_builder/graph_svg.py escapes every label",
       ("model.html", "level.svg"): "site_builder/graph_svg.py",
       ("playground.html", "d.svg"): "site_builder/graph_svg.py",
       ("doc.html", "body"): "markdown-it with raw HTML off (site_builder/pages.py _methodology)",
       ("base.html", "page_json"): "site_builder/templating.py script_json"}


def test_scripts_and_templates_write_text_not_markup():
    """A new HTML sink in static/js, or a new ``|safe`` in templates/, fails here until it is
    reviewed (and the browser tests above plant text through it)."""
    hits = [f"{p.name}:{n}: {line.strip()}" for p in sorted((REPO / "static" / "js").glob("*.js"))
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if SINKS.search(line) and not line.lstrip().startswith("//")]
    assert len(hits) == 1 and hits[0].startswith("site.js:") and "new DOMParser().parseFromString(text, " in hits[0], hits
    raw = {(p.name, m.group(1)) for p in (REPO / "templates").glob("*.html")
           for m in re.finditer(r"{{\s*([\w.]+)\s*\|\s*safe\s*}}", p.read_text())}
    assert raw == set(RAW), raw ^ set(RAW)
    from site_builder.templating import environment
    assert environment().autoescape is True
    assert not any("Markup(" in line and "script_json" not in line
                   for p in (REPO / "site_builder").glob("*.py") for line in p.read_text().splitlines()), \
        "markupsafe.Markup outside the script_json filter"
