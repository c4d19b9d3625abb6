"""Bad input gives one line — file:line, the field, what is wrong, what to write — and writes nothing.

Each case copies the real ``corpus/`` to a temporary folder, breaks one file with a text edit, and
runs the real CLI in-process (``build`` and ``show``). The expected line is found by searching the
broken file, never hard-coded, so the cases survive edits elsewhere in the corpus. The second half
unit-tests :mod:`engine.language.expr`, the restricted expression language spec text is parsed with.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import sympy

from engine import api
from engine.language import expr
from engine.language import corpus as corpus_module
from engine.cli import main
from tests.bad_input_helpers import copy_corpus, fresh_api_cache, parse_each_yaml_once  # noqa: F401 (fixtures)
from tests.file_helpers import linked_copy, rewrite

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "corpus"
PWNED = "PWNED"  # what the malicious expressions try to create
EVIL = f"__import__('os').system('touch {PWNED}')"


@dataclass(frozen=True)
class Bad:
    """One broken corpus file and what the error must say about it.

    ``old`` (a string, or a regex) is replaced once by ``new`` in ``file``. The error must point
    at ``at`` (default: ``file``) on the line holding ``line_of`` (default: ``new``), contain
    ``says`` before the ' — ' and ``hint`` after it.
    """

    file: str
    old: str | re.Pattern
    new: str
    says: str
    hint: str
    line_of: str | None = None
    at: str | None = None
    model: str = "Qwen3-8B"


LIB = "components/library/"
QWEN = "models/Qwen--Qwen3-8B.yaml"
OSS = "models/openai--gpt-oss-20b.yaml"
DSV3 = "models/deepseek-ai--DeepSeek-V3.yaml"

CASES = {
    # -- unknown op / role / component -------------------------------------------------------------
    "unknown-op": Bad(
        LIB + "prenorm_block.yaml", "op: rmsnorm, in: x", "op: rmsnorm2, in: x",
        "graph.input_layernorm.op: unknown op 'rmsnorm2'", ", rmsnorm,", line_of="rmsnorm2"),
    "unknown-op-hint-lists-the-right-one": Bad(
        LIB + "gqa_attention.yaml", "op: softmax,", "op: softmaxx,",
        "graph.probs.op: unknown op 'softmaxx'", ", softmax,", line_of="softmaxx"),
    "unknown-role-of-component": Bad(
        LIB + "gqa_attention.yaml", "role: attention", "role: atention",
        "role: unknown role 'atention'", "use one of: attention"),
    "unknown-role-of-node": Bad(
        LIB + "prenorm_block.yaml", "in: x, dims: {dim: hidden}, role: norm}", "in: x, dims: {dim: hidden}, role: nrom}",
        "graph.input_layernorm.role: unknown role 'nrom'", ", norm,", line_of="nrom"),
    "unknown-role-in-quant-override": Bad(
        OSS, "overrides: {experts: mxfp4}", "overrides: {expert: mxfp4}",
        "quant_context.overrides.expert: unknown role 'expert'", "experts", model="gpt-oss-20b"),
    "unknown-component-in-slot-fill": Bad(
        QWEN, "ffn: swiglu_mlp", "ffn: swiglu_mpl",
        "templates.block.slots.ffn: unknown component 'swiglu_mpl'", "swiglu_mlp"),
    "unknown-node-field": Bad(
        LIB + "prenorm_block.yaml", "in: x, dims: {dim: hidden}, role: norm}", "in: x, dims: {dim: hidden}, rol: norm}",
        "graph.input_layernorm.rol: unknown field 'rol'", "role", line_of="rol: norm"),
    "unknown-activation": Bad(  # reported at the node that uses the option value
        LIB + "swiglu_mlp.yaml", "act: silu ", "act: sulu ",
        "unknown activation 'sulu'", "silu", line_of="attrs: {act: $act}"),
    # -- `in:` edges ---------------------------------------------------------------------------------
    "in-names-no-node": Bad(
        LIB + "prenorm_block.yaml", "in: [x, self_attn]", "in: [x, self_atn]",
        "graph.attn_residual.in: `in: self_atn` names no node or input", "self_attn"),
    "in-names-no-node-block-style": Bad(
        LIB + "moe.yaml", "in: dispatch\n", "in: dispatchh\n",
        "graph.experts.in: `in: dispatchh` names no node", "dispatch", line_of="in: dispatchh"),
    "in-names-no-node-in-stack": Bad(
        QWEN, "in: layers,", "in: layer,",
        "stacks.main.graph.norm.in: `in: layer` names no node", "layers"),
    "op-given-too-few-inputs": Bad(
        LIB + "gqa_attention.yaml", "in: [probs, v_cache]", "in: probs",
        "graph.attn.in: op attention_apply takes 2..2 inputs, got 1", "in: [a, b]",
        line_of="op: attention_apply, in: probs"),
    "component-given-too-many-inputs": Bad(
        QWEN, "template: block, in: embed_tokens", "template: block, in: [embed_tokens, embed_tokens]",
        "component prenorm_block takes 1 inputs (x), got 2", "1 name"),
    # -- dims never bound -------------------------------------------------------------------------
    "unbound-dim-in-node-dims": Bad(
        LIB + "swiglu_mlp.yaml", "dims: {in: d_ff, out: hidden}", "dims: {in: d_fff, out: hidden}",
        "graph.down_proj.dims.in: unknown name 'd_fff'", "d_ff"),
    "unbound-dim-in-block-style-node": Bad(
        LIB + "moe.yaml", "dims: {d_ff: d_ff_expert, hidden: $latent_dim}", "dims: {d_ff: d_ff_exprt, hidden: $latent_dim}",
        "graph.experts.dims.d_ff: unknown name 'd_ff_exprt'", "d_ff_expert", model="gpt-oss-20b"),
    "unbound-dim-in-component-dims": Bad(
        LIB + "prenorm_block.yaml", "inputs: [x]\n", "inputs: [x]\ndims: {d_twice: 2 * hiddn}\n",
        "dims.d_twice: unknown name 'hiddn'", "hidden", line_of="hiddn"),
    "unbound-dim-on-slot-node": Bad(  # the node's dims are in the component, not the model's fill
        LIB + "prenorm_block.yaml", "mlp: {slot: ffn, in: post_attention_layernorm}",
        "mlp: {slot: ffn, in: post_attention_layernorm, dims: {d_extra: hiddn}}",
        "graph.mlp.dims.d_extra: unknown name 'hiddn'", "hidden"),
    "unbound-dim-in-model-dims": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: 3 * hiddn",
        "dims.d_ff: unknown name 'hiddn'", "hidden"),
    "unbound-repeat-count": Bad(
        OSS, "repeat: n_layers", "repeat: n_layer",
        "stacks.main.graph.layers.repeat: unknown name 'n_layer'", "n_layers", model="gpt-oss-20b"),
    "dim-missing-from-dims-table": Bad(
        QWEN, "  d_ff: config.intermediate_size", "  d_fff: config.intermediate_size",
        "dims.d_fff: dim 'd_fff' is not in the dims table", "corpus/dims.yaml"),
    "dim-not-an-integer": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: config.intermediate_size / 7",
        "dims.d_ff: dim 'd_ff' evaluates to 12288/7, not a positive integer", "//"),
    "dim-left-empty": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff:",
        "dims.d_ff: expected a number or an expression, got nothing", "config.hidden_size"),
    "dim-expression-syntax-error": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: config.intermediate_size *",
        "dims.d_ff: cannot parse expression", "config.hidden_size // config.num_attention_heads"),
    "dim-expression-too-long": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: " + " + ".join(["config.intermediate_size"] * 20),
        "dims.d_ff: expression longer than 400 characters", "named dims"),
    "max-context-not-positive": Bad(
        QWEN, "max_context: config.max_position_embeddings", "max_context: 0 - 1",
        "max_context: max_context evaluates to -1", "config.max_position_embeddings"),
    # -- config fields ------------------------------------------------------------------------------
    "config-field-missing-from-snapshot": Bad(
        "snapshots/Qwen--Qwen3-8B.yaml", re.compile(r"intermediate_size: \d+,\s*"), "",
        "dims.d_ff: config field config.intermediate_size is missing", "snapshot",
        at=QWEN, line_of="config.intermediate_size"),
    "config-field-missing-in-schedule-rule": Bad(
        DSV3, "config.first_k_dense_replace", "config.first_k_dense",
        "schedule[0].when: config field config.first_k_dense is missing", "snapshot",
        model="DeepSeek-V3"),
    # -- shapes -------------------------------------------------------------------------------------
    "shape-mismatch-linear-input": Bad(
        LIB + "gqa_attention.yaml", "dims: {in: n_heads * d_head, out: hidden}",
        "dims: {in: n_kv_heads * d_head, out: hidden}",
        "graph.o_proj: node '", "last axis is n_kv_heads * d_head"),
    "shape-mismatch-norm-width": Bad(
        LIB + "prenorm_block.yaml", "op: rmsnorm, in: x, dims: {dim: hidden}", "op: rmsnorm, in: x, dims: {dim: d_head}",
        "norm input: last axis hidden does not match dim", "last axis is d_head"),
    # -- malicious expressions (never executed) -------------------------------------------------------
    "malicious-dim-in-model-spec": Bad(
        QWEN, "d_ff: config.intermediate_size", f"d_ff: {EVIL}",
        "dims.d_ff: function call is not allowed", "ceil, floor, min, max, len, count"),
    "malicious-dim-in-component": Bad(
        LIB + "swiglu_mlp.yaml", "dims: {in: d_ff, out: hidden}", f'dims: {{in: "{EVIL}", out: hidden}}',
        "graph.down_proj.dims.in: function call is not allowed", "can be called"),
    "malicious-dunder-walk": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: ().__class__.__base__.__subclasses__()",
        "dims.d_ff: function call is not allowed", "can be called"),
    "malicious-config-dunder": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: config.__class__",
        "dims.d_ff: attribute '__class__' is not allowed", "config.<field>"),
    "malicious-when": Bad(
        LIB + "gqa_attention.yaml", "in: q_heads, dims: {dim: d_head}, when: qk_norm}",
        f'in: q_heads, dims: {{dim: d_head}}, when: "{EVIL} == 0"}}',
        "graph.q_norm.when: function call is not allowed", "can be called", line_of=EVIL),
    "malicious-quant-scheme-shape": Bad(
        "quant/fp8_block128.yaml", '"ceil(rows / 128)"', f'"{EVIL}"',
        "matrix[1].shape: function call is not allowed", "ceil", model="DeepSeek-V3"),
    "malicious-yaml-python-tag": Bad(
        QWEN, "d_ff: config.intermediate_size", "d_ff: !!python/object/apply:os.system ['touch PWNED']",
        "invalid YAML: could not determine a constructor", "check indentation"),
    # -- invalid YAML -------------------------------------------------------------------------------
    "yaml-broken-indentation": Bad(
        LIB + "prenorm_block.yaml", "  self_attn:", "    self_attn:",
        "invalid YAML:", "check indentation, colons and quoting"),
    "yaml-unclosed-bracket": Bad(
        LIB + "prenorm_block.yaml", "in: [x, self_attn],", "in: [x, self_attn,",
        "invalid YAML: expected ',' or ']'", "check indentation, colons and quoting"),
    "yaml-tab-indentation": Bad(
        LIB + "prenorm_block.yaml", "  self_attn:", "\tself_attn:",
        "invalid YAML: found character '\\t'", "check indentation"),
    "yaml-duplicate-key": Bad(
        LIB + "prenorm_block.yaml", "  mlp:", "  self_attn:",
        "invalid YAML: duplicate key 'self_attn'", "check indentation", line_of="  self_attn: {slot: ffn"),
    "yaml-key-not-a-name": Bad(
        QWEN, "  d_ff: config.intermediate_size", "  null: config.intermediate_size",
        "invalid YAML: key 'null' is not a name", "quoting"),
    # -- component options ----------------------------------------------------------------------------
    "unknown-option-in-model-fill": Bad(
        QWEN, "with: {qk_norm: true,", "with: {qk_nrom: true,",
        "templates.block.slots.attention.with.qk_nrom: component gqa_attention has no option 'qk_nrom'",
        "its options are: qk_norm"),
    "unknown-option-in-block-style-fill": Bad(
        OSS, "with: {router_bias: true,", "with: {router_bais: true,",
        "slots.ffn.with.router_bais: component moe has no option 'router_bais'", "router_bias",
        model="gpt-oss-20b"),
    "unknown-option-on-component-node": Bad(
        LIB + "moe.yaml", "with: {fused_gate_up:", "with: {fused_gateup:",
        "graph.experts.with.fused_gateup: component swiglu_mlp has no option 'fused_gateup'",
        "fused_gate_up", model="gpt-oss-20b"),
    "unknown-option-read-by-dollar": Bad(
        LIB + "gqa_attention.yaml", "attrs: {sinks: $sinks}", "attrs: {sinks: $sink}",
        "graph.probs.attrs.sinks: unknown option 'sink'", "sinks"),
    "flag-option-not-a-bool": Bad(
        QWEN, "with: {qk_norm: true,", "with: {qk_norm: maybe,",
        "with.qk_norm: expected true or false, got 'maybe'", "write true or false"),
    # -- when: ----------------------------------------------------------------------------------------
    "when-names-unknown-option": Bad(
        LIB + "gqa_attention.yaml", "in: q_heads, dims: {dim: d_head}, when: qk_norm}",
        "in: q_heads, dims: {dim: d_head}, when: qk_nrom}",
        "graph.q_norm.when: unknown name 'qk_nrom'", "options:"),
    "when-block-style-node": Bad(
        LIB + "moe.yaml", "when: shared_experts\n", "when: shared_expert\n",
        "graph.shared_experts.when: unknown name 'shared_expert'", "shared_experts",
        line_of="when: shared_expert\n", model="gpt-oss-20b"),
    "when-on-stack-node": Bad(
        QWEN, "role: norm, module: model.norm}", "role: norm, module: model.norm, when: tied}",
        "stacks.main.graph.norm.when: unknown name 'tied'", "remove `when:`", line_of="when: tied"),
    "when-not-a-condition": Bad(
        LIB + "gqa_attention.yaml", "in: q_heads, dims: {dim: d_head}, when: qk_norm}",
        "in: q_heads, dims: {dim: d_head}, when: 2}",
        "graph.q_norm.when: expected a condition (text) or true or false, got 2", "when: qk_norm",
        line_of="when: 2}"),
    "when-off-on-node-without-input": Bad(
        LIB + "prenorm_block.yaml", "op: rmsnorm, in: x,", "op: rmsnorm, when: false,",
        "graph.input_layernorm.when: a node with no input cannot be switched off", "in:"),
    # -- quant ----------------------------------------------------------------------------------------
    "unknown-quant-scheme-default": Bad(
        QWEN, "quant_context: {default: bf16}", "quant_context: {default: bf17}",
        "quant_context.default: unknown quant scheme 'bf17'", "bf16"),
    "unknown-quant-scheme-override": Bad(
        DSV3, "    router: bf16\n", "    router: bf61\n",
        "quant_context.overrides.router: unknown quant scheme 'bf61'", "bf16", line_of="router: bf61",
        model="DeepSeek-V3"),
    "quant-scheme-bad-key-template": Bad(
        "quant/fp8_block128.yaml", '"{weight}_scale_inv"', '"{weigth}_scale_inv"',
        "matrix[1].key: bad key template", "{weight}", model="DeepSeek-V3"),
    # -- schedules --------------------------------------------------------------------------------------
    "unknown-template-name": Bad(
        QWEN, "template: block,", "template: blok,",
        "stacks.main.graph.layers.template: unknown template 'blok'", "block"),
    "unknown-template-in-rule-list": Bad(
        DSV3, "- {template: moe}", "- {template: moee}",
        "layers.schedule[1].template: unknown template 'moee'", "moe", model="DeepSeek-V3"),
    "unknown-template-in-map": Bad(
        OSS, "full_attention: full}", "full_attention: fulll}",
        "layers.schedule.map.full_attention: unknown template 'fulll'", "full", model="gpt-oss-20b"),
    "schedule-by-list-too-short": Bad(
        "snapshots/openai--gpt-oss-20b.yaml", re.compile(r",\s*full_attention\]"), "]",
        "layers.schedule.by: config.layer_types has no entry for layer 23", "every repeated layer",
        at=OSS, line_of="by: config.layer_types", model="gpt-oss-20b"),
    "schedule-by-value-not-in-map": Bad(
        OSS, "map: {sliding_attention: sliding, full_attention: full}", "map: {sliding_attention: sliding}",
        "layers.schedule.map: layer 1 is 'full_attention', which the map does not cover",
        "full_attention: <template>", model="gpt-oss-20b"),
    "schedule-when-unknown-name": Bad(
        DSV3, "layer < config.first_k_dense_replace", "layr < 3",
        "schedule[0].when: unknown name 'layr'", "layer", model="DeepSeek-V3"),
}

#: Cases also run as "a failed rebuild keeps the previous results" (load, walk and YAML failures).
SMALL_GRID = Path(__file__).parent / "data" / "grid_small.yaml"
REBUILD_CASES = ("unknown-op", "shape-mismatch-linear-input", "yaml-unclosed-bracket",
                 "malicious-dim-in-model-spec")


# -- helpers ------------------------------------------------------------------------------------------

def break_file(root: Path, case: Bad) -> None:
    path = root / case.file
    text = path.read_text(encoding="utf-8")
    if isinstance(case.old, re.Pattern):
        broken, n = case.old.subn(case.new, text, count=1)
    else:
        n = text.count(case.old)
        assert n == 1, f"{case.file} should contain {case.old!r} exactly once (found {n}); update the case"
        broken = text.replace(case.old, case.new, 1)
    assert n == 1 and broken != text, f"{case.file}: {case.old!r} not found; update the case"
    rewrite(path, broken.encode("utf-8"))      # a new file: the case's copy may link to a pristine one


def expected_place(root: Path, case: Bad) -> str:
    """'corpus/<file>:<line>' of the text the error must point at, searched in the broken corpus."""
    at = case.at or case.file
    needle = case.line_of if case.line_of is not None else case.new
    text = (root / at).read_text(encoding="utf-8")
    assert text.count(needle) == 1, f"{needle!r} should occur once in {at}"
    line = text[: text.index(needle)].count("\n") + 1
    return f"corpus/{at}:{line}"


def run(root: Path, *argv: str, capsys) -> tuple[int, str, str]:
    code = main(["--corpus", str(root), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- the CLI on broken corpora ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pristine_corpus(tmp_path_factory) -> Path:
    """The real corpus copied once per module and test process; each case links its files into its
    own copy (:func:`tests.file_helpers.linked_copy`) and replaces the one it breaks, where it
    copied the whole corpus. A case whose commands wrote a corpus file in place fails its own
    "the corpus was modified" check."""
    return copy_corpus(tmp_path_factory.mktemp("pristine"))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_with_place_and_fix(case, pristine_corpus, tmp_path, monkeypatch, capsys):
    root = linked_copy(pristine_corpus, tmp_path / "corpus")
    break_file(root, case)
    place = expected_place(root, case)
    corpus_before = files_under(root)
    monkeypatch.chdir(tmp_path)  # a command that did run would leave PWNED here
    out = tmp_path / "out"

    # build only the case's model: every corpus file is still loaded and checked, and the walk
    # that fails is the one the case breaks (a whole-corpus build would evaluate others first)
    for argv in (["build", "--out", str(out), "--models", case.model], ["show", case.model]):
        code, stdout, stderr = run(root, *argv, capsys=capsys)
        assert code == 2, f"{argv[0]}: exit {code}, stderr {stderr!r}"
        assert stdout == "", f"{argv[0]} printed results: {stdout[:200]!r}"
        assert stderr.endswith("\n") and stderr.count("\n") == 1, f"not one line: {stderr!r}"
        message = stderr.rstrip("\n")
        assert message.startswith(f"error: {place}: "), f"expected {place}, got {message!r}"
        problem, dash, hint = message.partition(" — ")
        assert case.says in problem, f"{case.says!r} not in {problem!r}"
        assert dash and case.hint in hint, f"hint {hint!r} should mention {case.hint!r}"

    assert not (out / "results").exists()
    assert not out.exists() or files_under(out) == {}, "a failed build wrote files"
    assert files_under(root) == corpus_before, "the corpus was modified"
    for folder in (tmp_path, REPO, root):
        assert not (folder / PWNED).exists(), f"a spec expression ran code ({folder / PWNED})"


@pytest.fixture(scope="module")
def first_builds(tmp_path_factory):
    """``first(model)`` -> (corpus copy, output folder) of a successful ``build`` of ``model`` over
    the small grid from the unbroken corpus: once per model and test process, each case rebuilding
    in its own copy (every rebuild case's first build was the same build of Qwen3-8B)."""
    done: dict[str, tuple[Path, Path]] = {}

    def first(model: str, capsys) -> tuple[Path, Path]:
        if model not in done:
            folder = tmp_path_factory.mktemp("first-build")
            root, out = copy_corpus(folder), folder / "out"
            code, _, stderr = run(root, "build", "--out", str(out), "--quiet", "--grid", str(SMALL_GRID),
                                  "--models", model, capsys=capsys)
            assert code == 0 and stderr == "", stderr
            done[model] = root, out
        return done[model]
    return first


#: The rebuild cases share their first build (:func:`first_builds`) in one pytest-xdist worker
#: (``--dist loadgroup``): spread one by one, each worker they landed on built it again.
@pytest.mark.xdist_group("bad_input_rebuild")
@pytest.mark.parametrize("name", REBUILD_CASES)
def test_failed_rebuild_keeps_previous_results(name, tmp_path, capsys, first_builds):
    first_root, first_out = first_builds(CASES[name].model, capsys)
    root, out = tmp_path / "corpus", tmp_path / "out"
    shutil.copytree(first_root, root)            # the unbroken corpus and its results, as the build left them
    shutil.copytree(first_out, out)
    args = ("build", "--out", str(out), "--quiet", "--grid", str(SMALL_GRID), "--models", CASES[name].model)
    before = files_under(out)
    assert {"results/models.parquet", "results/manifest.json"} <= set(before)
    assert any(f.startswith("results/deployments/") for f in before)

    break_file(root, CASES[name])
    code, stdout, stderr = run(root, *args, capsys=capsys)
    assert code == 2 and stderr.startswith("error: corpus/")
    assert files_under(out) == before, "the previous results changed (or staging folders were left behind)"


# -- engine.language.expr directly -----------------------------------------------------------------------------

CONFIG = {"hidden_size": 4096, "num_attention_heads": 32, "rope": {"theta": 500000},
          "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                          "full_attention"]}
I = sympy.Integer
NUMBERS = {"a": I(3), "b": I(5), "x": I(1000), "n_heads": I(128), "d_qk_nope": I(128), "d_v_head": I(128)}
SYMBOLS = {name: sympy.Symbol(name, positive=True, integer=True) for name in NUMBERS}


def config(path: tuple):
    value = CONFIG
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or key >= len(value):
                raise KeyError(key)
        elif not isinstance(value, dict) or key not in value:
            raise KeyError(key)
        value = value[key]
    return value


def ev(text, names=NUMBERS):
    return expr.evaluate(text, expr.Scope(names, config))


S = SYMBOLS


@pytest.mark.parametrize("text, numeric, symbolic", [
    ("config.hidden_size // config.num_attention_heads", I(128), I(128)),
    ("n_heads * (d_qk_nope + d_v_head)", I(32768), S["n_heads"] * (S["d_qk_nope"] + S["d_v_head"])),
    ("ceil(x / 128)", I(8), sympy.ceiling(S["x"] / 128)),
    ("floor(x / 128)", I(7), sympy.floor(S["x"] / 128)),
    ("min(a, b)", I(3), sympy.Min(S["a"], S["b"])),
    ("max(a, b, 4)", I(5), sympy.Max(S["a"], S["b"], 4)),
    ("count(config.layer_types, 'full_attention')", I(3), I(3)),
    ("len(config.layer_types)", I(5), I(5)),
    ("config.rope.theta", I(500000), I(500000)),
    ("1.5 * a", sympy.Rational(9, 2), sympy.Rational(3, 2) * S["a"]),
    ("a ** 2 - b % 2", I(8), S["a"] ** 2 - sympy.Mod(S["b"], 2)),
    ("a if config.layer_types[1] == 'full_attention' else b", I(3), S["a"]),
])
def test_expr_accepts_arithmetic_over_dims_and_config(text, numeric, symbolic):
    assert ev(text) == numeric
    assert ev(text, SYMBOLS) == symbolic


@pytest.mark.parametrize("text, expected", [
    ("'full_attention' in config.layer_types", True),
    ("'moe' in config.layer_types", False),
    ("'moe' not in config.layer_types", True),
    ("config.layer_types[0] == 'sliding_attention' and a < b", True),
    ("not a >= b or b == 4", True),
    ("True", True),
])
def test_expr_conditions_on_config_lists(text, expected):
    assert ev(text) is expected


def test_expr_passes_yaml_numbers_through_exactly():
    assert ev(4096) == I(4096) and ev(0.125) == sympy.Rational(1, 8) and ev(True) is True


@pytest.mark.parametrize("text, says", [
    ("__import__('os').system('ls')", "function call is not allowed"),
    ("os.system('ls')", "function call is not allowed"),
    ("eval('1')", "function call is not allowed"),
    ("__builtins__", "name '__builtins__' is not allowed"),
    ("a.real", "attribute access is only allowed on config"),
    ("().__class__", "attribute access is only allowed on config"),
    ("(lambda: 1)()", "function call is not allowed"),
    ("lambda: 1", "'Lambda' is not allowed"),
    ("[t for t in config.layer_types]", "'ListComp' is not allowed"),
    ("{t: 1 for t in config.layer_types}", "'DictComp' is not allowed"),
    ("(t for t in config.layer_types)", "'GeneratorExp' is not allowed"),
    ("[a, b]", "'List' is not allowed"),
    ("f'{a}'", "'JoinedStr' is not allowed"),
    ("(y := 1)", "'NamedExpr' is not allowed"),
    ("config.__class__", "attribute '__class__' is not allowed"),
    ("config.hidden_size.__class__", "attribute '__class__' is not allowed"),
    ("config.__dict__.hidden_size", "attribute '__dict__' is not allowed"),
    ("config.layer_types[nope]", "unknown name 'nope'"),
    ("config.layer_types[0:2]", "'Slice' is not allowed"),
    ("config.layer_types['x']", "config subscripts must be non-negative integers"),
    ("config.layer_types[True]", "config subscripts must be non-negative integers"),
    ("config.layer_types[0 - 1]", "config subscripts must be non-negative integers"),
    ("config", "bare 'config'"),
    ("config.no_such_field", "config field config.no_such_field is missing"),
    ("nope * 2", "unknown name 'nope'"),
    ("a ** 100", "exponents must be integer literals"),
    ("min(a, b, key=a)", "keyword arguments are not allowed"),
    ("b'x'", "constant b'x' is not allowed"),
    ("a +", "cannot parse expression"),
    (" + ".join(["a"] * 134), "expression longer than 400 characters"),
    (None, "expected a number or an expression, got nothing"),
])
def test_expr_rejects_everything_else_with_a_hint(text, says):
    with pytest.raises(expr.ExprError) as info:
        ev(text)
    assert says in str(info.value)
    assert str(info.value).count("\n") == 0
    assert info.value.hint, f"no hint for {text!r}"


def test_expr_never_runs_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for text in (EVIL, f"a + {EVIL}", f"min(a, {EVIL})", f"a if {EVIL} else b",
                 f"config.layer_types[0] == {EVIL}", f"[{EVIL} for t in config.layer_types]"):
        with pytest.raises(expr.ExprError):
            ev(text)
    assert not (tmp_path / PWNED).exists()


def test_expr_length_limit_is_400_characters():
    just_fits = "a" + " + a" * ((expr.MAX_LENGTH - 1) // 4)
    assert len(just_fits) <= expr.MAX_LENGTH
    assert ev(just_fits) == I(3) * (1 + (expr.MAX_LENGTH - 1) // 4)
    with pytest.raises(expr.ExprError, match="longer than 400"):
        ev(just_fits + " + a")
