"""The renderer's per-process memos of pure functions (site_builder.charts.contract_specs by the
contract's JSON text and VALIDATE; site_builder.pages' docs HTML by the Markdown text): a later site
rendered by the same process reads the same input and gets the same output, and any other input is
computed afresh.

Planted bugs these catch: a memo keyed by something less than the input (a changed variant name, or
a changed docs page, shown as before), one that skips Altair's checks because the unchecked spec
was kept, and one that hands two callers the same object (a change to one shows in the other).
"""
from __future__ import annotations

import copy

from site_builder import charts, pages

CONTRACT = {"lengths": [1024, 4096],
            "variants": [{"name": "mha", "kv_bytes_per_request": [1.0e6, 4.0e6], "prefill_s": [0.01, 0.05],
                          "decode_s": [0.001, 0.002]},
                         {"name": "gdn", "kv_bytes_per_request": [2.0e6, 2.0e6], "prefill_s": [0.02, 0.04],
                          "decode_s": [0.001, 0.001]}],
            "crossings": []}


def _names(specs: dict) -> set:
    return {row["variant"] for row in specs["datasets"][charts.CONTRACT_ROWS]}


def test_contract_specs_are_kept_by_content_and_handed_out_as_copies(monkeypatch):
    first = charts.contract_specs(CONTRACT)
    assert first == charts._contract_specs(copy.deepcopy(CONTRACT))        # consistency: the function itself
    second = charts.contract_specs(CONTRACT)
    assert second == first and second is not first
    first["kv"].clear()
    assert charts.contract_specs(CONTRACT)["kv"]                             # the kept one is not the handed one
    renamed = copy.deepcopy(CONTRACT)
    renamed["variants"][1]["name"] = "kda"
    assert _names(charts.contract_specs(renamed)) == {"mha", "kda"}
    monkeypatch.setattr(charts, "VALIDATE", True)
    before = charts._contract_specs_text.cache_info().misses
    assert charts.contract_specs(CONTRACT) == second                         # checked: built again, the same spec
    assert charts._contract_specs_text.cache_info().misses == before + 1


def test_a_changed_docs_page_renders_its_new_text(tmp_path):
    """Two renders of the methodology pages in one process: the second with one page's text changed
    shows the change, and the unchanged pages are the same HTML."""
    from site_builder.templating import environment
    from site_builder.writer import Site
    name = pages.DOCS[0][0]
    env = environment()

    def render(texts: dict) -> dict:
        site = Site(tmp_path / name_of(texts), env)
        pages._methodology(site, texts)
        return {p.relative_to(site.folder).as_posix(): p.read_text() for p in site.folder.rglob("index.html")}

    def name_of(texts: dict) -> str:
        return "b" if "planted" in texts[name] else "a"

    texts = {n: path.read_text() for n, path, _ in pages.DOCS}
    before = render(texts)
    after = render({**texts, name: texts[name] + "\n\nA planted closing line.\n"})
    page = f"methodology/{name}/index.html"
    assert "A planted closing line." in after[page] and "A planted closing line." not in before[page]
    assert {k: v for k, v in after.items() if k != page} == {k: v for k, v in before.items() if k != page}
