"""The load-time schema (engine.language.schema, engine.language.file_schemas): every file kind a pull request
can touch gives one line — file:line: field: what was found — what to write — for a value of the
wrong kind or a figure outside its physical range, and writes nothing.

Each case copies the real corpus/ and gpus/ into a temporary checkout, breaks one file with a text
edit, and runs the real CLI there (``archledger check``: every input read as a build reads it; a few
cases also ``show``/``deploy``). The expected line is found in the broken file, never hard-coded.
Before this schema, each case ended in a traceback (TypeError, KeyError, AttributeError) or, for
the plausibility cases, in absurd published figures.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.language import file_schemas, schema
from engine.language.errors import SpecError
from engine.language.yamlio import LineDict, LineList
from tests.bad_input_helpers import cli_status as main, fresh_api_cache, parse_each_yaml_once  # noqa: F401 (fixtures)
from tests.conftest import REPO
from tests.file_helpers import linked_copy, rewrite

QWEN = "corpus/models/Qwen--Qwen3-8B.yaml"
OSS = "corpus/models/openai--gpt-oss-20b.yaml"
DSA = "corpus/variants/DeepSeek-V3-DSA.yaml"
VLLM = "corpus/fusion/vllm.yaml"
H100 = "gpus/h100-sxm.yaml"
NCCL = "gpus/collectives/nccl.yaml"
CONTRACT = "corpus/contracts/attention/contract.yaml"
LINEAGE = "corpus/lineage.yaml"
QWEN_BLOCK = ("    component: prenorm_block\n    slots:\n"
              "      attention: {component: gqa_attention, with: {qk_norm: true, rope_theta: rope_theta}}\n"
              "      ffn: swiglu_mlp\n")


@dataclass(frozen=True)
class Case:
    """Replace ``old`` by ``new`` once in ``file``; the error must be at the line holding ``line_of``
    (default: the first line of ``new``), name ``field`` and say ``says``; ``commands``: the CLI
    commands that must each refuse it."""

    file: str
    old: str
    new: str
    field: str
    says: str
    line_of: str | None = None
    commands: tuple[tuple[str, ...], ...] = (("check",),)


SHOW = (("check",), ("show", "Qwen3-8B"))
KINDS = {   # item 4: a value of the wrong kind, in every file kind
    # -- spec sections: a list or a scalar where a mapping belongs ------------------------------------
    "inputs-a-list": Case(QWEN, "inputs: {tokens: [batch, seq]}", "inputs: [tokens]", "stacks.main.inputs",
                          "expected a mapping, got a list", commands=SHOW),
    "inputs-a-scalar": Case(QWEN, "inputs: {tokens: [batch, seq]}", "inputs: 5", "stacks.main.inputs",
                            "expected a mapping, got 5"),
    "input-axes-a-scalar": Case(QWEN, "inputs: {tokens: [batch, seq]}", "inputs: {tokens: 5}",
                                "stacks.main.inputs.tokens", "expected a list, got 5"),
    "quant-context-a-list": Case(QWEN, "quant_context: {default: bf16}", "quant_context: [bf16]", "quant_context",
                                 "expected a mapping, got a list", commands=SHOW),
    "quant-context-a-scalar": Case(QWEN, "quant_context: {default: bf16}", "quant_context: bf16", "quant_context",
                                   "expected a mapping, got the string 'bf16'"),
    "quant-default-a-list": Case(QWEN, "quant_context: {default: bf16}", "quant_context: {default: [bf16]}",
                                 "quant_context.default", "expected text, got a list"),
    "quant-overrides-a-list": Case(OSS, "overrides: {experts: mxfp4}", "overrides: [experts]",
                                   "quant_context.overrides", "expected a mapping, got a list"),
    "quant-override-a-list": Case(OSS, "overrides: {experts: mxfp4}", "overrides: {experts: [mxfp4]}",
                                  "quant_context.overrides.experts", "expected text, got a list"),
    "slots-a-scalar": Case(QWEN, "templates:\n", "slots: 7\ntemplates:\n", "slots", "expected a mapping, got 7"),
    "slots-a-list": Case(QWEN, "templates:\n", "slots: [ffn]\ntemplates:\n", "slots", "expected a mapping, got a list"),
    "templates-a-list": Case(QWEN, "templates:\n  block:\n" + QWEN_BLOCK, "templates: [block]\n", "templates",
                             "expected a mapping, got a list"),
    "templates-a-scalar": Case(QWEN, "templates:\n  block:\n" + QWEN_BLOCK, "templates: block\n", "templates",
                               "expected a mapping, got the string 'block'"),
    "slot-bindings-a-list": Case(QWEN, QWEN_BLOCK, "    component: prenorm_block\n    slots: [attention, ffn]\n",
                                 "templates.block.slots", "expected a mapping, got a list", line_of="slots: ["),
    "slot-binding-a-list": Case(QWEN, "ffn: swiglu_mlp", "ffn: [swiglu_mlp]", "templates.block.slots.ffn",
                                "expected text or a mapping, got a list", commands=SHOW),
    "slot-binding-options-a-list": Case(QWEN, "with: {qk_norm: true, rope_theta: rope_theta}", "with: [qk_norm]",
                                        "templates.block.slots.attention.with", "expected a mapping, got a list"),
    "family-a-list": Case(QWEN, "family: Qwen3", "family: [Qwen3]", "family", "expected text, got a list",
                          commands=SHOW),
    "family-a-number": Case(QWEN, "family: Qwen3", "family: 3", "family", "expected text, got 3"),
    "name-a-mapping": Case(QWEN, "name: Qwen3 8B", "name: {a: 1}", "name", "expected text, got a mapping"),
    "model-id-a-number": Case(QWEN, "model: Qwen/Qwen3-8B", "model: 12", "model", "expected text, got 12"),
    "snapshot-a-list": Case(QWEN, "model: Qwen/Qwen3-8B\n", "model: Qwen/Qwen3-8B\nsnapshot: [a, b]\n", "snapshot",
                            "expected text, got a list", line_of="snapshot: "),
    # -- graph nodes (the schedule's map was a ValueError, a repeat count a list reached the walk) --------
    "schedule-map-a-list": Case(OSS, "map: {sliding_attention: sliding, full_attention: full}}", "map: [sliding]}",
                                "stacks.main.graph.layers.schedule.map", "expected a mapping, got a list",
                                line_of="schedule: {by:", commands=(("check",), ("show", "gpt-oss-20b"))),
    "repeat-count-a-list": Case(QWEN, "repeat: n_layers,", "repeat: [n_layers],", "stacks.main.graph.layers.repeat",
                                "expected a number or an expression, got a list", commands=SHOW),
    "streams-a-list": Case(QWEN, 'streams: {hidden: {carries: true, src: "hidden_states = decoder_layer("}}',
                           "streams: [hidden]", "stacks.main.graph.layers.streams", "expected a mapping, got a list",
                           line_of="layers: {repeat"),
    "node-module-a-list": Case(QWEN, "module: model.norm}", "module: [model.norm]}", "stacks.main.graph.norm.module",
                               "expected text, got a list", line_of="norm: {op"),
    # -- sizes that would depend on the scenario ------------------------------------------------------
    "dim-depends-on-seq": Case(QWEN, "d_ff: config.intermediate_size", "d_ff: 4 * seq", "dims.d_ff",
                               "depends on the scenario (seq)", commands=SHOW),
    "fill-dim-depends-on-batch": Case(QWEN, "ffn: swiglu_mlp", "ffn: {component: swiglu_mlp, dims: {d_ff: batch}}",
                                      "templates.block.slots.ffn.dims.d_ff", "depends on the scenario (batch)",
                                      commands=SHOW),
    "max-context-depends-on-ctx": Case(QWEN, "max_context: config.max_position_embeddings", "max_context: 2 * ctx",
                                       "max_context", "depends on the scenario (ctx)"),
    "component-dim-depends-on-seq": Case("corpus/components/library/swiglu_mlp.yaml", "graph:",
                                         "dims: {d_twice: 2 * seq}\ngraph:", "dims.d_twice",
                                         "depends on the scenario (seq)", line_of="dims: {d_twice"),
    # -- variants ---------------------------------------------------------------------------------------
    "variant-options-a-list": Case(DSA, "with: {rope_theta: rope_theta, rope_scaling: rope_scaling}",
                                   "with: [rope_theta]", "swaps[0].with", "expected a mapping, got a list"),
    "variant-bind-a-list": Case(DSA, "n_index_heads: {value: 64,", "n_index_heads: {value: [64],",
                                "bind.n_index_heads.value", "expected a number or an expression, got a list"),
    "variant-bind-depends-on-seq": Case(DSA, "n_index_heads: {value: 64,", "n_index_heads: {value: seq,",
                                        "bind.n_index_heads.value", "depends on the scenario (seq)"),
    "variant-bind-a-scalar": Case(DSA, "n_index_heads: {value: 64, src: \"deepseek-ai/DeepSeek-V3.2 config.json "
                                  "index_n_heads\"}", "n_index_heads: 64", "bind.n_index_heads",
                                  "expected a mapping, got 64"),
    "variant-templates-a-mapping": Case(DSA, "templates: [dense, moe]", "templates: {dense: 1}", "swaps[0].templates",
                                        "expected text or a list, got a mapping"),
    # -- slots, fusion, GPUs, collectives, contracts, lineage -----------------------------------------
    "slot-roles-nested": Case("corpus/slots.yaml", "attention: {roles: [attention]", "attention: {roles: [[attention]]",
                              "attention.roles[0]", "expected text, got a list"),
    "reserve-name-a-list": Case(VLLM, "  - name: non_torch", "  - name: [non_torch]", "runtime_reserve[0].name",
                                "expected text, got a list"),
    "reserve-condition-a-scalar": Case(VLLM, "    when: {min_replica_gpus: 2}", "    when: 2", "runtime_reserve[1].when",
                                       "expected a mapping, got 2"),
    "reserve-entry-a-scalar": Case(VLLM, "  - name: non_torch", "  - 5\n  - name: non_torch", "runtime_reserve[0]",
                                   "expected a mapping, got 5"),
    "fusion-chain-nested": Case(VLLM, "chain: [add, rmsnorm]", "chain: [[add], rmsnorm]", "rules[3].chain[0]",
                                "expected text, got a list"),
    "fusion-siblings-op-a-list": Case(VLLM, "siblings: {op: linear, names: [q_proj, k_proj, v_proj]}",
                                      "siblings: {op: [linear], names: [q_proj, k_proj, v_proj]}",
                                      "rules[0].siblings.op", "expected text, got a list"),
    "gpu-link-class-a-list": Case(H100, "hw: nvlink}", "hw: [nvlink]}", "scale_up.hw", "expected text, got a list",
                                  commands=(("check",), ("deploy", "Qwen3-8B", "--gpu", "H200"))),
    "gpu-link-class-a-mapping": Case(H100, "hw: net}", "hw: {net: 1}}", "scale_out.hw",
                                     "expected text, got a mapping"),
    "collective-link-class-a-list": Case(NCCL, "  pci: {ring: 1.0, tree: 1.0}", "  pci: [1.0, 1.0]", "hop_us.pci",
                                         "expected a mapping, got a list"),
    "contract-unknown-gpu": Case(CONTRACT, "gpu: H100", "gpu: H999", "gpu", "unknown GPU 'H999'"),
    "contract-gpu-a-list": Case(CONTRACT, "gpu: H100", "gpu: [H100]", "gpu", "expected text, got a list"),
    "contract-batch-a-word": Case(CONTRACT, "batch: 1", "batch: one", "batch",
                                  "expected a whole number, got the string 'one'"),
    "contract-lengths-a-scalar": Case(CONTRACT, "lengths: [1024, 4096, 16384, 65536, 131072, 262144, 1048576]",
                                      "lengths: 4096", "lengths", "expected a list, got 4096"),
    # a build stops on it before any work (it was read per model, in the workers, with a bare safe_load)
    "lineage-family-nested": Case(LINEAGE, "families: [Mixtral]", "families: [[Mixtral]]",
                                  "lineages[1].families[0]", "expected text or a mapping, got a list",
                                  commands=(("check",), ("build", "--out", "out", "--models", "Qwen3-8B", "--quiet",
                                                         "--no-site"))),
    "lineage-name-a-list": Case(LINEAGE, "  - lineage: Meta", "  - lineage: [Meta]", "lineages[0].lineage",
                                "expected text, got a list"),
    "lineage-family-two-names": Case(LINEAGE, "      - Qwen3.5\n", "      - {Qwen3.5: [], Qwen3.6: []}\n",
                                     "lineages[2].families[1]", "a family is one `Name: [org/model, ...]`, got 2",
                                     line_of="{Qwen3.5"),
    # -- evidence files ---------------------------------------------------------------------------------
    "verification-plan-a-scalar": Case("corpus/verification.yaml", "  - field: layer_types\n    feature: window",
                                       "  - 5\n  - field: layer_types\n    feature: window", "layer_plans[0]",
                                       "expected a mapping, got 5", line_of="  - 5"),
    "verification-feature-a-list": Case("corpus/verification.yaml", "    feature: window", "    feature: [window]",
                                        "layer_plans[0].feature", "expected text, got a list"),
    "tensor-line-a-list": Case("corpus/snapshots/Qwen--Qwen3-8B.tensors.yaml", "- lm_head.weight BF16 [151936, 4096]",
                               "- [lm_head.weight, BF16]", "tensors[0]", "expected text, got a list"),
    "tensor-total-a-word": Case("corpus/snapshots/Qwen--Qwen3-8B.tensors.yaml", "total_bytes: 16381470720",
                                "total_bytes: many", "total_bytes", "expected a whole number, got the string 'many'"),
    "source-excerpts-a-list": Case("corpus/snapshots/Qwen--Qwen3-8B.source.yaml", "excerpts:\n",
                                   "excerpts: [a]\nold_excerpts:\n", "excerpts", "expected a mapping, got a list"),
}

RANGES = {   # item 6: each GPU, link, collective and contract figure within a physical range
    "hbm-bandwidth-tiny": Case(H100, "hbm_tb_s: 3.35", "hbm_tb_s: 1.0e-300", "hbm_tb_s",
                               "1e-300 TB/s is outside the plausible range (above 0.1 and at most 100 TB/s)"),
    # an overflowing driver total is blamed on the GPU file, also where a command reads it
    "hbm-mib-overflowing": Case(H100, "hbm_mib: {value: 81559", "hbm_mib: {value: 1.0e+38", "hbm_mib.value",
                                "1e+38 MiB is outside the plausible range",
                                commands=(("check",), ("deploy", "Qwen3-8B", "--gpu", "H100"))),
    "hbm-capacity-huge": Case(H100, "hbm_gb: 80 ", "hbm_gb: 80000 ", "hbm_gb", "80,000 GB is outside"),
    "peak-huge": Case(H100, "peak_tflops: {bf16: 989, fp8: 1979}", "peak_tflops: {bf16: 989, fp8: 1.0e+9}",
                      "peak_tflops.fp8", "1,000,000,000 TFLOP/s is outside"),
    "peak-alt-tiny": Case(H100, "peak_tflops: {bf16: 989, fp8: 1979}",
                          "peak_tflops: {bf16: {value: 989, alt: 0.001}, fp8: 1979}", "peak_tflops.bf16.alt",
                          "0.001 TFLOP/s is outside"),
    "scale-up-link-huge": Case(H100, "gb_s: 900,", "gb_s: 1.0e+12,", "scale_up.gb_s", "1,000,000,000,000 GB/s is outside"),
    "scale-out-link-tiny": Case(H100, "gb_s: 50, hw: net}", "gb_s: 0.001, hw: net}", "scale_out.gb_s",
                                "0.001 GB/s is outside"),
    "price-huge": Case(H100, "usd_per_hour: 3.99,", "usd_per_hour: 1000000,", "price.usd_per_hour",
                       "1,000,000 USD/h is outside"),
    "collective-base-latency-huge": Case(NCCL, "base_us: {ring: 6.6,", "base_us: {ring: 1.0e+30,", "base_us.ring",
                                         "1e+30 µs is outside the plausible range (above 0 and at most 10,000 µs)"),
    "collective-hop-latency-zero": Case(NCCL, "  pci: {ring: 1.0, tree: 1.0}", "  pci: {ring: 0, tree: 1.0}",
                                        "hop_us.pci.ring", "0 µs is outside"),
    "contract-batch-2-to-the-100": Case(CONTRACT, "batch: 1", f"batch: {2 ** 100}", "batch",
                                        f"{2 ** 100:,} is outside the plausible range (1 to 1,048,576)"),
    "contract-length-huge": Case(CONTRACT, "lengths: [1024,", f"lengths: [{2 ** 40},", "lengths[0]",
                                 f"{2 ** 40:,} tokens is outside"),
    "reserve-huge": Case(VLLM, "    gib: 0.42", "    gib: 100000", "runtime_reserve[1].gib", "100,000 GiB is outside"),
    "fusion-token-limit-huge": Case(VLLM, "max_tokens: 32}", f"max_tokens: {2 ** 40}}}", "rules[4].when.max_tokens",
                                    "is outside the plausible range"),
}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A pristine copy of corpus/ and gpus/ (each case links its files into its own checkout,
    :func:`tests.file_helpers.linked_copy`, and replaces the one it breaks: the repo is never
    touched, and a case that wrote a file in place fails its own no-file-changed check)."""
    root = tmp_path_factory.mktemp("pristine")
    shutil.copytree(REPO / "corpus", root / "corpus")
    (root / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    shutil.copytree(REPO / "gpus", root / "gpus")
    return root


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def broken_checkout(checkout: Path, tmp_path: Path, case: Case) -> tuple[Path, str]:
    """A copy of the checkout with ``case`` applied; returns it and the expected ``file:line: field: ``."""
    root = linked_copy(checkout, tmp_path / "repo")
    path = root / case.file
    text = path.read_text()
    assert text.count(case.old) >= 1, f"{case.old!r} is not in {case.file}: the case needs updating"
    text = text.replace(case.old, case.new, 1)
    rewrite(path, text)
    needle = case.line_of or case.new.lstrip("\n").splitlines()[0]
    line = text[: text.index(needle)].count("\n") + 1
    shown = case.file.removeprefix("gpus/") if case.file.startswith("gpus/collectives") else case.file
    return root, f"{shown}:{line}: {case.field}: "


@pytest.mark.parametrize("case", [*KINDS.values(), *RANGES.values()], ids=[*KINDS, *RANGES])
def test_a_bad_value_is_one_line_at_its_file_line_and_field(case, checkout, tmp_path, monkeypatch, capsys):
    root, prefix = broken_checkout(checkout, tmp_path, case)
    monkeypatch.chdir(root)
    before = files_under(root)
    for argv in case.commands:
        assert main(list(argv)) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "", f"{argv}: printed {captured.out[:200]!r}"
        assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err[:500]
        message = captured.err.rstrip("\n")
        assert message.startswith("error: ") and message.endswith(message.rstrip()), message
        assert prefix in message, f"{argv}: expected {prefix!r} in {message!r}"
        problem, dash, hint = message.partition(" — ")
        assert case.says in problem, f"{argv}: {case.says!r} not in {problem!r}"
        assert dash and hint.strip(), f"{argv}: no hint in {message!r}"
    assert files_under(root) == before, "a refused command wrote or changed a file"


def test_the_repo_loads_and_check_says_so(capsys, monkeypatch):
    """Consistency: the real corpus and GPU table pass their schemas (every real figure is in range)."""
    monkeypatch.chdir(REPO)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: ") and out.count("\n") == 1


def test_the_unknown_gpu_hint_lists_the_known_ones(checkout, tmp_path, monkeypatch, capsys):
    root, _ = broken_checkout(checkout, tmp_path, KINDS["contract-unknown-gpu"])
    monkeypatch.chdir(root)
    assert main(["check"]) == 2
    assert "H100" in capsys.readouterr().err.partition(" — ")[2]


# -- the ranges admit every real GPU (an external table, not the engine's files) ---------------------------

def _reference_rows() -> list[dict[str, list[float]]]:
    """tests/reference/gpus.md's table: per GPU, every number of each column (ranges give two)."""
    text = (REPO / "tests" / "reference" / "gpus.md").read_text()
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and "TFLOPS" not in line]
    out = []
    for cells in rows:
        def numbers(cell: str) -> list[float]:
            return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", cell)]
        link = cells[7]
        link_gb_s = [n * (1000 if "TB/s" in link else 1) for n in numbers(re.sub(r"NVLink\d|\d+-GPU", "", link))
                     if "GB/s" in link or "TB/s" in link]
        out.append({"gpu": cells[0].strip(), "peak": numbers(cells[2]) + numbers(cells[3]) + numbers(cells[4]),
                    "hbm_gb": numbers(cells[5]), "hbm_tb_s": numbers(cells[6]), "link_gb_s": link_gb_s})
    return out


