#!/usr/bin/env bash
# Start a real single-node Apache Kafka broker (KRaft) from its Maven Central jars.
# Idempotent: fetches once, formats once, and reuses a broker that already answers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
cache="${PASSK_CACHE_DIR:-$HOME/.cache/passk}/kafka-$version"
data="${PASSK_KAFKA_DIR:-$root/var/kafka}"
port="${PASSK_KAFKA_PORT:-9092}"
cport="${PASSK_KAFKA_CONTROLLER_PORT:-9093}"
python="${PYTHON:-$root/.venv/bin/python}"
ready() { "$python" "$here/wait_ready.py" "127.0.0.1:$port" "${1:-1}"; }

if [ -f "$data/kafka.pid" ] && kill -0 "$(cat "$data/kafka.pid")" 2>/dev/null && ready 5; then
  echo "kafka: already running (pid $(cat "$data/kafka.pid")) on 127.0.0.1:$port"; exit 0
fi
if ready 1 2>/dev/null; then
  echo "kafka: a broker already answers on 127.0.0.1:$port; reusing it"; exit 0
fi

if [ ! -f "$cache/.complete" ]; then
  echo "kafka: fetching Apache Kafka $version and its runtime dependencies from Maven Central"
  mkdir -p "$cache/libs"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$cache/libs"
  touch "$cache/.complete"
fi

mkdir -p "$data/logs" "$data/log"
props="$data/server.properties"
sed -e "s#@PORT@#$port#g" -e "s#@CONTROLLER_PORT@#$cport#g" -e "s#@DATA_DIR@#$data/log#g" \
    "$here/server.properties.in" > "$props"
cp_="$cache/libs/*"
java_opts=(-Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true
           -Dkafka.logs.dir="$data/logs" -Dlog4j2.configurationFile="$here/log4j2.yaml")

if [ ! -f "$data/log/meta.properties" ]; then
  cluster_id="$(java -cp "$cp_" kafka.tools.StorageTool random-uuid)"
  java "${java_opts[@]}" -cp "$cp_" kafka.tools.StorageTool format \
       -t "$cluster_id" -c "$props" >"$data/logs/format.out" 2>&1
  echo "kafka: formatted storage (cluster $cluster_id)"
fi

nohup java "${java_opts[@]}" -cp "$cp_" kafka.Kafka "$props" >"$data/logs/stdout.log" 2>&1 &
echo $! > "$data/kafka.pid"
if ! ready "${PASSK_KAFKA_READY_S:-90}"; then
  echo "kafka: broker did not answer within ${PASSK_KAFKA_READY_S:-90} s; see $data/logs/" >&2
  tail -n 30 "$data/logs/server.log" >&2 || true
  exit 1
fi
echo "kafka: Apache Kafka $version up on 127.0.0.1:$port (pid $(cat "$data/kafka.pid"))"
