"""The kernel trace of a GPU call (grader/worker/trace.py) and what the judge makes of
it, on the CPU: PyTorch's profiler events are simulated with the fields the trace
reads, the classification and the flags are real. tests/integrity/test_integrity.py's GPU
tests (-m gpu) run the same code on the device."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grader.facts import HIDDEN_CALL, CallResult
from grader.harness.session import WorkerGone, _validate
from grader.judge import HIDDEN_DETAIL, HIDDEN_KIND, task_flags
from grader.worker import trace
from grader.worker.evidence import WRAPPER_OPS
from tests.helpers import HAS_CUDA

OWN = {"_w8a8_kernel"}


def _op(id, name, parent=None, annotation=False):
    return SimpleNamespace(id=id, name=name, device_type=SimpleNamespace(name="CPU"), cpu_parent=parent,
                           linked_correlation_id=0, is_user_annotation=annotation)


def _gpu(name, linked=0):
    return SimpleNamespace(id=0, name=name, device_type=SimpleNamespace(name="CUDA"), cpu_parent=None,
                           linked_correlation_id=linked, is_user_annotation=False)


def _events():
    """One call: torch.empty's NaN fill, the submission's kernel, torch.diff (whose
    kernel is its inner subtraction's), an elementwise multiply, cuBLAS, a copy, and a
    kernel no PyTorch op launched."""
    empty = _op(1, "aten::empty")
    diff = _op(2, "aten::diff")
    sub = _op(3, "aten::sub", parent=diff)
    mul = _op(4, "aten::mul")
    mm = _op(5, "aten::mm")
    note = _op(6, "my annotation", annotation=True)
    fill = _op(7, "aten::fill_", parent=note)
    return [empty, diff, sub, mul, mm, note, fill,
            _gpu("void at::native::vectorized_elementwise_kernel<FillFunctor>", linked=1),
            _gpu("_w8a8_kernel"),
            _gpu("void at::native::elementwise_kernel<CUDAFunctor_sub>", linked=3),
            _gpu("void at::native::elementwise_kernel<MulFunctor>", linked=4),
            _gpu("sm90_xmma_gemm_f16f16_f32", linked=5),
            _gpu("Memcpy HtoD (Pageable -> Device)"),
            _gpu("void at::native::vectorized_elementwise_kernel<FillFunctor>", linked=7),
            _gpu("some_library_kernel"),
            _gpu("void at::native::elementwise_kernel<direct_copy_kernel_cuda>"),   # its op not recorded
            _gpu("void at::native::vectorized_elementwise_kernel<AddFunctor>")]


def test_each_gpu_activity_is_tied_to_the_outermost_pytorch_op_that_launched_it():
    found = trace.device_events(_events())
    assert found == [("void at::native::vectorized_elementwise_kernel<FillFunctor>", "aten::empty"),
                     ("_w8a8_kernel", None),
                     ("void at::native::elementwise_kernel<CUDAFunctor_sub>", "aten::diff"),
                     ("void at::native::elementwise_kernel<MulFunctor>", "aten::mul"),
                     ("sm90_xmma_gemm_f16f16_f32", "aten::mm"),
                     ("Memcpy HtoD (Pageable -> Device)", None),
                     ("void at::native::vectorized_elementwise_kernel<FillFunctor>", "aten::fill_"),
                     ("some_library_kernel", None),
                     ("void at::native::elementwise_kernel<direct_copy_kernel_cuda>", None),
                     ("void at::native::vectorized_elementwise_kernel<AddFunctor>", None)]


def test_own_kernels_copies_and_the_wrappers_ops_pass_anything_else_is_named():
    summary = trace.classify(trace.device_events(_events()), OWN, WRAPPER_OPS)
    assert summary == {"own": 1, "copies": 5, "foreign": ["some_library_kernel"],
                       "torch_ops": ["a PyTorch kernel of no recorded op: void at::native::"
                                     "vectorized_elementwise_kernel<AddFunctor>", "aten::mm", "aten::mul"]}


def test_cudas_own_bookkeeping_is_neither_a_kernel_nor_an_op():
    # CUPTI reports "Lazy Function Loading" beside the kernels when CUDA loads a
    # module's functions at their first launch (seen on an H100, CUDA 13): as a
    # GPU activity and as the op a kernel is tied to. Neither computes.
    events = [("Lazy Function Loading", None), ("own_kernel", "Lazy Function Loading"),
              ("Lazy Function Loading", "aten::empty")]
    assert trace.classify(events, {"own_kernel"}, WRAPPER_OPS) == {"own": 1, "copies": 0, "torch_ops": [],
                                                                 "foreign": []}
    # Tied to it, another kernel is still known by its name.
    assert trace.classify([("cutlass_gemm", "Lazy Function Loading")], {"own_kernel"},
                          WRAPPER_OPS)["foreign"] == ["cutlass_gemm"]


def _call(trace_summary, status="ok"):
    return CallResult(status, evidence={"own_launches": 1, "trace": trace_summary} if trace_summary else
                      {"own_launches": 1}, traced=True)


@pytest.mark.parametrize("summary, kinds", [
    ({"own": 2, "copies": 3, "torch_ops": [], "foreign": []}, []),
    ({"own": 1, "copies": 0, "torch_ops": ["aten::mul", "aten::add"], "foreign": []}, ["no_triton_compute"]),
    ({"own": 1, "copies": 0, "torch_ops": ["aten::mm"], "foreign": []}, ["library_matmul"]),
    ({"own": 1, "copies": 0, "torch_ops": [], "foreign": ["cutlass_gemm"]}, ["no_triton_compute"]),
    ({"own": 0, "copies": 2, "torch_ops": [], "foreign": []}, ["no_triton_compute"]),
    (None, ["no_triton_compute"]),   # the trace of a successful call did not come back
])
def test_what_the_trace_shows_voids_the_task_or_not(summary, kinds):
    flags = task_flags([("w8a8/c0", _call(summary))])
    assert [f["kind"] for f in flags] == kinds, flags
    if "no_triton_compute" in kinds:
        assert flags[-1]["detail"].startswith("no Triton kernel computed the output")
    assert task_flags([("w8a8/c0", _call(summary))], off={"kernel trace"}) == []


def test_a_hidden_calls_trace_is_reported_in_fixed_words():
    flags = task_flags([(HIDDEN_CALL, _call({"own": 1, "copies": 0, "torch_ops": ["aten::mm", "aten::mul"],
                                             "foreign": ["kernel_777"]}))])
    assert flags == [{"kind": HIDDEN_KIND, "detail": HIDDEN_DETAIL}]   # two kinds of problem, one finding


@pytest.mark.parametrize("bad", [{"own": -1}, {"own": True}, {"torch_ops": "aten::mm"}, {"foreign": 3}, []])
def test_a_malformed_trace_breaks_the_reply(bad):
    with pytest.raises(WorkerGone):
        _validate({"ok": True, "evidence": {"trace": bad}})


def test_a_trace_reaches_the_harness_bounded():
    names = [f"k{i}" * 100 for i in range(30)]
    ev = _validate({"ok": True, "evidence": {"trace": {"own": 1, "copies": 2, "torch_ops": [], "foreign": names}}})
    foreign = ev["evidence"]["trace"]["foreign"]
    assert len(foreign) == 10 and all(len(n) <= 200 for n in foreign)


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="without CUDA the trace cannot start: this is that path")
def test_without_a_gpu_the_trace_says_why_it_is_off():
    why = trace.start()
    assert why and ("profiler" in why or "CUDA" in why), why
    window = trace.Window()
    with window:
        torch.ones(4).sum()
    assert window.summary(OWN, WRAPPER_OPS) == {"own": 0, "copies": 0, "torch_ops": [], "foreign": []}