def _within(node, value) -> bool:
    try:
        schema.check(node, value, "x")
    except SpecError:
        return False
    return True


def test_every_gpu_of_the_reference_table_is_within_the_ranges():
    rows = _reference_rows()
    assert len(rows) >= 10 and any(r["gpu"] == "Rubin" for r in rows)
    checked = 0
    for row in rows:
        for key, node in (("peak", file_schemas.PEAK), ("hbm_gb", file_schemas.HBM_GB),
                          ("hbm_tb_s", file_schemas.HBM_TB_S), ("link_gb_s", file_schemas.LINK_GB_S)):
            for value in row[key]:
                assert _within(node, value), f"{row['gpu']}: {key} {value} is refused by the schema"
                checked += 1
    assert checked >= 40
    # and the typos the ranges are for are refused: three orders of magnitude off either way
    for node, real in ((file_schemas.PEAK, 989), (file_schemas.HBM_TB_S, 3.35), (file_schemas.LINK_GB_S, 900)):
        assert not _within(node, real * 1e6) and not _within(node, real / 1e4)


def test_the_schema_bounds_agree_with_the_engine_bounds():
    """Consistency: the schemas sit below engine.deploy and restate its bounds; they must not drift."""
    from engine.deploy import MAX_BATCH, MAX_TOKENS
    assert (file_schemas.MAX_BATCH, file_schemas.MAX_TOKENS) == (MAX_BATCH, MAX_TOKENS)


