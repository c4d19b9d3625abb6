"""``archledger list``: a header, then the corpus grouped by family in release order, then size."""
from __future__ import annotations

from engine.cli import main


def _listed(capsys) -> tuple[str, list[list[str]]]:
    assert main(["list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    return header, [line.split() for line in lines]


def test_list_has_a_header_and_every_model_once(capsys, corpus):
    header, rows = _listed(capsys)
    assert header.split() == ["MODEL", "PARAMS", "TYPE", "FAMILY"]
    assert sorted(r[0] for r in rows) == sorted(corpus.models)


def test_list_orders_by_family_release_then_size(capsys, corpus):
    _, rows = _listed(capsys)
    order = [r[0] for r in rows]
    # corpus/lineage.yaml lists DeepSeek-V3, R1 (its continuation entry: after V3) and V3.2 in release
    # order, though V3.2 sorts first by name and R1 by size is V3's equal
    deepseek = [m for m in order if m.startswith("deepseek-ai/DeepSeek-V3") or m == "deepseek-ai/DeepSeek-R1"]
    assert deepseek == ["deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3.2"]
    # Llama 3.1 is not listed model by model: by size, 8B < 70B < 405B (the model cards' names)
    llama = [m for m in order if m.startswith("meta-llama/Meta-Llama-3.1-")]
    assert llama == ["meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-405B"]
    # a family's models are contiguous
    families = [corpus.models[m].family for m in order]
    seen = []
    for f in families:
        if not seen or seen[-1] != f:
            assert f not in seen, f"{f} split in the listing"
            seen.append(f)


def test_list_prints_params_with_si_prefixes(capsys):
    _, rows = _listed(capsys)
    by_id = {r[0]: r[1:3] for r in rows}
    # transformers' meta-device counts: 8,030,261,248 and 1,572,997,179,491 (tests/test_deepseek_v4.py)
    assert by_id["meta-llama/Meta-Llama-3.1-8B"] == ["8.03", "G"]
    assert by_id["deepseek-ai/DeepSeek-V4-Pro"] == ["1.57", "T"]


def test_list_columns_line_up_whatever_the_longest_entry(capsys):
    """Every row's TYPE starts at the header's TYPE and its FAMILY at the header's FAMILY, with at
    least one space before it (a model_type as long as deepseek_v32 once ran into FAMILY)."""
    assert main(["list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    type_at, family_at = header.index("TYPE"), header.index("FAMILY")
    for line in lines:
        assert line[type_at - 1] == " " and line[type_at] != " ", line
        assert line[family_at - 1] == " " and line[family_at] != " ", line
