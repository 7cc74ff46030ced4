#!/usr/bin/env bash
# A throw-away single-node Apache Kafka 3.9 broker (KRaft: broker and controller in one JVM) on
# loopback, for linerate's tests, benchmarks and anyone trying `linerate flows --kafka`.
#
#   scripts/kafka.sh fetch                     fetch the jars (Maven Central) into the cache
#   scripts/kafka.sh start [--owner PID]       start a broker; prints KAFKA_BROKER=, KAFKA_DIR=,
#                                              KAFKA_PID= lines (eval them); --owner: stop it
#                                              when process PID ends (tests pass their own PID)
#   scripts/kafka.sh stop DIR                  stop the broker of DIR by its PID, wait for it to
#                                              end, and remove DIR
#   scripts/kafka.sh topic DIR NAME [PARTS]    create topic NAME with PARTS partitions (default 4)
#   scripts/kafka.sh consume DIR TOPIC [ARGS]  Kafka's console consumer, from the beginning
#
# The jars (org.apache.kafka:kafka_2.13 and kafka-tools 3.9.1 with slf4j-reload4j, ~105 jars,
# ~56 MB) come from Maven Central through `mvn dependency:copy-dependencies` (scripts/
# kafka-pom.xml) once, into ${LINERATE_CACHE:-~/.cache/linerate}/kafka-3.9.1. Each broker runs
# in its own folder made by mktemp -d (configuration, data, server.log, pid), on two free
# loopback ports (clients and controller). Topics are created on first use with
# ${KAFKA_PARTITIONS:-4} partitions. KAFKA_CPUS (a taskset list, e.g. 0) pins the broker to those
# cores from its start. Needs Java 17 and Maven (scripts/setup.sh --tests installs them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=3.9.1
cache=${LINERATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linerate}/kafka-$version
libs=$cache/libs
die() { echo "kafka.sh: $*" >&2; exit 1; }

fetch() {
  [ -f "$libs/.complete" ] && return 0
  command -v java >/dev/null || die "java not found (bash scripts/setup.sh --tests installs openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "mvn not found (bash scripts/setup.sh --tests installs maven)"
  mkdir -p "$cache"
  # One fetch at a time (tests of several binaries may start brokers at once); the jars go to a
  # fresh folder that is renamed into place when complete.
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -f "$libs/.complete" ]; then
    local tmp
    tmp=$(mktemp -d "$cache/libs.XXXXXXXX")
    echo "kafka.sh: fetching Apache Kafka $version from Maven Central into $cache ..." >&2
    if ! mvn -q -B -f "$here/kafka-pom.xml" \
      org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
      -DoutputDirectory="$tmp" -DincludeScope=runtime >"$cache/mvn.log" 2>&1; then
      rm -rf "$tmp"
      tail -n 20 "$cache/mvn.log" >&2
      die "mvn could not fetch the Kafka jars (log: $cache/mvn.log)"
    fi
    touch "$tmp/.complete"
    rm -rf "$libs"
    mv "$tmp" "$libs"
  fi
  exec 9>&-
}

# Two distinct free loopback ports.
free_ports() {
  python3 - <<'EOF'
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))
EOF
}

# The broker's PID if DIR holds a running broker of ours, else nothing.
broker_pid() {
  local dir=$1 pid
  [ -f "$dir/pid" ] || return 0
  pid=$(cat "$dir/pid")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  # The PID must still be our java, started on this folder's configuration (not a reused PID).
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/server.properties"; then
    echo "$pid"
  fi
}

