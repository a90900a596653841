#!/usr/bin/env bash
# Start real Apache Kafka (KRaft) from its Maven Central jars: one node by default, or
# PASSK_KAFKA_BROKERS=N nodes in combined mode (each a broker and a controller voter) on
# consecutive ports from PASSK_KAFKA_PORT. PASSK_KAFKA_SECURITY=sasl_ssl puts the client
# listener on TLS with SCRAM-SHA-512 users and ACLs (see secure.py).
# Idempotent: fetches once, formats once, and reuses a broker that already answers.
# PASSK_KAFKA_SERVER_PROPS: extra server.properties lines (key=value, one a line);
# PASSK_KAFKA_JAVA_OPTS: extra JVM options.
# PASSK_KAFKA_STARTED_MARK=FILE: touched only when this run started the node(s) itself, so
# a caller (`make up`) knows whether stopping the broker later is its business.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
cache="${PASSK_CACHE_DIR:-$HOME/.cache/passk}/kafka-$version"
data="${PASSK_KAFKA_DIR:-$root/var/kafka}"
brokers="${PASSK_KAFKA_BROKERS:-1}"
security="${PASSK_KAFKA_SECURITY:-plaintext}"
port="${PASSK_KAFKA_PORT:-$((9092 + ${PASSK_PORT_OFFSET:-0}))}"  # services/contract/ports.py
# One node: controller on the next port (9093). Several: brokers take port..port+N-1, so
# the controllers move 100 up (9192..).
if [ "$brokers" -gt 1 ]; then cport="${PASSK_KAFKA_CONTROLLER_PORT:-$((port + 100))}"
else cport="${PASSK_KAFKA_CONTROLLER_PORT:-$((port + 1))}"; fi
heap="${PASSK_KAFKA_HEAP:-1g}"
ready_s="${PASSK_KAFKA_READY_S:-$((60 + 60 * brokers))}"  # how long to wait for every node
python="${PYTHON:-$root/.venv/bin/python}"
case "$security" in plaintext|sasl_ssl) ;; *)
  echo "kafka: PASSK_KAFKA_SECURITY must be plaintext or sasl_ssl, not $security" >&2; exit 2;;
esac

fetch() {
  [ -f "$cache/.complete" ] && return 0
  echo "kafka: fetching Apache Kafka $version and its runtime dependencies from Maven Central"
  mkdir -p "$cache/libs"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$cache/libs"
  touch "$cache/.complete"
}
# --fetch-only: the jars into the cache, nothing started (CI caches the directory).
if [ "${1:-}" = --fetch-only ]; then fetch; echo "kafka: Apache Kafka $version in $cache"; exit 0; fi

node_dir() { if [ "$brokers" -gt 1 ]; then echo "$data/node$1"; else echo "$data"; fi; }
bootstrap=""; voters=""
for i in $(seq 1 "$brokers"); do
  bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$((port + i - 1))"
  voters="${voters:+$voters,}$i@127.0.0.1:$((cport + i - 1))"
done
secrets="$data/secrets"
if [ "$security" = sasl_ssl ]; then
  # The admin's client settings, for readiness checks and for creating topics and ACLs.
  [ -f "$secrets/users.json" ] && eval "$("$python" "$here/secure.py" admin-env "$secrets")"
fi
ready() { KAFKA_BOOTSTRAP_SERVERS="$bootstrap" "$python" "$here/wait_ready.py" "$bootstrap" "${1:-1}" "$brokers"; }

