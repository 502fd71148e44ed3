"""The weight reads of one decode step, kernel by kernel: which CPU matmul reads SmolLM2-135M's weights fastest at
the demo's batch (8 rows), side by side in one process.

A decode step of the static sampler (``sagerl.eval.static_decoder``) at 8 rows is its linears' weight reads plus
small ops. Fewer weight bytes per step is the lever the sampler issue names (int8 rollout weights with an
importance-sampling correction); it pays only if a kernel reads int8 weights faster than oneDNN reads bfloat16 ones.
For each linear shape of the model (per layer: the fused q/k/v, o, the fused gate/up, down; and the LM head), this
times, in rounds (each kernel in turn, A B C D A B C D ...) after a warm-up:

- ``float32-mkl``: MKL's packed float32 linear (``torch.ops.mkl._mkl_linear``, the static decoder's float32 path
  until 2026-12-07, and still where torch has no oneDNN);
- ``float32-onednn``: oneDNN's packed float32 linear (``torch.ops.mkldnn._linear_pointwise``, its float32 path since:
  2.1x MKL's speed at 8 rows on the AVX2-only AMD EPYC, where MKL does not run its fastest code);
- ``bfloat16-onednn``: oneDNN's packed bfloat16 linear (``torch.ops.mkldnn._linear_pointwise``, its bfloat16 path);
- ``int8``: torch's int8 weight-only matmul (``torch.ops.aten._weight_int8pack_mm``, bfloat16 activations, one
  scale per output row: what torchao's int8 weight-only quantisation calls on a CPU);
- ``int8-dynamic``: fbgemm's dynamically quantised linear (``torch.ops.quantized.linear_dynamic``: int8 weights
  with one scale per output row, the activations quantised to 8 bits per call: what
  ``torch.ao.quantization.quantize_dynamic`` runs). Its rollouts would come from another distribution:
  ``benchmarks/int8_rollouts.py`` measures how far.

and prints per shape the median µs and the weight-read bandwidth (weight bytes / time), then one step's sum (30
layers + the head) and each kernel's ratio to ``bfloat16-onednn`` (``float32-onednn`` on a CPU where oneDNN packs
no bfloat16). Each layer's shape is timed over 30 distinct weights, one per layer as a decode step reads them
(until 2026-12-07 one weight read 200 times, warm in cache: bandwidths above the machine's copy bandwidth).

    .venv/bin/python benchmarks/linear_kernels.py              # 8 rows, 2 threads, 3 rounds
    .venv/bin/python benchmarks/linear_kernels.py --rows 32

Run it on an idle machine: another torch process on the same cores slows the kernels unevenly.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

HIDDEN, INTERMEDIATE, KV, LAYERS, VOCAB = 576, 1536, 192, 30, 49152
SHAPES = {  # name: (out, in) of SmolLM2-135M's linears, the static decoder's fused ones
    "qkv": (HIDDEN + 2 * KV, HIDDEN),
    "o": (HIDDEN, HIDDEN),
    "gate_up": (2 * INTERMEDIATE, HIDDEN),
    "down": (HIDDEN, INTERMEDIATE),
    "head": (VOCAB, HIDDEN),
}


def kernels(weight, rows: int) -> dict:
    """name -> (call, weight bytes) for one (out, in) float32 weight."""
    import torch

    out = {}
    x32 = torch.randn(rows, weight.size(1))
    x16 = x32.bfloat16()
    if torch.backends.mkl.is_available():
        packed32 = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
        out["float32-mkl"] = (
            lambda: torch.ops.mkl._mkl_linear(x32, packed32, weight, None, rows),
            weight.numel() * 4,
        )
    packed32dnn = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
    out["float32-onednn"] = (
        lambda: torch.ops.mkldnn._linear_pointwise(x32, packed32dnn, None, "none", [], ""),
        weight.numel() * 4,
    )
    try:  # oneDNN packs bfloat16 only where the CPU has AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT
        packed16 = torch.ops.mkldnn._reorder_linear_weight(weight.bfloat16(), rows)
        out["bfloat16-onednn"] = (
            lambda: torch.ops.mkldnn._linear_pointwise(x16, packed16, None, "none", [], ""),
            weight.numel() * 2,
        )
    except RuntimeError:
        pass
    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
    w8 = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
    s16 = scales.bfloat16()
    out["int8"] = (
        lambda: torch.ops.aten._weight_int8pack_mm(x16, w8, s16),
        weight.numel() + scales.numel() * 2,
    )
    if "fbgemm" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "fbgemm"
        zeros = torch.zeros(weight.size(0), dtype=torch.long)
        with warnings.catch_warnings():  # torch's deprecation notice for quantized tensors
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(weight, scales.double(), zeros, 0, torch.qint8)
        prepacked = torch.ops.quantized.linear_prepack(qweight, None)
        out["int8-dynamic"] = (
            lambda: torch.ops.quantized.linear_dynamic(x32, prepacked, True),
            weight.numel() + scales.numel() * 4,
        )
    return out


def timed(call, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        call()
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=8, help="batch rows (the demo's decode batch: 8)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"{torch.__version__}, {args.threads} threads, {args.rows} rows, ISA {torch.backends.cpu.get_cpu_capability()}"
    )
    step: dict[str, float] = {}
    for name, (n_out, n_in) in SHAPES.items():
        # one weight per layer, as a decode step reads them: 30 distinct copies of a layer's shape, so that a
        # layer's weights are not warm in cache when it is read again (the head: one)
        copies = 1 if name == "head" else LAYERS
        per_weight = [kernels(torch.randn(n_out, n_in) * 0.02, args.rows) for _ in range(copies)]
        calls = {
            kernel: (
                lambda kernel=kernel, ws=per_weight: [c[kernel][0]() for c in ws],
                per_weight[0][kernel][1],
            )
            for kernel in per_weight[0]
        }
        repeat = 20 if name == "head" else 10
        for call, _ in calls.values():  # warm-up: packing, first-touch of the weights
            timed(call, 5)
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(args.rounds):
            for kernel, (call, _) in calls.items():
                times[kernel].append(timed(call, repeat))
        cells = []
        for kernel, (_, size) in calls.items():
            us = statistics.median(times[kernel]) / copies  # per weight
            step[kernel] = step.get(kernel, 0.0) + us * copies
            cells.append(f"{kernel} {us:8.1f} µs {size / us / 1e3:5.1f} GB/s")
        print(f"{name:8s} {n_out:5d}x{n_in:4d}  " + "  ".join(cells))
    base_name = "bfloat16-onednn" if "bfloat16-onednn" in step else "float32-onednn"
    base = step[base_name]
    print(
        "one decode step's linears (30 layers + head): "
        + ", ".join(f"{k} {v / 1e3:.2f} ms ({v / base:.2f}x {base_name})" for k, v in step.items())
    )


if __name__ == "__main__":
    main()
