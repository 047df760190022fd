#!/usr/bin/env bash
# behaviour_runs.sh OUT [DATA_DIR]: the runs whose samples and summaries scripts/compare_behaviour.py compares between
# two trees (run it from a checkout, under /work/bin/heavy). Each command writes into its own runs folder under OUT;
# the command's stdout (its --json summary) and stderr go beside it.
set -u
OUT=${1:?usage: behaviour_runs.sh OUT [DATA_DIR]}
DATA=${2:-../shared/data}
SE=${SE:-.venv/bin/specdec-eval}
COMMON=(--tasks gsm8k --limit 4 --model tiny --no-reference --num-fewshot 0 --max-output-len 32 --data-dir "$DATA" --json)
mkdir -p "$OUT"
step() {  # step NAME CMD...: CMD's stdout/stderr/status into OUT/NAME.{out,err,rc}
  local name=$1; shift
  echo "== $name: $*" >&2
  "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo $? >"$OUT/$name.rc"
}
step local $SE run "${COMMON[@]}" --spec eagle3 --out "$OUT/local"
step bf16 $SE run "${COMMON[@]}" --spec eagle3 --dtype bfloat16 --out "$OUT/bf16"
step inject $SE run "${COMMON[@]}" --spec eagle3 --inject emit_rejected_draft --out "$OUT/inject"
step gpus2 $SE run "${COMMON[@]}" --spec eagle3 --gpus 2 --device cpu --out "$OUT/gpus2"
step gpus2_bf16 $SE run "${COMMON[@]}" --spec eagle3 --gpus 2 --device cpu --dtype bfloat16 --out "$OUT/gpus2_bf16"
# an endpoint run against our own server: spec-dec and a plain baseline server, bf16 so the control runs too
port() { ${PY:-.venv/bin/python} -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P1=$(port); P2=$(port)
$SE serve --model tiny --spec eagle3 --dtype bfloat16 --port "$P1" --log-level warning >"$OUT/serve_spec.log" 2>&1 &
S1=$!
$SE serve --model tiny --dtype bfloat16 --port "$P2" --log-level warning >"$OUT/serve_plain.log" 2>&1 &
S2=$!
for p in "$P1" "$P2"; do
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$p/health" >/dev/null && break; sleep 1; done
done
step endpoint $SE run "${COMMON[@]}" --endpoint "http://127.0.0.1:$P1" --baseline-endpoint "http://127.0.0.1:$P2" \
  --spec eagle3 --draft-len 3 --dtype bfloat16 --out "$OUT/endpoint"
kill "$S1" "$S2"; wait "$S1" "$S2" 2>/dev/null
step mutants $SE selftest --mutants --model tiny --limit 4 --only emit_rejected_draft --num-fewshot 0 --max-output-len 32 --data-dir "$DATA" --json
echo "done" >&2
