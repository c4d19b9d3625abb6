"""benchmarks/data/published.yaml: every point names a source, its model is in the corpus, its GPU is
known, its config can be placed, its numbers are positive; and benchmarks/published.py's pure parts
(the data loader's refusals, the column resolver, the throughput formulas). No timing, no network.
The measured figures are held against ArchLedger's lower bound in tests/test_published_bound.py."""
from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

from engine.deploy import ParallelConfig, check, find_gpu, load_gpus
from engine.language.errors import SpecError
from tests.conftest import REPO, _evaluation

_spec = importlib.util.spec_from_file_location("benchmarks_published", REPO / "benchmarks" / "published.py")
published = sys.modules.setdefault("benchmarks_published", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(published)   # registered first: its dataclass looks its module up


@pytest.fixture(scope="module")
def data():
    return published.load_points()


def test_every_point_names_a_source_with_where_date_and_what_was_checked(data):
    sources, points = data
    assert {p.source for p in points} <= set(sources)
    for key, src in sources.items():
        for field in ("title", "where", "date", "checked"):
            assert str(src[field]).strip(), (key, field)
    # the four sources are all there
    assert set(sources) == {"sglang-large-ep", "deepseek-profile-data", "deepseek-inference-overview",
                            "trtllm-perf-overview"}
    raw = published.load_yaml(published.DATA)["points"]
    assert all(str(r["derivation"]).strip() for r in raw)


def test_every_model_is_in_the_corpus_and_every_gpu_is_known(data):
    _, points = data
    gpus = load_gpus(REPO / "gpus")
    for p in points:
        assert (REPO / "corpus" / "models" / (p.model.replace("/", "--") + ".yaml")).is_file(), p.id
        find_gpu(gpus, p.gpu)      # raises SpecError for an unknown GPU


def test_every_evaluated_config_can_be_placed(data):
    """The degrees a point is evaluated at divide the model's heads, experts and layers (the
    engine's own check: where the published degrees cannot, ``evaluated_as`` says why)."""
    _, points = data
    for p in points:
        e = p.evaluated
        config = ParallelConfig(tp=e["tp"], ep=e["ep"], dp_attn=e["dp_attn"], pp=e["pp"], cp=e["cp"])
        assert check(_evaluation(p.model), config) == [], p.id
    # EP72 / EP144 hold 288 experts (256 + 32 redundant); 256 is not divisible by 72 or 144
    swapped = {p.id: (p.degrees["ep"], p.evaluated["ep"]) for p in points if p.degrees != p.evaluated}
    assert swapped == {"sglang-decode-ep72": (72, 64), "deepseek-production-decode": (144, 128)}


def test_numbers_are_positive_and_derived_as_the_sources_say(data):
    _, points = data
    by_id = {p.id: p for p in points}
    for p in points:
        assert p.measured > 0 and p.input_len > 0 and p.output_len > 0 and p.gpus > 0, p.id
        assert p.requests_per_gpu is None or p.requests_per_gpu > 0
        assert p.metric in ("prefill", "decode", "output")
    # hand derivations from the sources' text (benchmarks/data/published.yaml, `derivation`):
    # SGLang blog: 50,302 tok/s per 8-GPU node at 4K prompts; 22,282 per node in decode
    assert by_id["sglang-prefill-ep32-4k"].measured == round(50302 / 8)
    assert by_id["sglang-decode-ep72"].measured == round(22282 / 8)
    # DeepSeek overview: 73.7k input tok/s per node, 56.3% cache hits -> misses per GPU
    assert by_id["deepseek-production-prefill"].measured == round(73700 / 8 * (1 - 0.563))
    # 16,384 prompt tokens per GPU at 4K, 2K, 1K prompts -> 4, 8, 16 prompts per GPU
    assert [by_id[f"sglang-prefill-ep32-{k}"].requests_per_gpu for k in ("4k", "2k", "1k")] == [4, 8, 16]
    # TensorRT-LLM tables give the total over the configuration's GPUs: Qwen3-235B H200 TP8
    # 128/2048 = 42,821 tok/s -> 42,821 / 8 per GPU; Llama-3.1-8B H100 TP1 128/2048 = 22,714
    assert by_id["trtllm-qwen3-235b-h200-tp8-128/2048"].measured == pytest.approx(42821 / 8)
    assert by_id["trtllm-llama-3.1-8b-h100-tp1-128/2048"].measured == 22714
    assert by_id["trtllm-llama-3.1-8b-h100-tp1-128/2048"].requests_per_gpu is None    # at capacity


def test_the_wide_ep_points_run_with_two_micro_batches_as_their_sources_say(data):
    """The SGLang blog runs two-batch overlap; DeepSeek's profile and overview say "two
    micro-batches" / "dual-batch overlap": every DeepSeek-V3 point sets overlap two_batch, and
    no TensorRT-LLM point sets any (its perf-overview recipe states none)."""
    _, points = data
    for p in points:
        want = "two_batch" if p.model == "deepseek-ai/DeepSeek-V3" else None
        assert p.options.get("overlap") == want, p.id


def _write(tmp_path, body: str):
    path = tmp_path / "published.yaml"
    path.write_text(textwrap.dedent(body))
    return path


_GOOD = """\
    sources:
      s: {title: t, where: w, date: d, checked: c}
    points:
      - id: p
        source: s
        model: meta-llama/Meta-Llama-3.1-8B
        gpu: H100
        gpus: 1
        tp: 1
        framework: vllm
        metric: decode
        requests_per_gpu: 8
        derivation: x
        input_len: 128
        output_len: 128
        published: x
        measured: 100
"""


def test_a_well_formed_file_loads(tmp_path):
    _, points = published.load_points(_write(tmp_path, _GOOD))
    assert [(p.id, p.measured, p.requests_per_gpu) for p in points] == [("p", 100.0, 8)]


@pytest.mark.parametrize("old, new, field", [
    ("        source: s\n", "        source: nowhere\n", "source"),
    ("        derivation: x\n", "", "derivation"),
    ("        measured: 100\n", "        measured: -3\n", "measured"),
    ("        gpus: 1\n", "        gpus: 0\n", "gpus"),
    ("        metric: decode\n", "        metric: latency\n", "metric"),
    ("        metric: decode\n", "        metric: decode\n        overlap: dual\n", "overlap"),
    ("      s: {title: t, where: w, date: d, checked: c}\n", "      s: {title: t, where: w, date: d}\n",
     "sources.s.checked"),
])
def test_a_bad_point_is_one_line_naming_the_field(tmp_path, old, new, field):
    assert old in _GOOD
    with pytest.raises(SpecError) as exc:
        published.load_points(_write(tmp_path, _GOOD.replace(old, new)))
    assert exc.value.where.field == field
    assert "\n" not in str(exc.value)


def test_column_prefers_bound_and_estimate_keys_else_the_sol_one():
    sol_only = {"ttft_s": 1.0, "tpot_s": 0.1}
    assert published.column(sol_only, "ttft_s", "bound") == "ttft_s"
    assert published.column(sol_only, "tpot_s", "estimate") == "tpot_s"
    both = {"ttft_s": 1.0, "ttft_bound_s": 0.5, "ttft_estimate_s": 0.8, "tpot_s": 0.1,
            "tpot_lower_bound_s": 0.05, "tpot_schedule_s": 0.07, "prefill_tokens_per_s_per_gpu": 1.0}
    assert published.column(both, "ttft_s", "bound") == "ttft_bound_s"
    assert published.column(both, "ttft_s", "estimate") == "ttft_estimate_s"
    assert published.column(both, "tpot_s", "bound") == "tpot_lower_bound_s"
    assert published.column(both, "tpot_s", "estimate") == "tpot_schedule_s"


def test_column_prefers_the_mean_context_tpot_and_the_steady_capacity_where_they_exist():
    last_only = {"tpot_s": 0.1, "tpot_bound_s": 0.05, "max_concurrent_requests": 10}
    assert published.column(last_only, ("tpot_mean_s", "tpot_s"), "bound") == "tpot_bound_s"
    assert published.column(last_only, ("tpot_mean_s", "tpot_s"), "estimate") == "tpot_s"
    assert published.capacity_key(last_only) == "max_concurrent_requests"
    mean = {**last_only, "tpot_mean_s": 0.08, "tpot_mean_bound_s": 0.04, "max_concurrent_requests_steady": 14,
            "kv_steady_tokens_per_request": 900}
    assert published.column(mean, ("tpot_mean_s", "tpot_s"), "bound") == "tpot_mean_bound_s"
    assert published.column(mean, ("tpot_mean_s", "tpot_s"), "estimate") == "tpot_mean_s"
    assert published.capacity_key(mean) == "max_concurrent_requests_steady"


def test_throughput_formulas_by_hand():
    """batch 10 per replica of 2 GPUs, TTFT 1 s, TPOT 10 ms, 500 prompt and 100 output tokens."""
    s = {"n_gpus": 4, "dp": 2, "batch": 10, "ttft_s": 1.0, "tpot_s": 0.01}

    def point(metric):
        return published.Point("p", "s", "m", "H100", 4, None, "none", {}, {}, {}, (0, 0.0), metric,
                               500, 100, 5, 1.0, 0)
    # prefill: 10 x 500 tokens in 1 s on 2 GPUs = 2,500 tok/s/GPU
    assert published.throughput(point("prefill"), s, "ttft_s", "tpot_s") == pytest.approx(2500)
    # decode: 10 tokens per 10 ms step on 2 GPUs = 500 tok/s/GPU
    assert published.throughput(point("decode"), s, "ttft_s", "tpot_s") == pytest.approx(500)
    # output: 10 x 100 tokens in 1 s + 100 x 10 ms = 2 s on 2 GPUs = 250 tok/s/GPU
    assert published.throughput(point("output"), s, "ttft_s", "tpot_s") == pytest.approx(250)


def test_consistency_prefill_and_decode_throughput_match_the_summary(data):
    """Consistency (the script against the engine's own summary fields): at the speed-of-light
    columns the script's prefill and decode tokens/s/GPU are the summary's."""
    _, points = data
    by_id = {p.id: p for p in points}
    ev = published.Evaluator()
    for pid, field in (("sglang-prefill-ep32-4k", "prefill_tokens_per_s_per_gpu"),
                       ("sglang-decode-ep72", "tokens_per_s_per_gpu")):
        s = ev.summary(by_id[pid])
        assert published.throughput(by_id[pid], s, "ttft_s", "tpot_s") == pytest.approx(float(s[field]), rel=1e-9)
    # the prefill point runs 4 prompts per GPU on 32 GPUs: 128 per replica
    assert int(ev.summary(by_id["sglang-prefill-ep32-4k"])["batch"]) == 128
