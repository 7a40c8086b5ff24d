#!/bin/sh
# isa_run.sh LEVEL COMMAND [ARGS...]: runs a test with the CPU math libraries held to one
# instruction-set level, so that a failure that only shows on another CPU (an AVX2-only
# laptop, an AVX-512 server whose OpenBLAS picks other GEMM kernels) shows on this one.
# Exits 77 (ctest: skipped, not passed) when this CPU lacks the level.
#
# LEVEL   oneDNN (ONEDNN_MAX_CPU_ISA)        OpenBLAS kernels (OPENBLAS_CORETYPE)   CPU needs
# sse41   SSE41                              Nehalem (SSE2-era GEMM)                sse4_1
# avx2    AVX2                               Haswell (the AVX2+FMA family, = Zen)    avx2, fma
# avx512  unrestricted (AVX-512, AMX)        Cooperlake with avx512_bf16, else       avx512f/bw/dq/vl
#                                            SkylakeX (same SGEMM kernels)
# PyTorch (the CLI-vs-PyTorch test's reference) gets the same oneDNN limit and
# ATEN_CPU_CAPABILITY (default / avx2 / avx512) for its own kernels. The unwrapped test is
# the native level: both libraries as they pick for this CPU and environment.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: isa_run.sh sse41|avx2|avx512 COMMAND [ARGS...]" >&2
  exit 2
fi
level=$1
shift
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
need() {
  for f in "$@"; do
    case " ${flags#*:} " in
      *" $f "*) ;;
      *) echo "skipped: this CPU lacks $f (level $level)"; exit 77 ;;
    esac
  done
}
case "$level" in
  sse41)
    need sse4_1
    export ONEDNN_MAX_CPU_ISA=SSE41 OPENBLAS_CORETYPE=Nehalem ATEN_CPU_CAPABILITY=default ;;
  avx2)
    need avx2 fma
    export ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ;;
  avx512)
    need avx512f avx512bw avx512dq avx512vl
    core=SkylakeX
    case " ${flags#*:} " in *" avx512_bf16 "*) core=Cooperlake ;; esac
    export ONEDNN_MAX_CPU_ISA=ALL OPENBLAS_CORETYPE=$core ATEN_CPU_CAPABILITY=avx512 ;;
  *)
    echo "isa_run.sh: unknown level $level (sse41, avx2 or avx512)" >&2
    exit 2 ;;
esac
echo "isa_run.sh: level $level: ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
exec "$@"