# -- the mechanism ------------------------------------------------------------------------------------------

def _yaml_dict(pairs: dict, line: int, key_lines: dict) -> LineDict:
    out = LineDict(pairs)
    out.line, out.key_lines = line, key_lines
    return out


def _error(node, value) -> str:
    with pytest.raises(SpecError) as err:
        schema.check(node, value, "f.yaml")
    return err.value.one_line()


def test_a_boolean_is_never_a_number():
    assert "got the boolean true" in _error(schema.Number("n"), True)
    assert "got the boolean false" in _error(schema.Int("n"), False)
    assert _within(schema.Number("n"), 1.5) and not _within(schema.Int("n"), 1.5)


def test_range_ends():
    above = schema.Number("x", lo=0, hi=10, above=True)
    closed = schema.Number("x", lo=0, hi=10)
    assert not _within(above, 0) and _within(above, 1e-9) and _within(above, 10) and not _within(above, 10.0001)
    assert _within(closed, 0) and not _within(closed, -1e-9)


def test_errors_point_at_the_line_of_the_key_or_item():
    items = LineList(["a", 5])
    items.line, items.item_lines = 7, (7, 8)   # a block list: its first item on the list's line
    data = _yaml_dict({"name": "x", "list": items}, 1, {"name": 2, "list": 6})
    node = schema.Mapping("top", fields={"name": schema.Str("n"), "list": schema.ListOf("names", item=schema.Str())})
    assert _error(node, data).startswith("f.yaml:8: list[1]: expected text, got 5 — names")
    bad = _yaml_dict({"name": ["x"]}, 1, {"name": 3})
    assert _error(node, bad).startswith("f.yaml:3: name: expected text, got a list — n")