running=0
for i in $(seq 1 "$brokers"); do
  pf="$(node_dir "$i")/kafka.pid"
  if [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null; then running=$((running + 1)); fi
done
if [ "$running" = "$brokers" ] && ready 5; then
  echo "kafka: already running ($brokers node(s)) on $bootstrap"; exit 0
fi
if [ "$running" = 0 ] && ready 1 2>/dev/null; then
  echo "kafka: a broker already answers on $bootstrap; reusing it"; exit 0
fi

fetch
cp_="$cache/libs/*"

replication=$(( brokers < 3 ? brokers : 3 ))
min_isr=$(( replication >= 3 ? 2 : 1 ))
scram_args=()
if [ "$security" = sasl_ssl ]; then
  # CA, broker certificate and one SCRAM user per principal; made once, kept in secrets/.
  "$python" "$here/secure.py" init "$secrets" "$brokers"
  eval "$("$python" "$here/secure.py" admin-env "$secrets")"
  mapfile -t scram_args < <("$python" "$here/secure.py" scram-args "$secrets")
fi

cluster_id=""
for i in $(seq 1 "$brokers"); do
  [ -f "$(node_dir "$i")/log/meta.properties" ] && continue
  # What `StorageTool random-uuid` prints (a random UUID, URL-safe base64, no padding, not
  # starting with "-"), without starting a JVM for it.
  cluster_id="${cluster_id:-$("$python" -c 'import base64, uuid
while (u := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"): pass
print(u)')}"
done
java_opts() {  # node dir -> jopts
  # PASSK_KAFKA_JAVA_OPTS: more JVM options, as words (`passk ci` starts a short-lived
  # broker with the quick compiler only, on a small machine the JIT threads' CPU is its own).
  read -r -a extra_jopts <<< "${PASSK_KAFKA_JAVA_OPTS:-}"
  jopts=(-Xms256m "-Xmx$heap" -XX:+UseG1GC "${extra_jopts[@]}" -Djava.awt.headless=true
         -Dkafka.logs.dir="$1/logs" -Dlog4j2.configurationFile="$here/log4j2.yaml")
}
# Every node configured and formatted first, then all started together, so no node waits
# long for a quorum that is still being formatted.
for i in $(seq 1 "$brokers"); do
  dir="$(node_dir "$i")"; p=$((port + i - 1)); c=$((cport + i - 1))
  pf="$dir/kafka.pid"
  if [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null; then continue; fi
  mkdir -p "$dir/logs" "$dir/log"
  props="$dir/server.properties"
  sed -e "s#@NODE_ID@#$i#g" -e "s#@VOTERS@#$voters#g" -e "s#@DATA_DIR@#$dir/log#g" \
      -e "s#@REPLICATION@#$replication#g" -e "s#@MIN_ISR@#$min_isr#g" \
      "$here/server.properties.in" > "$props"
  if [ "$security" = sasl_ssl ]; then
    "$python" "$here/secure.py" listeners "$secrets" "$p" "$c" >> "$props"
  else
    cat >> "$props" <<PROPS
listeners=PLAINTEXT://127.0.0.1:$p,CONTROLLER://127.0.0.1:$c
advertised.listeners=PLAINTEXT://127.0.0.1:$p
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
PROPS
  fi
  # PASSK_KAFKA_SERVER_PROPS: more server properties, one key=value per line (a later
  # line wins); `passk ci` gives its throw-away broker one partition per internal topic.
  if [ -n "${PASSK_KAFKA_SERVER_PROPS:-}" ]; then printf '%s\n' "$PASSK_KAFKA_SERVER_PROPS" >> "$props"; fi
  chmod 600 "$props"
  if [ ! -f "$dir/log/meta.properties" ]; then
    java_opts "$dir"
    java "${jopts[@]}" -cp "$cp_" kafka.tools.StorageTool format \
         -t "$cluster_id" -c "$props" "${scram_args[@]}" >"$dir/logs/format.out" 2>&1
    echo "kafka: formatted node $i storage (cluster $cluster_id)"
  fi
done
for i in $(seq 1 "$brokers"); do
  dir="$(node_dir "$i")"; pf="$dir/kafka.pid"
  if [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null; then continue; fi
  java_opts "$dir"
  nohup java "${jopts[@]}" -cp "$cp_" kafka.Kafka "$dir/server.properties" \
        >"$dir/logs/stdout.log" 2>&1 &
  echo $! > "$pf"
done
if ! ready "$ready_s"; then
  echo "kafka: $brokers node(s) did not answer within $ready_s s; see $data/" >&2
  tail -n 30 "$(node_dir 1)/logs/server.log" >&2 || true
  exit 1
fi
for i in $(seq 1 "$brokers"); do  # a node can give up on a slow quorum after registering
  if ! kill -0 "$(cat "$(node_dir "$i")/kafka.pid")" 2>/dev/null; then
    echo "kafka: node $i exited during start-up; see $(node_dir "$i")/logs/server.log" >&2
    exit 1
  fi
done
if [ "$security" = sasl_ssl ]; then
  KAFKA_BOOTSTRAP_SERVERS="$bootstrap" "$python" "$here/secure.py" acls "$secrets"
fi
if [ -n "${PASSK_KAFKA_STARTED_MARK:-}" ]; then touch "$PASSK_KAFKA_STARTED_MARK"; fi
echo "kafka: Apache Kafka $version up on $bootstrap ($brokers node(s), $security," \
     "replication $replication, min.insync.replicas $min_isr)"
