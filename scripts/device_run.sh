#!/usr/bin/env bash
# One device call (the lent H200): the kernel timings of scripts/device_kernels.py, then chalk's own
# `chalk measure --device cuda`. Each stage under its own timeout so a slow one cannot eat the other's results.
# Run from the repository root with OUT set, carrying .whl: wheels of pydantic 2.13.4, pydantic-core 2.46.4 (cp312
# manylinux), annotated-types, typing-inspection, typing-extensions and typer 0.28.0 (chalk imports pydantic; the
# image lacks it), fetched here with `pip download --no-deps --only-binary=:all: --python-version 3.12 ...`
# (/work/.library/device/README.md, Notes). The tests/data/h200_device files came from this script.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "wheel install failed"
{
  date -u; nvidia-smi || true
  python3 -c "import torch, transformers, typer, pydantic; print('torch', torch.__version__, \
'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'typer', typer.__version__, \
'pydantic', pydantic.VERSION)"
  echo "== stage 1: kernels"; t0=$(date +%s)
  timeout ${KERNELS_TIMEOUT:-190} python3 scripts/device_kernels.py --device cuda --out "$OUT" \
      --budget-s ${KERNELS_BUDGET:-165}
  echo "kernels rc=$? in $(( $(date +%s) - t0 )) s"
  echo "== stage 2: chalk measure"; t0=$(date +%s)
  mkdir -p "$OUT/measure"
  timeout ${MEASURE_TIMEOUT:-190} python3 -m chalk measure --device cuda ${MEASURE_FLAGS:-} --json -o "$OUT/measure" \
      > "$OUT/measure/measure.json"
  echo "measure rc=$? in $(( $(date +%s) - t0 )) s"; tail -c 1500 "$OUT/measure/measure.json"; echo
  date -u
} 2>&1 | tee "$OUT/log.txt"
