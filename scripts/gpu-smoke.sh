#!/usr/bin/env bash
# gpu-smoke.sh - the checks of vllmops.cluster that need a real NVIDIA GPU, in one short run:
#   1. gpu_probe (ansible, collection from this checkout) vs the real nvidia-smi: usable_gpus, diagnosis;
#      FAIL if it sees no GPU while nvidia-smi lists one. Docker passthrough only with the NVIDIA runtime.
#   2. real CUDA vLLM (pip's `vllm`) serves a tiny random Llama on one GPU; vllm_ready waits for it
#      (systemd-run + unit= when systemd is PID 1, else /health polling, then vllm_ready log_file=).
#   3. a real GPU start-up failure, classified by vllm_ready log_file=: --gpu-memory-utilization 0.00001
#      (1.4 MiB of an H200, less than the model's weights: the KV cache cannot fit).
# Time: step 1 ~10 s (+~20 s to install ansible-core without .venv); steps 2-3 ~2-3 min, plus up to
# VLLMOPS_SMOKE_PIP_TIMEOUT (360 s) to install vllm. Every wait running out: ~16 min, so on a 10-minute
# slot run it under `timeout 590` (the trap cleans up).  Exit code: the number of FAILed steps.
# Run from the repository root:   bash scripts/gpu-smoke.sh [--clean] 2>&1 | tee gpu-smoke.log
#   --clean removes $VLLMOPS_SMOKE_DIR (default /tmp/vllmops-smoke: venvs, model, logs) at the end.
# Env: VLLMOPS_SMOKE_DIR, VLLMOPS_SMOKE_VLLM (pip spec, default vllm), VLLMOPS_SMOKE_PIP_TIMEOUT,
#   VLLMOPS_SMOKE_VLLM_ARGS (extra serve flags, default --enforce-eager), VLLMOPS_SMOKE_IMAGE (image for
#   the passthrough check, default the first local one), VLLMOPS_SMOKE_WHEELS (default ./.whl): wheels
#   installed --no-index when they hold the package. No index? Bring ansible-core as wheels for the
#   target's Python: pip download -d .whl --only-binary=:all: --python-version 3.12 --platform
#   manylinux_2_34_x86_64 --platform manylinux2014_x86_64 'ansible-core>=2.19'   (~9 MB, 9 wheels)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD SMOKE=${VLLMOPS_SMOKE_DIR:-/tmp/vllmops-smoke} PIP_TIMEOUT=${VLLMOPS_SMOKE_PIP_TIMEOUT:-360}
CLEAN=0; [ "${1:-}" = --clean ] && CLEAN=1
WHEELS=${VLLMOPS_SMOKE_WHEELS:-}; [ -z "$WHEELS" ] && [ -d .whl ] && WHEELS=$ROOT/.whl
read -r -a EXTRA <<<"${VLLMOPS_SMOKE_VLLM_ARGS---enforce-eager}"
export ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_CALLBACK_RESULT_FORMAT=json \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
mkdir -p "$SMOKE" || exit 1
printf '#!/bin/sh\n' >"$SMOKE/.x" && chmod +x "$SMOKE/.x" && "$SMOKE/.x" 2>/dev/null || echo "WARNING: $SMOKE is noexec: set VLLMOPS_SMOKE_DIR"
if [ ! -d collections/ansible_collections/vllmops/cluster/plugins ]; then  # symlink lost in a copy
  mkdir -p "$SMOKE/collections/ansible_collections/vllmops"
  ln -sfn "$ROOT" "$SMOKE/collections/ansible_collections/vllmops/cluster"
  export ANSIBLE_COLLECTIONS_PATH=$SMOKE/collections
