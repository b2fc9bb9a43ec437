"""Experiment (untracked): W4A16 at large M in one kernel. The first row tile's programs unpack
each weight tile once, use it, and publish the scaled fp16 tile (with a flag per K chunk); the
other programs wait for the chunks and run a plain fp16 GEMM over them."""
import torch
import triton
import triton.language as tl

from .utils import check_w4a16_inputs
from .w4a16 import _nibbles

_FLAGS = {}


@triton.jit
def _stream_kernel(x_ptr, qw_ptr, s_ptr, w_ptr, y_ptr, flag_ptr, epoch, M, N, K, group_size,
                   stride_xm, stride_qr, stride_sg, stride_wk, stride_ym,
                   GROUPED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n  # producers (pid_m == 0) have the lowest program ids: they are scheduled first
    pid_n = pid % num_n
    BLOCK_R: tl.constexpr = BLOCK_K // 8
    CHUNK_K: tl.constexpr = CHUNK * BLOCK_K
    n_chunks = tl.cdiv(K, CHUNK_K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    safe_m = offs_m % M
    safe_n = offs_n % N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if pid_m == 0:
        for c in range(0, n_chunks):
            for k0 in range(c * CHUNK_K, min(K, (c + 1) * CHUNK_K), BLOCK_K):
                a = tl.load(x_ptr + safe_m[:, None] * stride_xm + (k0 + offs_k)[None, :],
                            mask=(k0 + offs_k)[None, :] < K, other=0.0)
                r = k0 // 8 + offs_r
                packed = tl.load(qw_ptr + r[:, None, None] * stride_qr + safe_n[None, None, :],
                                 mask=(r < K // 8)[:, None, None], other=0)
                g = (8 * r) // group_size
                s = tl.load(s_ptr + g[:, None, None] * stride_sg + safe_n[None, None, :],
                            mask=(r < K // 8)[:, None, None], other=0.0)
                w = tl.reshape(_nibbles(packed) * s, (BLOCK_K, BLOCK_N))
                tl.store(w_ptr + (k0 + offs_k)[:, None] * stride_wk + offs_n[None, :], w,
                         mask=((k0 + offs_k)[:, None] < K) & (offs_n[None, :] < N))
                acc = tl.dot(a, w, acc)
            tl.debug_barrier()  # every thread's stores of the chunk are issued before the flag
            tl.atomic_xchg(flag_ptr + pid_n * n_chunks + c, epoch, sem="release")
    else:
        for c in range(0, n_chunks):
            while tl.atomic_add(flag_ptr + pid_n * n_chunks + c, 0, sem="acquire") != epoch:
                pass
            for k0 in range(c * CHUNK_K, min(K, (c + 1) * CHUNK_K), BLOCK_K):
                a = tl.load(x_ptr + safe_m[:, None] * stride_xm + (k0 + offs_k)[None, :],
                            mask=(k0 + offs_k)[None, :] < K, other=0.0)
                w = tl.load(w_ptr + (k0 + offs_k)[:, None] * stride_wk + safe_n[None, :],
                            mask=(k0 + offs_k)[:, None] < K, other=0.0, cache_modifier=".cg")
                acc = tl.dot(a, w, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def launch(x, qweight, scales, cfg):
    M, N, K, group_size = check_w4a16_inputs(x, qweight, scales)
    cfg = dict(cfg)
    chunk = cfg.pop("CHUNK")
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    w = torch.empty((K, N), device=x.device, dtype=torch.float16)
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    n_flags = triton.cdiv(N, bn) * triton.cdiv(K, chunk * bk)
    flags, epoch = _FLAGS.get(x.device, (None, 0))
    if flags is None or flags.numel() < n_flags:
        flags = torch.zeros(max(n_flags, 1 << 16), device=x.device, dtype=torch.int32)
    epoch = epoch % (2**30) + 1
    _FLAGS[x.device] = (flags, epoch)
    # per-channel scales are one group of size K
    _stream_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](
        x, qweight, scales, w, y, flags, epoch, M, N, K, group_size,
        x.stride(0), qweight.stride(0), scales.stride(0), w.stride(0), y.stride(0),
        GROUPED=scales.shape[0] > 1, CHUNK=chunk, **cfg)
    return y
