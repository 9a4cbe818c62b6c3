#!/usr/bin/env bash
# On a machine with a CUDA device: every CUDA test, then the GPU rows of benchmarks/vectorized.py.
#
# About three minutes on one H100. The tests are those that skip without a GPU
# (tests/test_cuda.py, tests/test_torch_batching.py and the CUDA test of each
# structure); the benchmark compares LocalBatcher with the environment, the
# policy and the storage on the GPU against a bare torch loop there.
#
# Usage: bash benchmarks/gpu.sh [OUT_DIR]   (writes OUT_DIR/vectorized-cuda.json; default: .)
set -uo pipefail
out=$(realpath "${1:-.}")
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())" || exit 1
python3 -m pytest -q -rs -p no:cacheprovider -W ignore::pytest.PytestConfigWarning \
    tests/test_cuda.py tests/test_torch_batching.py \
    tests/test_checkpoint.py::test_cuda_generators_are_captured_and_restored_after_loading_onto_cuda \
    tests/test_dicttensor.py::test_pin_memory_copies_into_page_locked_memory \
    tests/test_encoders.py::test_the_encoder_moves_to_a_cuda_device \
    tests/test_history.py::test_replay_builds_the_windows_on_the_batch_device \
    tests/test_replay.py::test_cuda_storage_samples_and_priorities_on_the_device \
    tests/test_returns.py::test_cuda_matches_cpu \
    tests/test_temporal.py::test_pin_memory \
    "tests/test_torch_envs.py::test_check_env_passes" \
    tests/test_trajectories.py::test_pin_memory
tests=$?
(cd benchmarks && python3 vectorized.py --cuda-only --json "$out/vectorized-cuda.json")
bench=$?
echo "tests exit $tests, benchmark exit $bench"
exit $((tests || bench))
