#!/usr/bin/env bash
# vllm_table.sh OUT [LIMIT] [TOKENS]: the README's vLLM table, measured. vLLM's CPU build (make setup-vllm) serving
# the exported SmolLM2 plain, plain again (the null) and with Eagle3 on our shipped head; each judged by
# `specdec-eval run` at greedy, at T = 1.0 (top-p 1.0) and at T = 0.7 (top-k 20, top-p 0.9), on the same GSM8K
# documents as our own engine's Eagle3 (its rejection sampler) beside it. The greedy acceptance length of our engine
# is written as the reference the vLLM run's acceptance gate judges against (do they agree within the gate's error?).
# Prints one markdown row per run at the end (scripts/vllm_table_rows.py); a rerun into the same OUT keeps the runs
# that finished. Sampled requests carry no seed and go one
# at a time: vLLM's CPU build kills its engine core on concurrent seeded top-k/top-p requests (README finding).
# About 25 minutes on 2 cores. Run it alone (two servers decode on both cores).
set -u
OUT=${1:?usage: vllm_table.sh OUT [LIMIT] [TOKENS]}
LIMIT=${2:-8}
TOKENS=${3:-64}
DATA=${DATA:-../shared/data}
VENV=${VLLM_VENV:-.venv-vllm}
MODEL_DIR=${VLLM_MODEL_DIR:-$VENV/smollm2-hf}
PY=.venv/bin/python
SE=.venv/bin/specdec-eval
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
COMMON=(--model smollm2 --tasks gsm8k --data-dir "$DATA" --limit "$LIMIT" --num-fewshot 0 --max-output-len "$TOKENS"
  --no-reference --concurrency 1 --dtype float32 --request-seeds none --json --out "$OUT/runs")
DECODINGS=("temperature=1.0,top_p=1.0" "temperature=0.7,top_k=20,top_p=0.9")

serve_cmd() {  # PORT [METHOD]: the command tests/vllm_server.py starts (peers/profiles/vllm.py builds it)
  $PY - "$VENV/bin/python" "$MODEL_DIR" "$1" "${2:-}" <<'EOF'
import sys
from specdec_eval.peers.profiles.vllm import VLLMServeCommand
python, model_dir, port, method = sys.argv[1:]
print(VLLMServeCommand(python=python, model_dir=model_dir, port=int(port), method=method or None,
                       head="workers/spec/heads/smollm2-eagle3"))
EOF
}
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=()
start() {  # NAME PORT [METHOD]: a server in its own process group, waited for (its start-up time and memory logged)
  local name=$1 port=$2 t0 pid
  t0=$(date +%s)
  setsid env $(serve_cmd "$port" "${3:-}") >"$OUT/server-$name.log" 2>&1 &
  pid=$!; PIDS+=("$pid"); eval "PID_$name=$pid"
  until curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; do
    sleep 2
    kill -0 "$pid" 2>/dev/null || { echo "vllm_table: server $name died; its log's last lines:" >&2; tail -5 "$OUT/server-$name.log" >&2; exit 1; }
  done
  echo "vllm_table: server $name ready in $(( $(date +%s) - t0 )) s, resident $(ps -o rss= -g "$pid" | awk '{s+=$1} END {print int(s/1024)}') MiB" >&2
}
stop() { kill -- "-$1" 2>/dev/null; wait "$1" 2>/dev/null; }
trap 'for p in "${PIDS[@]}"; do kill -- "-$p" 2>/dev/null; done' EXIT
step() {  # NAME ARGS...: one `specdec-eval run`, its --json summary into OUT/NAME.json (kept: a rerun skips it)
  local name=$1; shift
  if grep -q '"verdict"' "$OUT/$name.json" 2>/dev/null; then echo "vllm_table: $name: done before, kept" >&2; return; fi
  echo "vllm_table: $name ($(date +%T))" >&2
  $SE run "${COMMON[@]}" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
  echo "vllm_table: $name: exit $? ($(date +%T))" >&2
}

P=$(free_port); start plain "$P"
P2=$(free_port); start plain2 "$P2"
for d in "${DECODINGS[@]}"; do  # the null: a plain server judged as if it speculated (it drafts nothing)
  step "null-${d//[=,]/_}" --endpoint "http://127.0.0.1:$P2" --baseline-endpoint "http://127.0.0.1:$P" \
    --spec ngram --draft-len 3 --gen-kwargs "$d"
done
stop "$PID_plain2"
E=$(free_port); start eagle3 "$E" eagle3
step ours-greedy --spec eagle3 --populate-acceptance --acceptance-refs "$OUT/our_acceptance.yaml"
# our test id names our KV-cache manager ("v1_kv_cache-"), a server's does not: the same reference under its id
sed 's/\[v1_kv_cache-/[/' "$OUT/our_acceptance.yaml" >"$OUT/our_acceptance_for_servers.yaml"
step vllm-greedy --endpoint "http://127.0.0.1:$E" --baseline-endpoint "http://127.0.0.1:$P" --spec eagle3 \
  --draft-len 3 --acceptance-refs "$OUT/our_acceptance_for_servers.yaml"
for d in "${DECODINGS[@]}"; do
  step "vllm-${d//[=,]/_}" --endpoint "http://127.0.0.1:$E" --baseline-endpoint "http://127.0.0.1:$P" \
    --spec eagle3 --draft-len 3 --gen-kwargs "$d"
  step "ours-${d//[=,]/_}" --spec eagle3 --gen-kwargs "$d"
done
$PY scripts/vllm_table_rows.py "$OUT"
