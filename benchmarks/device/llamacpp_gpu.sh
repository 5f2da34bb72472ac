#!/usr/bin/env bash
# llama.cpp CUDA (the vendored build) on this machine's GPU, an 8B-shaped Q4_0 model:
# llama-bench at depth, then tokenbench against llama-server (a closed-loop sweep and agent sessions).
# Idempotent stages, each skipped when done or when too little of BUDGET is left.
# Needs .dev (wheels in .dev/whl: platformdirs, msgspec, gguf; llama.cpp source as .dev/lcpp.tar.xz: the
# llama-cpp-python 0.3.36 sdist's vendor/llama.cpp, without models/ and docs/); see benchmarks/device/README.md.
# env: BUDGET (seconds the script may use), LCPP_BIN (prebuilt tools: skip the build), M8B ("layers hidden ffn").
set -u
T0=$(date +%s); BUDGET=${BUDGET:-560}; R=${RES:-/tmp/res}; mkdir -p $R
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
save() { cp -f $R/* "${OUT:-/tmp/out}/" 2>/dev/null; true; }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.log; }
export PYTHONUNBUFFERED=1 TOKENBENCH_DB=/tmp/tb.db
if [ -d .dev/whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src
PY=${PY:-python3}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv >> $R/steps.log
B=${LCPP_BIN:-/tmp/l/llama.cpp/build/bin}
if [ ! -x $B/llama-server ]; then
  log build start
  mkdir -p /tmp/l && tar xJf .dev/lcpp.tar.xz -C /tmp/l
  ( cd /tmp/l/llama.cpp && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DBUILD_SHARED_LIBS=OFF \
      && cmake --build build -j16 --target llama-bench llama-server llama-quantize ) > $R/build.log 2>&1 &
  BUILD=$!
fi
M=${MDIR:-/tmp/m8b}
if [ ! -s $M/m8b-f16.gguf ]; then log model start; $PY benchmarks/device/make_m8b.py $M ${M8B:-} >> $R/steps.log 2>&1 || { log model FAILED; save; exit 1; }; fi
[ -n "${BUILD:-}" ] && { wait $BUILD || { log build FAILED; tail -30 $R/build.log; save; exit 1; }; log build done; }
tail -c 20000 $R/build.log > $R/build.tail 2>/dev/null; rm -f $R/build.log
if [ ! -s $M/m8b-q4_0.gguf ]; then $B/llama-quantize $M/m8b-f16.gguf $M/m8b-q4_0.gguf Q4_0 > /dev/null 2>&1 || { log quantize FAILED; save; exit 1; }; log quantized; fi
save
if [ ! -s $R/bench-q4.json ] && [ $(left) -gt 90 ]; then
  log bench q4
  timeout $(( $(left) - 20 )) $B/llama-bench -m $M/m8b-q4_0.gguf -fa 1 -ngl 99 -r 3 -p 512 -n 128 -d ${DEPTHS:-0,4096,16384} -o json > /tmp/bench-q4.tmp 2>>$R/steps.log && mv /tmp/bench-q4.tmp $R/bench-q4.json
  log bench q4 done; save
fi
if [ ! -s $R/sweep.json ] && [ $(left) -gt 100 ]; then
  log server start
  $B/llama-server -m $M/m8b-q4_0.gguf -ngl 99 -fa on -c ${CTX:-262144} --parallel 32 --port 8089 > /tmp/server.log 2>&1 &
  SRV=$!
  for i in $(seq 120); do curl -sf localhost:8089/health >/dev/null && break; sleep 0.5; done
  log server up
  timeout $(( $(left) - 10 )) $PY -m tokenbench sweep --url http://127.0.0.1:8089/v1 --concurrency ${LEVELS:-1,4,16,32} \
     --input-len 512 --output-len 128 --requests 32 --guard off --quiet --label "H200 llama-server CUDA" \
     --json $R/sweep.json >> $R/out.txt 2>&1; log sweep rc=$?; save
  if [ $(left) -gt 70 ]; then
    timeout $(( $(left) - 10 )) $PY -m tokenbench sweep --url http://127.0.0.1:8089/v1 --sessions 8 --concurrency 4 \
      --turns 6 --input-len 1024 --output-len 128 --guard off --quiet --label "H200 llama-server CUDA" \
      --json $R/sessions.json >> $R/out.txt 2>&1; log sessions rc=$?; save
  fi
  kill $SRV; tail -c 4000 /tmp/server.log >> $R/out.txt
fi
if [ ! -s $R/bench-f16.json ] && [ $(left) -gt 80 ]; then
  log bench f16
  timeout $(( $(left) - 10 )) $B/llama-bench -m $M/m8b-f16.gguf -fa 1 -ngl 99 -r 3 -p 512 -n 128 -d 0,4096 -o json > /tmp/bench-f16.tmp 2>>$R/steps.log && mv /tmp/bench-f16.tmp $R/bench-f16.json
  log bench f16 done
fi
save; log end