def test_unknown_and_missing_fields():
    node = schema.Mapping("m", fields={"a": schema.req(schema.Str("the a")), "b": schema.Str()})
    assert "c: unknown field 'c' — allowed: a, b" in _error(node, {"a": "x", "c": 1})
    assert "missing field 'a' — add `a:` (the a)" in _error(node, {"b": "x"})
    assert _within(schema.Mapping("m", fields={"a": schema.Str()}, rest=schema.Anything()), {"c": [1]})


def test_a_recursive_fill_is_checked_at_every_depth():
    fill = {"component": "x", "slots": {"s": {"component": "y", "slots": {"t": ["not", "a", "fill"]}}}}
    assert "slots.s.slots.t: expected text or a mapping, got a list" in _error(file_schemas.FILL, fill)
    assert _within(file_schemas.FILL, {"component": "x", "slots": {"s": {"component": "y", "slots": {"t": "z"}}}})


def test_a_size_may_name_dims_and_config_but_not_the_scenario():
    assert _within(file_schemas.SIZE, "config.hidden_size // n_heads")
    assert _within(file_schemas.SIZE, 4096) and _within(file_schemas.SIZE, "$latent_dim")
    for text in ("seq", "batch * 2", "min(ctx, 4096)", "length"):
        assert "depends on the scenario" in _error(file_schemas.SIZE, text), text
    assert _within(file_schemas.SIZE, "seq +")   # syntax is the evaluator's to report, with its hint


