#!/usr/bin/env bash
# Issue 15's measurements on a GPU machine, in parts that each fit one call of the device tool
# (10 minutes; see ../.library/device/README.md). From this machine:
#
#   run(command="PRIVML_BENCH_COMMIT=<hash> bash benchmarks/gpu_checks.sh tests steps", carry=[".gpu"])
#
# .gpu/ (git-ignored) holds what that machine lacks: Opacus as a wheel for its Python
# (.gpu/whl/opacus-*.whl: pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 -d .gpu/whl opacus==1.6.0) and MNIST in privml's cache format
# (.gpu/mnist.npz, copied from ~/.cache/privml). Results land in $OUT (the tool brings them back):
# copy torch_gpu.json to benchmarks/results/ and run benchmarks/write_benchmarks_md.py.
#
# Parts (default: tests steps mnist):
#   tests  the gpu-marked tests (CUDA paths of the engine, the CLI, serve and a CNN study)
#   steps  the step-time and peak-memory table, privml vs Opacus vs non-private (ROWS="resnet-256 wrn-256"
#          for some rows only; a later call adds the rest to the same JSON when the one returned earlier was
#          copied to .gpu/torch_gpu.json and carried)
#   mnist  the end-to-end MNIST run (epsilon 3, 40 epochs)
#   profile  where a step's GPU time goes on the rows that miss the step-time target (ROWS to choose; kernels by privml
#          phase and by TF32 / float32 arithmetic, for clip_precision "fp32" and "tf32"), and diagnostic
#          step times (grouped per-example convolution gradients, graphs over fixed-size batches,
#          torch.compile). Run it first in a GPU session: it says where the time goes.
#   study  the paper-cnn preset at full scale with --device cuda; it resumes where the last call
#          stopped (finished runs are kept on the machine while it stays warm, and across machines
#          when the returned results.sqlite is copied to .gpu/study/): call it until study.json
#          says every planned run finished. STUDY_SECONDS (default 540) bounds the study itself, so
#          that the store is still copied out: never wrap this part in a shorter timeout, which
#          kills the copy too (a session lost six minutes of runs that way). STUDY_JOBS (default 1)
#          runs that many at once (the GPU's runs share it; the linear methods use the host's cores)
set -uo pipefail
out=${OUT:-$PWD/.gpu/out}
mkdir -p "$out"
site=/tmp/privml-site
if [ ! -d "$site/opacus" ] && compgen -G ".gpu/whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .gpu/whl/*.whl
fi
export PYTHONPATH=$site:$PWD/src PYTHONUNBUFFERED=1 PRIVML_OFFLINE=1
export PRIVML_DATA=${PRIVML_DATA:-$PWD/.gpu}
status=0
# Results of earlier calls, brought back and carried as .gpu/torch_gpu.json: new rows and parts are added to them.
[ -f .gpu/torch_gpu.json ] && [ ! -f "$out/torch_gpu.json" ] && cp .gpu/torch_gpu.json "$out/torch_gpu.json"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests steps mnist)
for part in "${parts[@]}"; do
    echo "== $part ($(date -u +%H:%M:%S))"
    case $part in
    tests)
        timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/torch || status=1 ;;
    steps | mnist)
        # ROWS="resnet-256 wrn-256" measures only those rows of the step table (each row is written when measured).
        # shellcheck disable=SC2086
        python3 -W ignore benchmarks/torch_gpu.py "$part" ${ROWS:+--rows $ROWS} --out "$out/torch_gpu.json" \
            || status=1 ;;
    profile)
        # The rows that miss the step-time target; each row is written as soon as it is measured.
        # shellcheck disable=SC2086
        python3 -W ignore benchmarks/torch_gpu.py profile --rows ${ROWS:-resnet-256 wrn-256 transformer-256} \
            --out "$out/torch_gpu.json" || status=1 ;;
    study)
        dir=/tmp/privml-study-paper-cnn
        # A fresh machine resumes from the store an earlier call brought back, if it was carried as
        # .gpu/study/results.sqlite (cp <files_at>/results.sqlite .gpu/study/ between sessions).
        if [ ! -f "$dir/results.sqlite" ] && [ -f .gpu/study/results.sqlite ]; then
            mkdir -p "$dir" && cp .gpu/study/results.sqlite "$dir/" && echo "study: resuming from .gpu/study"
        fi
        started=$(date +%s)
        timeout "${STUDY_SECONDS:-540}" python3 -m privml.cli.main study run paper-cnn --device cuda --out "$dir" \
            --jobs "${STUDY_JOBS:-1}" --json --no-progress >"$out/study.json"
        rc=$?
        echo "study call: exit $rc after $(($(date +%s) - started)) s" | tee -a "$out/study-calls.txt"
        cp "$dir/results.sqlite" "$out/" 2>/dev/null
        [ $rc -eq 124 ] && echo "study: not finished in this call; call again (finished runs are kept)"
        [ $rc -ne 0 ] && [ $rc -ne 124 ] && status=1 ;;
    *)
        echo "unknown part $part (tests, steps, mnist, profile, study)" >&2
        exit 2 ;;
    esac
done
exit $status
