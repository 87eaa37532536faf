# SPDX-License-Identifier: Apache-2.0
"""CPU tests of ci/selfcheck_fp8.py: the problems and their reference, the
verdict and exit status, fake backends (right, wrong, missing, raising), the
vLLM kernel adapter, the JSON report, and a clean exit where nothing can run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "selfcheck_fp8", ROOT / "ci" / "selfcheck_fp8.py"
)
sc = importlib.util.module_from_spec(_spec)
sys.modules["selfcheck_fp8"] = sc
_spec.loader.exec_module(sc)

BLOCK = sc.BLOCK
SMALL = [("small", 256, 384)]


def vllm_like_gemm(p, *, act_scale_ue8m0: bool = False) -> torch.Tensor:
    """What a correct block-FP8 backend computes: dynamic 1x128 activation
    quantisation, FP8 x FP8 with block scales, fp32 accumulation, bf16 out."""
    x = p.x.to(torch.float32).view(p.m, p.k // BLOCK, BLOCK)
    amax = x.abs().amax(-1, keepdim=True).clamp(min=1e-10)
    scale = amax / sc.FP8_MAX
    if act_scale_ue8m0:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    xq = (x / scale).clamp(-sc.FP8_MAX, sc.FP8_MAX).to(torch.float8_e4m3fn)
    a = (xq.to(torch.float32) * scale).view(p.m, p.k)
    ws = p.weight_scale
    ws = ws.to(torch.float32)  # e8m0 -> exact powers of two
    ws = ws.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    w = p.weight.to(torch.float32) * ws
    return (a @ w.t()).to(torch.bfloat16)


class Fake:
    def __init__(self, name, fn=vllm_like_gemm, reason=None):
        self.name = name
        self.fn = fn
        self.reason = reason
        self.calls = 0

    def probe(self, problem):
        return self.reason

    def run(self, problem):
        self.calls += 1
        return self.fn(problem)


def test_activations_quantise_losslessly():
    p = sc.make_problem("t", 5, 256, 512, device="cpu")
    x = p.x.to(torch.float32).view(5, 4, BLOCK)
    amax = x.abs().amax(-1)
    scale = amax / sc.FP8_MAX
    # every 1x128 group's scale is a power of two ...
    assert torch.equal(torch.exp2(torch.log2(scale).round()), scale)
    # ... and x / scale is an e4m3 value, so FP8 quantisation loses nothing
    q = x / scale.unsqueeze(-1)
    assert torch.equal(q.to(torch.float8_e4m3fn).to(torch.float32), q)


@pytest.mark.parametrize("scales", ["e8m0", "fp32"])
def test_weight_scales_as_stored(scales):
    p = sc.make_problem("t", 1, 256, 384, scales=scales)
    s = p.weight_scale
    assert s.shape == (2, 3)
    if scales == "e8m0":
        assert s.dtype == torch.float8_e8m0fnu
    else:
        assert s.dtype == torch.float32
    assert torch.equal(s.to(torch.float32), torch.exp2(p.scale_exp.float()))


def test_reference_is_the_blockwise_product():
    p = sc.make_problem("t", 3, 256, 384)
    expected = torch.zeros(3, 256, dtype=torch.float64)
    for i in range(256 // BLOCK):
        for j in range(384 // BLOCK):
            w = p.weight[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK]
            x = p.x[:, j * BLOCK : (j + 1) * BLOCK]
            contrib = x.double() @ w.double().t()
            expected[:, i * BLOCK : (i + 1) * BLOCK] += contrib * 2.0 ** int(
                p.scale_exp[i, j]
            )
    assert torch.allclose(p.reference(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ue8m0", [False, True])
def test_correct_backend_passes(ue8m0):
    good = Fake("Good", lambda p: vllm_like_gemm(p, act_scale_ue8m0=ue8m0))
    cases = sc.cases_for(SMALL, [1, 6], ["e8m0", "fp32"])
    report = sc.run_checks([good], cases, picked={"small": "Good"})
    assert report.exit_code == 0, report.problems
    assert report.verdict == "pass"
    entry = report.backends[0]
    assert entry["counts"]["ok"] == 4
    assert entry["picked_by_vllm_for"] == ["small"]
    # correct backends agree with the reference to bf16 rounding
    assert entry["worst_rel_band"] < 4e-3


def _one_block_scale_doubled(p):
    q = sc.Problem(**{**p.__dict__, "scale_exp": p.scale_exp.clone()})
    q.scale_exp[1, 2] += 1
    return vllm_like_gemm(q)


def _nan_in_one_element(p):
    out = vllm_like_gemm(p)
    out[0, 0] = float("nan")
    return out


WRONG = {
    "scaled": lambda p: vllm_like_gemm(p) * 1.5,
    "one_block_scale_doubled": _one_block_scale_doubled,
    "nan": _nan_in_one_element,
    "weight_scale_ignored": lambda p: (
        p.x.float() @ p.weight.float().t() * 2.0**-10
    ).to(torch.bfloat16),
    "transposed_block_scales": lambda p: vllm_like_gemm(
        sc.Problem(**{**p.__dict__, "scale_exp": p.scale_exp.flip(0).flip(1)})
    ),
}


@pytest.mark.parametrize("block", [(0, 0), (5, 17), (11, 31)])
def test_one_wrong_block_scale_on_a_dsv4_shape(block):
    """The smallest error worth catching: one 128x128 block scale off by 2x in
    attn.fused_wqa_wkv (1536 x 4096), against bf16 rounding of the truth."""
    p = sc.make_problem("attn.fused_wqa_wkv", 64, 1536, 4096)
    ref = p.reference()
    assert sc.compare(ref.to(torch.bfloat16), ref).ok(
        sc.DEFAULT_TOL, sc.DEFAULT_TOL_MAX
    )
    q = sc.Problem(**{**p.__dict__, "scale_exp": p.scale_exp.clone()})
    q.scale_exp[block] += 1
    metrics = sc.compare(q.reference().to(torch.bfloat16), ref)
    assert not metrics.ok(sc.DEFAULT_TOL, sc.DEFAULT_TOL_MAX)
    assert metrics.rel_band > 2 * sc.DEFAULT_TOL


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_wrong_backend_exits_nonzero(kind):
    good = Fake("Good")
    bad = Fake("Bad", WRONG[kind])
    cases = sc.cases_for(SMALL, [6], ["e8m0"])
    report = sc.run_checks([good, bad], cases, picked={"small": "Good"})
    assert report.exit_code == 1
    assert report.verdict == "fail"
    statuses = {e["name"]: e["results"][0]["status"] for e in report.backends}
    assert statuses == {"Good": "ok", "Bad": "wrong"}
    assert any(p.startswith("WRONG: Bad") for p in report.problems)


def test_missing_backends_degrade():
    missing = Fake("Missing", reason="Install the B12X backend")
    good = Fake("Good")
    cases = sc.cases_for(SMALL, [1], ["e8m0"])
    report = sc.run_checks([missing, good], cases, picked={"small": "Good"})
    assert report.exit_code == 0
    entry = report.backends[0]
    assert entry["status"] == "unavailable"
    assert entry["reason"] == "Install the B12X backend"
    assert missing.calls == 0

    only_missing = sc.run_checks([missing], cases, picked={"small": "Missing"})
    assert only_missing.exit_code == 2
    assert only_missing.verdict == "incomplete"


def _raise(p):
    raise RuntimeError("no compiled op")


def test_raising_backend_fails_only_if_vllm_picks_it():
    raising = Fake("Raising", _raise)
    good = Fake("Good")
    cases = sc.cases_for(SMALL, [1], ["e8m0"])
    elsewhere = sc.run_checks([raising, good], cases, picked={"small": "Good"})
    assert elsewhere.exit_code == 0
    assert elsewhere.backends[0]["results"][0]["status"] == "error"
    assert "no compiled op" in elsewhere.backends[0]["results"][0]["error"]

    picked = sc.run_checks([raising, good], cases, picked={"small": "Raising"})
    assert picked.exit_code == 1
    assert any("vLLM's pick" in p for p in picked.problems)


def test_only_raising_backends_is_incomplete():
    cases = sc.cases_for(SMALL, [1], ["e8m0"])
    report = sc.run_checks([Fake("Raising", _raise)], cases, picked={"small": "X"})
    assert report.exit_code == 2
    assert report.verdict == "incomplete"


def test_no_kernel_for_a_shape_fails():
    cases = sc.cases_for(SMALL, [1], ["e8m0"])
    report = sc.run_checks([Fake("Good")], cases, picked={"small": "none: reasons"})
    assert report.exit_code == 1


def test_main_json_report(tmp_path, capsys):
    out = tmp_path / "r.json"
    good, bad = Fake("Good"), Fake("Bad", WRONG["scaled"])
    missing = Fake("Missing", reason="not here")
    code = sc.main(
        ["--quick", "--m", "1", "--scales", "e8m0", "--json", str(out)],
        backends=[good, bad, missing],
        picked={name: "Good" for name, _, _ in sc.QUICK_SHAPES},
    )
    assert code == 1
    data = json.loads(out.read_text())
    assert data["tool"] == "selfcheck_fp8"
    assert data["verdict"] == "fail" and data["exit_code"] == 1
    by_name = {b["name"]: b for b in data["backends"]}
    assert by_name["Missing"]["status"] == "unavailable"
    assert by_name["Missing"]["reason"] == "not here"
    assert by_name["Good"]["counts"]["ok"] == len(sc.QUICK_SHAPES)
    assert by_name["Bad"]["counts"]["wrong"] == len(sc.QUICK_SHAPES)
    assert data["vllm_pick"] == {n: "Good" for n, _, _ in sc.QUICK_SHAPES}
    shapes = {(r["shape"], r["n"], r["k"]) for r in by_name["Good"]["results"]}
    assert shapes == set(sc.QUICK_SHAPES)
    text = capsys.readouterr().out
    assert "verdict: fail (exit 1)" in text
    assert "Missing: unavailable: not here" in text


def test_main_json_to_stdout(capsys):
    code = sc.main(
        ["--quick", "--m", "1", "--scales", "fp32", "--json", "-"],
        backends=[Fake("Good")],
        picked={name: "Good" for name, _, _ in sc.QUICK_SHAPES},
    )
    assert code == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verdict"] == "pass"
    assert "verdict: pass" in captured.err


def test_dsv4_flash_shapes_are_block_aligned():
    for name, n, k in sc.DSV4_FLASH_SHAPES:
        assert n % BLOCK == 0 and k % BLOCK == 0, name
    assert ("attn.fused_wqa_wkv", 1536, 4096) in sc.DSV4_FLASH_SHAPES


class FakeKernel:
    """Stands in for a vLLM block-FP8 kernel class (the adapter's contract)."""

    seen: ClassVar[dict] = {}

    def __init__(self, config):
        self.config = config

    def process_weights_after_loading(self, layer):
        FakeKernel.seen["scale_dtype"] = layer.weight_scale_inv.dtype
        FakeKernel.seen["attrs"] = (
            layer.logical_widths,
            layer.input_size_per_partition,
            layer.output_size_per_partition,
            layer.weight_block_size,
            layer.input_scale,
        )
        layer.weight_scale_inv = torch.nn.Parameter(
            layer.weight_scale_inv.data.to(torch.float32), requires_grad=False
        )

    def apply_weights(self, layer, x, bias=None):
        p = sc.Problem(
            name="",
            m=x.shape[0],
            n=layer.weight.shape[0],
            k=x.shape[1],
            scales="fp32",
            x=x,
            weight=layer.weight,
            scale_exp=torch.log2(layer.weight_scale_inv.data).round().int(),
        )
        return vllm_like_gemm(p)


def _fake_api(supported=True):
    def is_supported(kernel, config, cc):
        return (True, "") if supported else (False, f" {kernel.__name__} nope.")

    def init(**kw):
        assert kw["force_kernel"] is FakeKernel
        assert kw["weight_shape"] == (256, 384)
        return FakeKernel(None)

    return SimpleNamespace(
        is_supported_and_can_implement_kernel=is_supported,
        init_fp8_linear_kernel=init,
        FP8ScaledMMLinearLayerConfig=lambda **kw: SimpleNamespace(**kw),
        weight_quant_key="wkey",
        activation_quant_key="akey",
    )


def test_vllm_kernel_adapter_builds_an_fp8_linear_layer():
    backend = sc.VllmKernelBackend(FakeKernel, _fake_api())
    assert backend.name == "FakeKernel"
    cases = sc.cases_for(SMALL, [2], ["e8m0"])
    report = sc.run_checks([backend], cases, picked={"small": "FakeKernel"})
    assert report.exit_code == 0, report.problems
    assert FakeKernel.seen["scale_dtype"] == torch.float8_e8m0fnu
    assert FakeKernel.seen["attrs"] == ([256], 384, 256, [BLOCK, BLOCK], None)

    unsupported = sc.VllmKernelBackend(FakeKernel, _fake_api(supported=False))
    report = sc.run_checks([unsupported], cases, picked={})
    assert report.backends[0]["reason"] == "FakeKernel nope."
    assert report.exit_code == 2


def test_without_a_usable_vllm_it_exits_2(tmp_path, monkeypatch):
    """On a machine where vLLM cannot run its kernels (here: no GPU, and on CI
    no vLLM config can be built), the tool reports why and exits 2."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    out = tmp_path / "r.json"
    code = sc.main(["--quick", "--m", "1", "--scales", "e8m0", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == data["exit_code"]
    assert code == 2, data
    assert data["verdict"] == "incomplete"
    assert data["problems"]
    # every listed backend, if any, is reported unavailable with a reason
    for b in data["backends"]:
        assert b["status"] == "unavailable" and b["reason"]
