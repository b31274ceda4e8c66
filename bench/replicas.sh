#!/usr/bin/env bash
# Serve the app from K `attnlab app` processes behind nginx with sticky sessions, all on loopback.
#   bash bench/replicas.sh [K=2] [PORT=8500]   → nginx on 127.0.0.1:PORT, replicas on PORT+1 … PORT+K
# Runs in the foreground; Ctrl-C (or SIGTERM) stops nginx and the replicas it started. nginx runs as the
# current user from a temp folder (config, pid, logs); no system config is touched. PYTHON picks the
# interpreter (default python3; one that has attnlab installed); ATTNLAB_REPLICAS_DIR keeps the folder.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K=${1:-2}
PORT=${2:-8500}
PY=${PYTHON:-python3}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "replicas.sh: nginx not found (apt-get install nginx)" >&2; exit 2; }
DIR=${ATTNLAB_REPLICAS_DIR:-$(mktemp -d /tmp/attnlab-replicas.XXXXXX)}
mkdir -p "$DIR"
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$DIR/nginx.pid" ] && kill "$(cat "$DIR/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM

servers=""
for i in $(seq 1 "$K"); do
  p=$((PORT + i))
  "$PY" -m attnlab.cli app --host 127.0.0.1 --port "$p" > "$DIR/replica-$i.log" 2>&1 &
  pids+=($!)
  servers+="        server 127.0.0.1:$p;"$'\n'
done
user_line=""
[ "$(id -u)" = 0 ] && user_line="user root;"  # workers would otherwise drop to nobody and lose the temp dirs
sed -e "s|@DIR@|$DIR|g" -e "s|@PORT@|$PORT|g" -e "s|@USER_LINE@|$user_line|" "$HERE/nginx-replicas.conf.template" \
  | awk -v s="$servers" '{ if ($0 == "@SERVERS@") printf "%s", s; else print }' > "$DIR/nginx.conf"

for i in $(seq 1 "$K"); do  # every replica healthy before nginx takes requests
  for _ in $(seq 1 600); do
    curl -sf --noproxy '*' "http://127.0.0.1:$((PORT + i))/_stcore/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
"$NGINX" -p "$DIR" -c "$DIR/nginx.conf" -g "daemon off;" &
pids+=($!)
echo "attnlab: $K replicas behind http://127.0.0.1:$PORT (folder $DIR)"
wait