fi
FAILS=0 SUMMARY=() PIDS=() UNIT=vllmops-smoke-vllm USE_SYSTEMD=0 ANSIBLE="" APY=python3 SMI_GPUS=0 VLLM="" MODEL=$SMOKE/tiny-model
[ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && command -v systemd-run >/dev/null && USE_SYSTEMD=1

stop_pid() {  # stop a process group we started: TERM, up to 30 s, then KILL
  kill -0 "$1" 2>/dev/null || return 0
  kill -TERM -- "-$1" 2>/dev/null; for _ in $(seq 30); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$1" 2>/dev/null
}
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {  # the summary (also after an interrupt or a timeout), then our processes, then --clean
  echo; echo "== summary: $(printf '%s\n' ${SUMMARY[@]+"${SUMMARY[@]}"} | grep -c ') PASS') PASS, $FAILS FAIL, $(printf '%s\n' ${SUMMARY[@]+"${SUMMARY[@]}"} | grep -c ') SKIP') SKIP"
  printf '%s\n' ${SUMMARY[@]+"${SUMMARY[@]}"}; echo "logs and results: $SMOKE"
  for p in ${PIDS[@]+"${PIDS[@]}"}; do stop_pid "$p"; done
  [ "$USE_SYSTEMD" = 1 ] && { systemctl stop "$UNIT" 2>/dev/null; systemctl reset-failed "$UNIT" 2>/dev/null; }
  [ "$CLEAN" = 1 ] && rm -rf "$SMOKE"
}
trap cleanup EXIT
trap 'echo; echo "== interrupted in step ${N:-0}: ${TITLE:-}"; exit 130' INT TERM
step() { N=$1 TITLE=$2 T0=$SECONDS; echo; echo "== step $N: $TITLE"; }
result() {  # result PASS|FAIL|SKIP [why]
  local line="== step $N: $TITLE ($((SECONDS - T0))s) $1${2:+ - $2}"
  echo "$line"; SUMMARY+=("$line"); [ "$1" = FAIL ] && FAILS=$((FAILS + 1))
}
mod() {  # mod OUT MODULE [ARGS]: the module's result as JSON in OUT; returns ansible's rc
  local out=$1 name=$2; shift 2
  [ -n "$ANSIBLE" ] || { rm -f "$out"; echo "   no ansible: vllmops.cluster.$name not run"; return 1; }
  "$ANSIBLE" localhost -i localhost, -c local -e "ansible_python_interpreter=$APY" -m "vllmops.cluster.$name" \
    ${1:+-a "$1"} >"$out.raw" 2>"$out.err"
  local rc=$?
  python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(json.dumps(json.JSONDecoder().raw_decode(t, t.index("{", t.index(" => ")))[0]))' \
    "$out.raw" >"$out" 2>/dev/null || { rm -f "$out"; echo "   ansible rc=$rc and no result:"; tail -n 15 "$out.raw" "$out.err" | sed 's/^/   /'; }
  return "$rc"
}
get() {  # get FILE EXPR: EXPR over the result r, strings raw, the rest as JSON
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print(v if isinstance(v, str) else json.dumps(v))' "$@" 2>/dev/null
}
show_class() { echo "   failure_class: $(get "$1" 'r.get("failure_class")')"; echo "   hint: $(get "$1" 'r.get("hint")')"
  get "$1" '"\n".join("   evidence: " + e for e in r.get("evidence", []))' | grep -v '^$'; }
http() {  # http URL [JSON-BODY]: print the body; fails on no answer or an HTTP error
  python3 -c 'import sys,urllib.request as u; b=sys.argv[2].encode() if len(sys.argv)>2 else None
print(u.urlopen(u.Request(sys.argv[1], data=b, headers={"Content-Type": "application/json"}), timeout=60).read().decode())' "$@" 2>/dev/null
}
mkvenv() {  # mkvenv DIR: a venv; without ensurepip, one without pip that the outer pip (--python) fills
  [ -x "$1/bin/python" ] || python3 -m venv "$1" >/dev/null 2>&1 || python3 -m venv --without-pip "$1" >/dev/null
}
pip_install() {  # pip_install VENV LOG SPEC...: from $WHEELS when it holds the package, else the index; rc 2 = no source
  local pip=("$1/bin/pip") log=$2 name=${3%%[<>=]*} rc; shift 2
  [ -x "${pip[0]}" ] || pip=(python3 -m pip --python "${pip[0]%/pip}/python")
  "${pip[@]}" --version >/dev/null 2>&1 || { echo "   no pip: the venv has none (no ensurepip) and python3 has no pip module"; return 3; }
  if [ -n "$WHEELS" ] && compgen -G "$WHEELS/${name//-/_}-*.whl" >/dev/null; then
    echo "   pip install $* from the wheels in $WHEELS"
    timeout "$PIP_TIMEOUT" "${pip[@]}" install -q --no-index --find-links "$WHEELS" "$@" >"$log" 2>&1; rc=$?
  elif timeout 40 "${pip[@]}" index versions "$name" --timeout 8 --retries 0 >/dev/null 2>&1; then
    echo "   pip install $* from the package index (at most ${PIP_TIMEOUT}s)"
    timeout "$PIP_TIMEOUT" "${pip[@]}" install -q "$@" >"$log" 2>&1; rc=$?
  else echo "   no package index reachable for $name${WHEELS:+, and no $name wheel in $WHEELS}"; return 2; fi
  [ "$rc" = 0 ] || { echo "   pip failed (rc=$rc$([ "$rc" = 124 ] && echo ", time-box hit")), $log:"; tail -n 5 "$log" | sed 's/^/   /'; }
  return "$rc"
}
find_ansible() {
  local v=$SMOKE/ansible-venv
  if [ -x .venv/bin/ansible ]; then ANSIBLE=$ROOT/.venv/bin/ansible APY=$ROOT/.venv/bin/python
  elif [ -x "$v/bin/ansible" ] || { echo "   no .venv: a venv for ansible-core in $v"; mkvenv "$v" &&
         pip_install "$v" "$SMOKE/pip-ansible.log" 'ansible-core>=2.19'; }; then ANSIBLE=$v/bin/ansible APY=$v/bin/python
  elif command -v ansible >/dev/null; then ANSIBLE=$(command -v ansible)
  else return 1; fi
  echo "   ansible: $ANSIBLE - $("$ANSIBLE" --version 2>&1 | grep -E '^ansible|python version' | tr -s ' \n' ' ')"
}

step1() {
  step 1 "gpu_probe against the real nvidia-smi"
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1 | sed 's/^/   nvidia-smi: /'; SMI_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  else echo "   nvidia-smi: not found on this machine"; SMI_GPUS=-1; fi
  find_ansible || { result SKIP "no ansible-core (no .venv, none installable, none on PATH)"; return; }
  local f=$SMOKE/probe.json usable img pt=""
  mod "$f" gpu_probe; [ -s "$f" ] || { result FAIL "gpu_probe gave no result"; return; }
  get "$f" '{k: r.get(k) for k in ("ok", "usable_gpus", "diagnosis")}' | sed 's/^/   /'
  get "$f" '{"driver": r["host"]["driver_version"], "cuda": r["host"]["cuda_version"], "gpus": [g["name"] + " " + str(g["memory_total_mib"]) + " MiB" for g in r["host"]["gpus"]], "toolkit": r["toolkit"].get("version"), "docker": r["docker"].get("server_version"), "nvidia_runtime": r["docker"].get("nvidia_runtime")}' | sed 's/^/   /'
  usable=$(get "$f" 'r["usable_gpus"]') || { result FAIL "gpu_probe failed: $(get "$f" 'r.get("msg")')"; return; }
  if [ "$(get "$f" 'r["docker"].get("nvidia_runtime") or bool(r["docker"].get("cdi_spec_dirs") and r["cdi"])')" = true ]; then
    img=${VLLMOPS_SMOKE_IMAGE:-$(docker image ls --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -v '<none>' | head -n 1)}
    if [ -z "$img" ]; then echo "   passthrough: not checked, no local image (set VLLMOPS_SMOKE_IMAGE)"
    else
      mod "$SMOKE/passthrough.json" gpu_probe "{\"image\": \"$img\", \"timeout\": 90}"
      pt=$(get "$SMOKE/passthrough.json" 'r["passthrough"]["error"] or ""')
      echo "   passthrough with $img: $(get "$SMOKE/passthrough.json" '{k: r["passthrough"].get(k) for k in ("mode", "gpus", "error")}')"
      [ -n "$pt" ] && [ -z "${VLLMOPS_SMOKE_IMAGE:-}" ] && { echo "   (image picked automatically: reported, not failed)"; pt=""; }
    fi
  else echo "   passthrough: not checked - $(get "$f" 'r["docker"].get("error") or "Docker has no NVIDIA runtime"') (reported, not failed)"; fi
  if [ "$SMI_GPUS" -lt 0 ]; then
    if [ "$usable" = 0 ]; then result SKIP "no nvidia-smi here: gpu_probe diagnosed it, no GPU to check"
    else result FAIL "gpu_probe reports $usable GPUs without nvidia-smi"; fi
  elif [ "$SMI_GPUS" = 0 ]; then result SKIP "nvidia-smi lists no GPU (gpu_probe: $usable usable)"
  elif [ "$usable" != "$SMI_GPUS" ]; then result FAIL "nvidia-smi lists $SMI_GPUS GPU(s), gpu_probe reports $usable usable"
  elif [ -n "$pt" ]; then result FAIL "passthrough: $pt"
  else result PASS "$usable GPU(s), as nvidia-smi lists"; fi
}

launch() {  # launch NAME PORT FLAGS...: vllm serve in the background (systemd unit for NAME=serve when PID 1 is systemd)
  local name=$1 port=$2; shift 2
  local cmd=("$VLLM" serve "$MODEL" --served-model-name tiny --max-model-len 256 --host 127.0.0.1 --port "$port" "$@" ${EXTRA[@]+"${EXTRA[@]}"})
  echo "   $(date +%T) ${cmd[*]}"
  if [ "$name" = serve ] && [ "$USE_SYSTEMD" = 1 ]; then
    systemctl reset-failed "$UNIT" 2>/dev/null
    systemd-run --unit "$UNIT" --collect --quiet -E HF_HUB_OFFLINE=1 -E TRANSFORMERS_OFFLINE=1 -E VLLM_NO_USAGE_STATS=1 \
      -E DO_NOT_TRACK=1 -E "PATH=$PATH" -E "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" "${cmd[@]}"
  else setsid "${cmd[@]}" >"$SMOKE/$name.log" 2>&1 & PIDS+=("$!"); fi
}
make_model() {  # the sandbox's tiny-model recipe
  local maker=tests/sandbox/serving/make_tiny_model.py
  [ -f "$MODEL/config.json" ] || "$VPY" "$maker" "$MODEL" >"$SMOKE/model.log" 2>&1 ||
    { tail -n 5 "$SMOKE/model.log" | sed 's/^/   /'; return 1; }
}
step2() {
  step 2 "real CUDA vLLM serves a tiny model on one GPU; vllm_ready waits for it"
  [ "$SMI_GPUS" -ge 1 ] || { result SKIP "no NVIDIA GPU (nvidia-smi lists none)"; return; }
  local v=$SMOKE/venv rc t ready f=$SMOKE/ready.json
  if [ -x "$v/bin/vllm" ]; then VPY=$v/bin/python
  elif command -v vllm >/dev/null && python3 -c 'import vllm' 2>/dev/null; then VPY=python3
  else
    mkvenv "$v" || { result FAIL "python3 -m venv $v failed"; return; }
    pip_install "$v" "$SMOKE/pip-vllm.log" "${VLLMOPS_SMOKE_VLLM:-vllm}"; rc=$?
    [ "$rc" = 2 ] && { echo "SKIP: no package index reachable"; result SKIP "no package index reachable"; return; }
    [ "$rc" = 3 ] && { result SKIP "no pip to install vllm with"; return; }
    [ "$rc" = 0 ] || { result FAIL "pip install ${VLLMOPS_SMOKE_VLLM:-vllm} failed (rc=$rc)"; return; }
    VPY=$v/bin/python
  fi
  VLLM=$(command -v "$(dirname "$(command -v "$VPY")")/vllm" || command -v vllm)
  "$VPY" -c 'import sys, torch, vllm
print("   vllm", vllm.__version__, "| torch", torch.__version__, "CUDA", torch.version.cuda, "| GPU seen:", torch.cuda.is_available())
sys.exit(0 if torch.cuda.is_available() else 3)' 2>&1 | tail -n 3 || { result FAIL "import torch/vllm failed, or torch sees no GPU (above)"; return; }
  make_model || { result FAIL "could not make the tiny model (log: $SMOKE/model.log)"; return; }
  echo "   model: $MODEL ($(du -sh "$MODEL" | cut -f1))"
  t=$SECONDS; local since why="" text; since=$(($(date +%s) - 1))
  launch serve 8765 --gpu-memory-utilization 0.3
  if [ "$USE_SYSTEMD" = 1 ]; then
    echo "   systemd is PID 1: unit $UNIT, vllm_ready unit=$UNIT timeout=300"
    mod "$f" vllm_ready "url=http://127.0.0.1:8765 served_model_name=tiny timeout=300 unit=$UNIT since=$since" || why="vllm_ready: not ready"
    ready=$((SECONDS - t)); journalctl --unit "$UNIT" --since "@$since" --output cat --no-pager >"$SMOKE/serve.log" 2>&1
  else
    echo "   no systemd as PID 1: polling /health (300 s), then vllm_ready log_file=$SMOKE/serve.log"
    until http http://127.0.0.1:8765/health >/dev/null; do
      kill -0 "${PIDS[-1]}" 2>/dev/null || { why="vllm serve exited"; break; }
      [ $((SECONDS - t)) -ge 300 ] && { why="no /health within 300 s"; break; }; sleep 2
    done; ready=$((SECONDS - t))
    mod "$f" vllm_ready "log_file=$SMOKE/serve.log" || why=${why:-"vllm_ready log_file= gave no result"}
    [ "$(get "$f" 'r.get("failure_class")')" = none ] || why=${why:-"a healthy start-up log classified as $(get "$f" 'r.get("failure_class")')"}
    [ -n "$why" ] || [ "$(get "$f" 'bool(r.get("evidence"))')" = true ] || echo "   NOTE: vllm_ready found no healthy start-up line in the log"
  fi
  [ -z "$why" ] && echo "   time to ready: ${ready}s (vllm_ready: ready=$(get "$f" 'r.get("ready")'), waited $(get "$f" 'r.get("waited")')s)"
  show_class "$f"
  text=$(http http://127.0.0.1:8765/v1/completions '{"model": "tiny", "prompt": "Hello, GPU", "max_tokens": 16, "temperature": 0}' |
    python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["choices"][0]["text"]))' 2>/dev/null) || why=${why:-"no completion"}
  echo "   completion: ${text:-none}"
  [ -z "$why" ] || { echo "   log tail ($SMOKE/serve.log):"; tail -n 15 "$SMOKE/serve.log" | sed 's/^/   | /'; }
  if [ "$USE_SYSTEMD" = 1 ]; then systemctl stop "$UNIT" 2>/dev/null; else stop_pid "${PIDS[-1]}"; fi
  if [ -z "$why" ]; then result PASS "ready in ${ready}s, one completion"; else result FAIL "$why (log: $SMOKE/serve.log)"; fi
}
step3() {
  step 3 "a real GPU start-up failure is classified (vllm_ready log_file=)"
  if [ -z "$VLLM" ] || [ ! -f "$MODEL/config.json" ]; then result SKIP "no vLLM or model from step 2"; return; fi
  local f=$SMOKE/fail.json t=$SECONDS how=exited class
  launch fail 8766 --gpu-memory-utilization 0.00001
  while kill -0 "${PIDS[-1]}" 2>/dev/null; do
    http http://127.0.0.1:8766/health >/dev/null && { how="became healthy (stopped)"; break; }
    [ $((SECONDS - t)) -ge 240 ] && { how="still running after 240 s (stopped)"; break; }; sleep 2
  done; stop_pid "${PIDS[-1]}"
  echo "   $how after $((SECONDS - t))s; log: $SMOKE/fail.log ($(wc -l <"$SMOKE/fail.log") lines)"
  mod "$f" vllm_ready "log_file=$SMOKE/fail.log"; show_class "$f"; class=$(get "$f" 'r.get("failure_class")')
  if [ "$how" != exited ]; then tail -n 5 "$SMOKE/fail.log" | sed 's/^/   | /'; result FAIL "vllm serve $how: no start-up failure to classify"
  elif [ -n "$class" ] && [ "$class" != none ]; then result PASS "failure_class $class"
  else tail -n 15 "$SMOKE/fail.log" | sed 's/^/   | /'; result FAIL "failure_class '${class:-no result}' for a server that exited"; fi
}

echo "gpu-smoke: $(date -u +%FT%TZ) on $(hostname), repo $ROOT, work dir $SMOKE"
step1; step2; step3
exit "$FAILS"