start_once() {
  local dir=$1 ports port cport id
  ports=$(free_ports)
  port=${ports% *}
  cport=${ports#* }
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=${KAFKA_PARTITIONS:-4}
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
EOF
  cat >"$dir/log4j.properties" <<EOF
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$dir/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
EOF
  # Command-line tools (topic, consume) log warnings to standard error.
  cat >"$dir/tools-log4j.properties" <<EOF
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
  # A cluster id is 16 random bytes in URL-safe base64 without padding (what
  # `kafka-storage.sh random-uuid` prints), made here to save a JVM start. Like Kafka's own
  # Uuid.randomUuid, never one that starts with '-': the storage tool's argument parser takes
  # it for an option ("--cluster-id: expected one argument"), which failed one start in 64.
  id=-
  while [[ $id == -* ]]; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  java -cp "$libs/*" -Dlog4j.configuration="file:$dir/tools-log4j.properties" \
    kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" \
    >"$dir/format.log" 2>&1 </dev/null || { cat "$dir/format.log" >&2; die "formatting the broker's storage in $dir failed"; }
  # KAFKA_CPUS pins the broker from its first instruction: every JVM thread inherits it (pinning
  # a running JVM's threads one by one, `taskset -a -p`, races with the threads it starts and
  # ends, and fails when one ends in between).
  local pin=()
  [ -n "${KAFKA_CPUS:-}" ] && pin=(taskset -c "$KAFKA_CPUS")
  # shellcheck disable=SC2086
  "${pin[@]}" java ${KAFKA_JVM_OPTS:--Xms256m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20} \
    -Djava.awt.headless=true -Dlog4j.configuration="file:$dir/log4j.properties" \
    -cp "$libs/*" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"
  echo "127.0.0.1:$port" >"$dir/broker"
  local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      return 1
    fi
    if grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null &&
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.3
  done
  kill -KILL "$pid" 2>/dev/null || true
  die "the broker in $dir did not start within ${KAFKA_START_TIMEOUT:-120} s (log: $dir/server.log)"
}

start() {
  local owner=""
  if [ "${1:-}" = --owner ]; then
    owner=${2:?--owner needs a PID}
    [[ $owner =~ ^[0-9]+$ ]] || die "--owner: '$owner' is not a PID"
  fi
  fetch
  local dir try
  dir=$(mktemp -d "${TMPDIR:-/tmp}/linerate-kafka.XXXXXXXX")
  for try in 1 2 3; do
    if start_once "$dir"; then
      break
    fi
    # The ports picked may have been taken before the broker bound them: try other ones.
    if [ $try = 3 ] || ! grep -q "Address already in use" "$dir/server.log" "$dir/stdout.log" 2>/dev/null; then
      tail -n 30 "$dir/server.log" "$dir/stdout.log" >&2 2>/dev/null || true
      die "the broker in $dir exited during start-up (log above)"
    fi
    rm -rf "$dir/data" "$dir/server.log" "$dir/stdout.log"
  done
  if [ -n "$owner" ]; then
    # Stops the broker once the owner is gone, whatever way it ended.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
      exec bash "$3" stop "$4"' watch "$owner" "$(cat "$dir/pid")" "$here/kafka.sh" "$dir" \
      </dev/null >/dev/null 2>&1 &
  fi
  echo "KAFKA_BROKER=$(cat "$dir/broker")"
  echo "KAFKA_DIR=$dir"
  echo "KAFKA_PID=$(cat "$dir/pid")"
}

stop() {
  local dir=${1:?stop needs the folder of the broker (KAFKA_DIR)}
  [ -d "$dir" ] || return 0
  [ -f "$dir/server.properties" ] || die "$dir is not a broker folder made by kafka.sh"
  local pid
  pid=$(broker_pid "$dir")
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + ${KAFKA_STOP_TIMEOUT:-30}))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "kafka.sh: broker $pid did not stop within ${KAFKA_STOP_TIMEOUT:-30} s: killed" >&2
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
  fi
  rm -rf "$dir"
}

cmd=${1:-}
shift || true
case "$cmd" in
  fetch) fetch; echo "$libs" ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  topic)
    dir=${1:?topic DIR NAME [PARTITIONS]}
    name=${2:?topic DIR NAME [PARTITIONS]}
    java -cp "$libs/*" -Dlog4j.configuration="file:$dir/tools-log4j.properties" \
      org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cat "$dir/broker")" \
      --create --topic "$name" --partitions "${3:-4}" --replication-factor 1
    ;;
  consume)
    dir=${1:?consume DIR TOPIC [ARGS]}
    topic=${2:?consume DIR TOPIC [ARGS]}
    shift 2
    java -cp "$libs/*" -Dlog4j.configuration="file:$dir/tools-log4j.properties" \
      org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$(cat "$dir/broker")" \
      --topic "$topic" --from-beginning "$@"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
