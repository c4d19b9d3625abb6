"""The deploy page's formula document asks each program's steps again under a second KV dtype only
where the step's kernel class reads the KV dtype (thirteenth pass, docs/scaling-2.md).

* by hand: :func:`engine.deploy.kernel_spec.reads_kv_dtype` holds for the attention and MLA cache
  classes, whose measured tables are named by KV dtype, and for no other class;
* consistency (the rule against the code it stands for): on the real programs of two models (MLA
  and MTP drafts: DeepSeek-V3; grouped-query attention: Qwen3-8B) every step whose class does not
  read the KV dtype gets an equal :class:`Spec` under bf16 and fp8, and the positions
  :func:`kv_dtype_steps` names are exactly the steps of the classes that do;
* consistency (the shortcut against the path it replaces): the whole document of each model with
  the shortcut and with every KV dtype asked step by step (``_with_kv_steps`` replaced by the full
  loop) is the same text, bit for bit, and the shortcut ran and changed some of the rows it asked.
"""
from __future__ import annotations

import pytest
import yaml

# H200 has measured tables of both KV dtypes for attention and MLA (gpus/measured/h200/sglang-*)
GRID = {
    "doc": "Grid for tests/test_symb_thirteenth_pass.py.",
    "gpus": ["H200"], "gpu_counts": [1, 8], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1, "tp"], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["sglang"], "kv_dtypes": ["bf16", "fp8"],
    "scenarios": {"input_lengths": [4096], "beyond_max_context": 1, "output_lengths": [256], "batches": [1, 64]},
    "ops": {"kv_dtypes": [], "points": []},
}
MODELS = ("deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-8B")


@pytest.fixture(scope="module")
def grid_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("symb13") / "grid.yaml"
    path.write_text(yaml.safe_dump(GRID, sort_keys=False))
    return path


def _export(model: str, grid_path) -> str:
    from engine.batch.deploy_export import document_json
    from engine.batch.grid_eval import evaluate_model
    from engine.language.api import evaluate
    doc: dict = {}
    evaluate_model(evaluate(model), grid_path, export=doc)
    return document_json(doc)


def test_kv_dtype_classes_by_hand():
    from engine.deploy.kernel_spec import reads_kv_dtype
    from engine.deploy.measured_tables import KERNELS
    assert {k for k in KERNELS if reads_kv_dtype(k)} == {"decode_attention", "prefill_attention", "decode_mla",
                                                         "prefill_mla"}
    assert not reads_kv_dtype("")          # a step without a kernel class: the fallback tree


@pytest.mark.parametrize("model", MODELS)
def test_specs_differ_by_kv_dtype_only_where_the_class_reads_it(model, grid_path):
    from engine.batch.grid_eval import evaluate_model
    from engine.deploy import kernel_spec
    from engine.deploy.kernel_spec import Lookup, _kernel, kv_dtype_steps, reads_kv_dtype, step_spec
    from engine.language.api import evaluate
    seen: list = []
    original = kernel_spec.step_spec

    def spy(step, lookup, members):        # the steps and lookups the export asks (its real inputs)
        seen.append((step, lookup, members))
        return original(step, lookup, members)
    import engine.batch.deploy_export as deploy_export
    deploy_export.step_spec = spy
    try:
        evaluate_model(evaluate(model), grid_path, export={})
    finally:
        deploy_export.step_spec = original
    assert seen
    kinds, differing = set(), 0
    for step, lookup, members in seen:
        kernel = _kernel(step, members, lookup.phase)
        other = Lookup(lookup.gpu, lookup.framework, lookup.phase, lookup.tables,
                       "fp8" if lookup.kv_dtype == "bf16" else "bf16", lookup.config, lookup.bound, lookup.moe_routing)
        a, b = step_spec(step, lookup, members), step_spec(step, other, members)
        kinds.add(kernel)
        if not reads_kv_dtype(kernel):
            assert a == b, (model, kernel, step.uid)
        differing += a != b
    assert differing, "no step's spec reads the KV dtype here: the check below would prove nothing"
    assert kinds & {"gemm", "moe", "mla_bmm", "all_reduce"} and kinds & {"decode_attention", "decode_mla"}
    # kv_dtype_steps names exactly the steps of the classes that read it, per program asked
    programs = {}
    for _, lookup, members in seen:
        programs.setdefault(id(members), (members, lookup.phase))
    for members, phase in programs.values():
        for program in _programs_of(members, seen):
            want = tuple(i for i, st in enumerate(program.steps) if reads_kv_dtype(_kernel(st, members, phase)))
            assert kv_dtype_steps(program, members, phase) == want


def _programs_of(members, seen) -> list:
    """The programs whose steps were asked with ``members`` (found through the deploy export's own
    memo of kernel positions, engine.deploy.kernel_spec._KERNEL_STEPS)."""
    from engine.deploy.kernel_spec import _KERNEL_STEPS
    return [program for program, m, _ in _KERNEL_STEPS.values() if m is members]


@pytest.mark.parametrize("model", MODELS)
def test_document_with_the_shortcut_is_the_step_by_step_document(model, grid_path, monkeypatch):
    import engine.batch.deploy_export as deploy_export
    calls: list = []
    shortcut = deploy_export._with_kv_steps

    def counted(rows, program, members, phase, lookup, tree_index):
        out = shortcut(rows, program, members, phase, lookup, tree_index)
        calls.append(out != list(rows))
        return out
    monkeypatch.setattr(deploy_export, "_with_kv_steps", counted)
    fast = _export(model, grid_path)
    assert calls and any(calls), "the shortcut never ran, or never changed a row: nothing compared"

    def step_by_step(rows, program, members, phase, lookup, tree_index):     # the path it replaces
        return deploy_export._step_rows(program, members, phase, lookup, tree_index)
    monkeypatch.setattr(deploy_export, "_with_kv_steps", step_by_step)
    assert _export(model, grid_path) == fast