def test_every_message_is_one_line_even_for_hostile_keys():
    node = schema.Mapping("m", fields={"a": schema.Str()})
    message = _error(node, {"x\ny": 1})
    assert "\n" not in message and "unknown field 'x\\ny'" in message


# -- docs pages (the other text a pull request can touch) ---------------------------------------------

def test_a_doc_page_that_is_not_utf8_is_one_line(tmp_path, monkeypatch):
    from site_builder import sources
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    page = repo / "docs" / "results.md"
    page.write_bytes(b"# Results\n\nok\n\xff\xfe broken\n")   # the bad byte: offset 14, line 4
    monkeypatch.setattr(sources, "REPO", repo)
    with pytest.raises(SpecError) as err:
        sources._repo_text(page)
    assert err.value.one_line() == ("docs/results.md:4: not UTF-8 text (byte 0xff at offset 14) — "
                                    "save the file as UTF-8")


# -- item 3: corpus/lineage.yaml goes through the bounded loader ----------------------------------------

LINEAGE_BYTES = {   # what each gave before (a bare yaml.safe_load): a traceback, or a 20 MB file accepted
    "not-utf8": (b"lineages:\n  - lineage: Meta\n    families: [Llama \xff]\n", ":3: ", "not UTF-8 text"),
    "deep-nesting": (b"lineages: " + b"[" * 200 + b"]" * 200 + b"\n", ":1: ", "nested more than 64 levels"),
    "syntax-error": (b"lineages:\n  - lineage: Meta\n    families: [Llama\n", ":", "invalid YAML"),
    "lone-surrogate": (b'lineages:\n  - lineage: "Meta \\ud800"\n    families: [x]\n', ":2: ", "lone surrogate"),
    "over-the-size-cap": (b"lineages: []\n" + b"# padding\n" * 120_000, "", "file is larger than 1 MiB"),
    "top-level-a-list": (b"- Meta\n", ":1", "expected a mapping at the top level, got a list"),
}


@pytest.mark.parametrize("data, at, says", LINEAGE_BYTES.values(), ids=LINEAGE_BYTES.keys())
def test_a_hostile_lineage_file_is_one_line(data, at, says, checkout, tmp_path, monkeypatch, capsys):
    root = linked_copy(checkout, tmp_path / "repo")
    rewrite(root / LINEAGE, data)
    monkeypatch.chdir(root)
    assert main(["check"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err[:500]
    assert captured.err.startswith(f"error: {LINEAGE}{at}") and says in captured.err, captured.err
