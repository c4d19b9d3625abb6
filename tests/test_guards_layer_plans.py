"""The schedule guard reads nested config sections and the newer per-layer fields, and its
registry entries are typed (corpus/verification.yaml ``kind``: per_layer, layer_set, scalar).

Each test edits one model's recorded config in a copy of the corpus: a plan that agrees with the
spec passes, one that disagrees is an error naming the field and the layers, and a value of a
kind the registry does not expect there says what it expected (never "fix the registry entry").
The layer numbers in the expectations are derived here from the published layer plans (Qwen3.5-27B:
full attention every 4th layer; DeepSeek-V3: 3 dense layers, then MoE). That the real corpus still
validates after a registry change is tests/test_guards.py::test_every_corpus_model_validates_clean.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from engine.verify.evidence import registry
from engine.verify.validate import validate
from tests.conftest import REPO

QWEN35 = ("Qwen/Qwen3.5-27B", "Qwen--Qwen3.5-27B")
DSV3 = ("deepseek-ai/DeepSeek-V3", "deepseek-ai--DeepSeek-V3")
LLAMA = ("meta-llama/Meta-Llama-3.1-8B", "meta-llama--Meta-Llama-3.1-8B")
MINIMAX = ("MiniMaxAI/MiniMax-M2.7", "MiniMaxAI--MiniMax-M2.7")


def _schedule(tmp_path: Path, model: tuple[str, str], registry_edit: tuple[str, str] | None = None, **fields) -> list:
    """The schedule guard's errors for ``model`` with its recorded config fields changed (and one
    text of corpus/verification.yaml replaced)."""
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    if registry_edit:
        text = (root / "verification.yaml").read_text()
        assert text.count(registry_edit[0]) == 1
        (root / "verification.yaml").write_text(text.replace(*registry_edit))
    path = root / "snapshots" / f"{model[1]}.yaml"
    data = yaml.safe_load(path.read_text())
    for key, value in fields.items():
        if value is None:
            data["fields"].pop(key)
        else:
            data["fields"][key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    corpus = load_corpus(root)
    report = validate(corpus, corpus.models[model[0]])
    return [f for f in report.errors if f.guard == "schedule"]


def _qwen35_full_layers() -> list[int]:
    return [i for i in range(64) if i % 4 == 3]   # Qwen3.5-27B: full_attention_interval 4


def test_a_nested_section_is_read_and_its_layers_numbered_from_one(tmp_path):
    full = [i + 1 for i in _qwen35_full_layers()]            # KimiLinearConfig: 1-indexed
    kda = [i + 1 for i in range(64) if i + 1 not in full]
    assert _schedule(tmp_path / "ok", QWEN35, linear_attn_config={"kda_layers": kda, "full_attn_layers": full}) == []
    wrong = [i - 1 for i in full]                             # the same layers numbered from 0: off by one
    found = _schedule(tmp_path / "bad", QWEN35, linear_attn_config={"kda_layers": kda, "full_attn_layers": wrong})
    assert len(found) == 1
    assert found[0].message.startswith("config.linear_attn_config.full_attn_layers = ")
    assert "makes 16 of 64 layers attention (history-cache); the spec's schedule makes 16" in found[0].message
    assert "(layers 2, 3, 6, 7, 10, 11, 14, 15 and 24 more differ)" in found[0].message


def test_a_per_layer_mapping_list_is_read_through_its_sub_fields(tmp_path):
    blocks = [{"attention": {"no_op": False, "replace_with_linear": False}, "ffn": {"no_op": False}} for _ in range(32)]
    assert _schedule(tmp_path / "ok", LLAMA, block_configs=blocks) == []
    blocks[5]["attention"]["no_op"] = True      # the NAS checkpoint drops layer 5's attention; the spec keeps it
    found = _schedule(tmp_path / "bad", LLAMA, block_configs=blocks)
    assert [f.message.split(" = ")[0] for f in found] == ["config.block_configs"]
    assert "makes 31 of 32 layers attention (history-cache); the spec's schedule makes 32 (layers 5 differ)" in found[0].message


def test_attn_type_list_marks_the_lightning_layers(tmp_path):
    plan = [1] * 62
    plan[7] = 0                                 # MiniMax-Text-01's habit: a lightning (linear) layer
    found = _schedule(tmp_path, MINIMAX, attn_type_list=plan)
    messages = [f.message for f in found]
    assert len(messages) == 2
    assert any("makes 61 of 62 layers attention (history-cache); the spec's schedule makes 62 (layers 7 differ)" in m
               for m in messages)
    assert any("makes 1 of 62 layers linear-attention (recurrent-state); the spec's schedule makes 0 (layers 7 differ)"
               in m for m in messages)



def test_a_per_layer_list_of_another_length_is_one_error(tmp_path):
    """attn_type_list's attention entry (``whole: true``) names every layer: 60 entries for
    MiniMax-M2.7's 62 layers is an error saying both counts (mutant layer-plan-shorter-passes: only a
    longer list was caught, and a shorter one read its missing layers as "no entry")."""
    found = _schedule(tmp_path, MINIMAX, attn_type_list=[1] * 60)
    messages = [f.message for f in found]
    # the field's other entry (its lightning layers, `entry == 0`) is not evaluated past the list's
    # end: no second error blaming the registry for the config's short list
    assert messages == ["config.attn_type_list has 60 entries but the spec's main stack has 62 layers"], messages
    assert found[0].hint == "repeat the layers once per entry of config.attn_type_list"


def test_a_per_layer_number_the_registry_does_not_know_is_named(tmp_path):
    """attn_type_list holds 0 (lightning) or 1 (softmax attention); a 2 is a value whose meaning the
    registry does not know, named as such, not read as "not 1" (mutant
    layer-plan-unknown-values-pass: only unknown names were reported, numbers passed)."""
    plan = [1] * 62
    plan[7] = 2
    found = _schedule(tmp_path, MINIMAX, attn_type_list=plan)
    assert len(found) >= 1
    assert all("config.attn_type_list holds [2], whose meaning the verification registry does not know" in f.message
               for f in found), [f.message for f in found]

def test_layers_block_type_is_nemotron_3s_plan(tmp_path):
    model = ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    pattern = yaml.safe_load((REPO / "corpus" / "snapshots" / f"{model[1]}.yaml").read_text())["fields"]["hybrid_override_pattern"]
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}   # NemotronHConfig's legacy names
    plan = [names[c] for c in pattern]
    assert _schedule(tmp_path / "ok", model, layers_block_type=plan) == []
    first_moe = plan.index("moe")
    plan[first_moe] = "mlp"
    found = _schedule(tmp_path / "bad", model, layers_block_type=plan)
    assert len(found) == 1 and found[0].message.startswith("config.layers_block_type = ")
    assert f"(layers {first_moe} differ)" in found[0].message


def test_one_field_two_kinds_each_entry_applies_to_its_own(tmp_path):
    """moe_layer_freq: a number for DeepSeek-V3 (every layer after the first 3), a 0/1 list for
    MiMo-V2-Flash. The same list shape on DeepSeek-V3 is checked layer by layer too."""
    flags = [0, 0, 0] + [1] * 58
    assert _schedule(tmp_path / "ok", DSV3, moe_layer_freq=flags) == []
    flags[10] = 0
    found = _schedule(tmp_path / "bad", DSV3, moe_layer_freq=flags)
    assert [f.message.split(" = ")[0] for f in found] == ["config.moe_layer_freq"]
    assert "makes 57 of 61 layers MoE; the spec's schedule makes 58 (layers 10 differ)" in found[0].message


def test_a_value_of_a_kind_the_registry_does_not_expect_says_what_it_expected(tmp_path):
    found = _schedule(tmp_path, DSV3, num_hash_layers=[0, 1, 2])   # a number in DeepSeek-V4's configs
    assert len(found) == 1
    text = found[0].one_line()
    assert "config.num_hash_layers is a list of 3 entries; corpus/verification.yaml reads it as scalar" in text
    assert "kind: per_layer" in text and "registry entry" not in text


def test_an_expression_using_a_list_as_a_number_names_the_field(tmp_path):
    """The issue's case: an entry reading moe_layer_freq as a number, untyped (no `reads:`), meets
    a per-layer list there. The error names the field and what it holds, not the registry."""
    flags = [0, 0, 0] + [1] * 58
    found = _schedule(tmp_path, DSV3, ("    reads: {moe_layer_freq: scalar}\n", ""), moe_layer_freq=flags)
    messages = [f.one_line() for f in found]
    assert len(messages) == 1, messages
    assert "uses config.moe_layer_freq as one value, but this config holds a list of 61 entries there" in messages[0]
    assert "kind: per_layer" in messages[0] and "fix the registry entry" not in messages[0]


def test_a_registry_entry_without_a_known_kind_is_one_line(tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    path = root / "verification.yaml"
    text = path.read_text()
    assert text.count("    kind: layer_set\n") >= 1
    path.write_text(text.replace("    kind: layer_set\n", "    kind: list\n", 1))
    with pytest.raises(SpecError) as info:
        registry(root)
    assert "unknown kind 'list'" in info.value.one_line() and "per_layer" in info.value.one_line()
