# shellcheck shell=bash
# cuda_env.sh: sourced by the GPU scripts (tests/gpu/run_gpu_tests, bench/gpu_vs_torch).
# runner_cuda_env fills RUNNER_CUDA_CMAKE_FLAGS with -D flags that point CMake at cuDNN
# and NCCL when /usr/local/cuda lacks them (GPU images often ship them only as the
# nvidia-cudnn-cu13 / nvidia-nccl-cu13 wheels of $PYTHON), and puts their lib folders
# on LD_LIBRARY_PATH. It changes nothing when /usr/local/cuda has both.
runner_cuda_env() {
    local py=${PYTHON:-python3} d lib
    RUNNER_CUDA_CMAKE_FLAGS=""
    if ! { [ -e /usr/local/cuda/include/cudnn.h ] && ls /usr/local/cuda/lib64/libcudnn.so* >/dev/null 2>&1; }; then
        d=$("$py" -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
        lib=$(ls "$d"/lib/libcudnn.so* 2>/dev/null | head -n 1 || true)
        if [ -n "$d" ] && [ -n "$lib" ]; then
            RUNNER_CUDA_CMAKE_FLAGS="$RUNNER_CUDA_CMAKE_FLAGS -DCUDNN_INCLUDE=$d/include -DCUDNN_LIB=$lib"
            LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        else
            echo "cuda_env: cuDNN not found in /usr/local/cuda nor in $py's nvidia.cudnn" >&2
        fi
    fi
    if ! { [ -e /usr/local/cuda/include/nccl.h ] && ls /usr/local/cuda/lib64/libnccl.so* >/dev/null 2>&1; }; then
        d=$("$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
        lib=$(ls "$d"/lib/libnccl.so* 2>/dev/null | head -n 1 || true)
        if [ -n "$d" ] && [ -n "$lib" ]; then
            RUNNER_CUDA_CMAKE_FLAGS="$RUNNER_CUDA_CMAKE_FLAGS -DNCCL_INCLUDE=$d/include -DNCCL_LIB=$lib"
            LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        else
            echo "cuda_env: NCCL not found in /usr/local/cuda nor in $py's nvidia.nccl" >&2
        fi
    fi
    export LD_LIBRARY_PATH
}
