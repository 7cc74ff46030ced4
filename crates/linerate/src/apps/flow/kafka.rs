//! Flow records into Apache Kafka (`flows --kafka BROKERS/TOPIC`), through librdkafka.
//!
//! Each record is one message: the value is the record's JSON object as `-w x.jsonl` writes it
//! (every field, [`super::record::json_object`]) plus `"probe"`, the key is the flow's canonical
//! bidirectional key ([`key_text`]), the same for both directions and on every probe, so a
//! topic's partitions split the flows and every record of a flow lands on one partition.
//!
//! The packet path never waits for the broker: [`KafkaExporter::records`] only pushes the
//! records (plain `Copy` values) into a bounded lock-free queue, and counts them `queue_full`
//! when it is full. A producer thread formats them, hands them to librdkafka (which batches,
//! compresses and sends them on its own threads) and counts the broker's acknowledgements and
//! failures by reason in its delivery callback. [`KafkaExporter::finish`] waits up to the
//! timeout for what is still unacknowledged, then purges it and counts it failed: every record
//! handed over ends as acknowledged or failed, never unaccounted.

use super::record::{json_object, push_ip, push_u64, Field, FlowRecord};
use crate::stats::group;
use crossbeam_queue::ArrayQueue;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use rdkafka::ClientContext;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// librdkafka settings linerate sets before the user's `--kafka-opt` ones (which win).
pub const DEFAULT_SETTINGS: [(&str, &str); 5] = [
    // Acknowledged only once every in-sync replica has the record.
    ("acks", "all"),
    // Cheap to compress and to decompress; JSON records shrink ~3-5x.
    ("compression.type", "lz4"),
    // Wait up to 5 ms to fill a batch: few requests, little delay.
    ("linger.ms", "5"),
    // The Java client's default partitioner: the same key goes to the same partition whichever
    // client (this probe, another linerate, a Java or Kafka Streams producer) wrote it.
    ("partitioner", "murmur2_random"),
    // Records librdkafka holds before produce() answers "queue full".
    ("queue.buffering.max.messages", "100000"),
];

/// How long [`KafkaExporter::records`], when it waits for room, waits for a producer thread that
/// takes no record at all before it counts the rest `queue_full`.
pub const STALL: Duration = Duration::from_secs(1);

/// Records the queue between the packet path and the producer thread holds by default: as many
/// as a flow table of flows' default size (`--max-flows 256k`) holds, so that the end of the
/// input, which reports every open flow at once, hands them all over without waiting for the
/// producer (136 bytes a record: 34 MiB).
pub const DEFAULT_QUEUE: usize = 262_144;

/// Why a record did not reach the topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Failure {
    /// No broker could be reached when it failed (connection refused, all brokers down).
    Unreachable = 0,
    /// Brokers were up but did not acknowledge it in time (librdkafka's `message.timeout.ms`,
    /// or flows' `--kafka-timeout` at the end).
    TimedOut,
    /// Larger than the producer's or the broker's largest message.
    TooLarge,
    /// The queue to the producer (or librdkafka's) was full: the broker was slower than the
    /// flow records came.
    QueueFull,
    /// Any other error (authorization, unknown topic, ...): see the last error.
    Other,
}

impl Failure {
    /// Number of reasons.
    pub const COUNT: usize = 5;
    /// All reasons, in counter order.
    pub const ALL: [Failure; Self::COUNT] = [
        Failure::Unreachable,
        Failure::TimedOut,
        Failure::TooLarge,
        Failure::QueueFull,
        Failure::Other,
    ];
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Unreachable => "unreachable",
            Failure::TimedOut => "timed_out",
            Failure::TooLarge => "too_large",
            Failure::QueueFull => "queue_full",
            Failure::Other => "other",
        }
    }
}

/// Errors of the Kafka exporter.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// The target is not `BROKERS/TOPIC`.
    #[error("'{0}': expected BROKERS/TOPIC, with BROKERS host:port[,host:port...] (e.g. 127.0.0.1:9092/flows)")]
    BadTarget(String),
    /// The topic name is not one Kafka accepts.
    #[error("topic '{0}': 1 to 249 characters among a-z A-Z 0-9 . _ -")]
    BadTopic(String),
    /// A `key=value` setting is malformed.
    #[error("'{0}': expected key=value (a librdkafka setting, e.g. compression.type=zstd)")]
    BadSetting(String),
    /// The probe id is empty, too long or has control characters.
    #[error("probe id '{0}': 1 to 255 characters, no control characters")]
    BadProbe(String),
    /// librdkafka refused the configuration (unknown setting, bad value).
    #[error("librdkafka refused the configuration: {0}")]
    Config(String),
    /// No broker answered the first metadata request in time.
    #[error("no broker of {brokers} answered within {secs} s: {reason}")]
    Unreachable {
        /// The bootstrap brokers.
        brokers: String,
        /// The time waited.
        secs: f64,
        /// What librdkafka said.
        reason: String,
    },
    /// The topic cannot be produced to.
    #[error("topic '{topic}' on {brokers}: {reason}")]
    Topic {
        /// The topic.
        topic: String,
        /// The bootstrap brokers.
        brokers: String,
        /// Why.
        reason: String,
    },
    /// The producer thread could not be started.
    #[error("cannot start the Kafka producer thread: {0}")]
    Thread(std::io::Error),
}

/// Where and how to export.
#[derive(Clone, Debug)]
pub struct KafkaOptions {
    /// Bootstrap brokers, `host:port[,host:port...]`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// This probe's name, in every record's `probe` member.
    pub probe: String,
    /// librdkafka settings, applied after [`DEFAULT_SETTINGS`] (so they override them).
    pub settings: Vec<(String, String)>,
    /// How long to wait for a broker at the start, and for acknowledgements at the end.
    pub timeout: Duration,
    /// Records the queue between the packet path and the producer thread holds.
    pub queue: usize,
}

impl KafkaOptions {
    /// Options for `BROKERS/TOPIC`, with the defaults (10 s timeout, [`DEFAULT_QUEUE`]).
    pub fn parse(target: &str, probe: &str) -> Result<KafkaOptions, KafkaError> {
        let (brokers, topic) = target
            .split_once('/')
            .ok_or_else(|| KafkaError::BadTarget(target.into()))?;
        for b in brokers.split(',') {
            let ok = match b.rsplit_once(':') {
                Some((h, p)) => !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0),
                None => false,
            };
            if !ok {
                return Err(KafkaError::BadTarget(target.into()));
            }
        }
        let topic_ok = !topic.is_empty()
            && topic.len() <= 249
            && topic != "."
            && topic != ".."
            && topic
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
        if !topic_ok {
            return Err(KafkaError::BadTopic(topic.into()));
        }
        if probe.is_empty() || probe.len() > 255 || probe.chars().any(char::is_control) {
            return Err(KafkaError::BadProbe(probe.into()));
        }
        Ok(KafkaOptions {
            brokers: brokers.into(),
            topic: topic.into(),
            probe: probe.into(),
            settings: Vec::new(),
            timeout: Duration::from_secs(10),
            queue: DEFAULT_QUEUE,
        })
    }

    /// Adds a `key=value` librdkafka setting.
    pub fn set(&mut self, kv: &str) -> Result<(), KafkaError> {
        match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                self.settings.push((k.trim().into(), v.trim().into()));
                Ok(())
            }
            _ => Err(KafkaError::BadSetting(kv.into())),
        }
    }

    /// `BROKERS/TOPIC`, as given.
    pub fn target(&self) -> String {
        format!("{}/{}", self.brokers, self.topic)
    }
}

/// This machine's host name (the default probe id), or `linerate` if it has none.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "linerate".into())
}

/// Appends the canonical key of `r`'s flow as text:
/// `VLAN|PROTO|LOWER_ADDR|LOWER_PORT|HIGHER_ADDR|HIGHER_PORT`, e.g. `0|6|10.0.0.1|40000|10.0.0.2|80`
/// (ICMP: the echo identifier, or type×256+code, in both port places). Endpoints are ordered by
/// address bytes, then port, so both directions and every probe give the same bytes.
pub fn key_text(r: &FlowRecord, out: &mut String) {
    let k = r.key();
    push_u64(out, k.vlan.into());
    out.push('|');
    push_u64(out, k.proto.into());
    out.push('|');
    push_ip(out, &k.a, r.v6);
    out.push('|');
    push_u64(out, k.pa.into());
    out.push('|');
    push_ip(out, &k.b, r.v6);
    out.push('|');
    push_u64(out, k.pb.into());
}

/// What the exporter did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KafkaStats {
    /// Records the flow table handed over.
    pub records: u64,
    /// Records librdkafka took (queued to be sent).
    pub produced: u64,
    /// Records the broker acknowledged.
    pub acked: u64,
    /// Bytes (key and value) of the acknowledged records.
    pub acked_bytes: u64,
    /// Records that failed, by [`Failure`].
    pub failed: [u64; Failure::COUNT],
}

impl KafkaStats {
    /// Failed records, all reasons.
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().sum()
    }

    /// Records neither acknowledged nor failed yet (in a queue or in flight).
    pub fn pending(&self) -> u64 {
        self.records
            .saturating_sub(self.acked + self.failed_total())
    }

    /// `unreachable 3, queue_full 2` for the reasons that counted, or `none`.
    pub fn failures_text(&self) -> String {
        let v: Vec<String> = Failure::ALL
            .iter()
            .filter(|f| self.failed[**f as usize] > 0)
            .map(|f| format!("{} {}", f.name(), group(self.failed[*f as usize])))
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    /// Prometheus text of these counters, labelled with the topic and the probe.
    pub fn prometheus(&self, topic: &str, probe: &str) -> String {
        let l = format!(
            "topic=\"{}\",probe=\"{}\"",
            prom_escape(topic),
            prom_escape(probe)
        );
        let mut o = String::with_capacity(1024);
        let mut c = |name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP linerate_flows_kafka_{name} {help}");
            let _ = writeln!(o, "# TYPE linerate_flows_kafka_{name} counter");
            let _ = writeln!(o, "linerate_flows_kafka_{name}{{{l}}} {v}");
        };
        c(
            "records_total",
            "Flow records handed to the Kafka exporter.",
            self.records,
        );
        c(
            "produced_total",
            "Records librdkafka took to send.",
            self.produced,
        );
        c(
            "acked_total",
            "Records the broker acknowledged.",
            self.acked,
        );
        c(
            "acked_bytes_total",
            "Key and value bytes of acknowledged records.",
            self.acked_bytes,
        );
        let _ = writeln!(
            o,
            "# HELP linerate_flows_kafka_failed_total Records that did not reach the topic, by reason."
        );
        let _ = writeln!(o, "# TYPE linerate_flows_kafka_failed_total counter");
        for f in Failure::ALL {
            let _ = writeln!(
                o,
                "linerate_flows_kafka_failed_total{{{l},reason=\"{}\"}} {}",
                f.name(),
                self.failed[f as usize]
            );
        }
        let _ = writeln!(
            o,
            "# HELP linerate_flows_kafka_pending Records neither acknowledged nor failed yet."
        );
        let _ = writeln!(o, "# TYPE linerate_flows_kafka_pending gauge");
        let _ = writeln!(o, "linerate_flows_kafka_pending{{{l}}} {}", self.pending());
        o
    }
}

fn prom_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counters shared by the packet path, the producer thread and librdkafka's callbacks.
#[derive(Default)]
struct Shared {
    records: AtomicU64,
    /// Records the producer thread took off the queue (its progress).
    taken: AtomicU64,
    produced: AtomicU64,
    acked: AtomicU64,
    acked_bytes: AtomicU64,
    failed: [AtomicU64; Failure::COUNT],
    /// librdkafka said all brokers are down, and no acknowledgement came since.
    down: AtomicBool,
    /// The last error librdkafka reported (connection refused, ...).
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, f: Failure, n: u64) {
        if n > 0 {
            self.failed[f as usize].fetch_add(n, Ordering::Relaxed);
        }
    }
    /// Why a record that got no acknowledgement failed: unreachable when the brokers are down.
    fn unanswered(&self) -> Failure {
        if self.down.load(Ordering::Relaxed) {
            Failure::Unreachable
        } else {
            Failure::TimedOut
        }
    }
    fn note(&self, e: String) {
        if let Ok(mut l) = self.last_error.lock() {
            *l = Some(e);
        }
    }
    fn stats(&self) -> KafkaStats {
        let mut failed = [0; Failure::COUNT];
        for (f, a) in failed.iter_mut().zip(&self.failed) {
            *f = a.load(Ordering::Relaxed);
        }
        KafkaStats {
            records: self.records.load(Ordering::Relaxed),
            produced: self.produced.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            acked_bytes: self.acked_bytes.load(Ordering::Relaxed),
            failed,
        }
    }
}

fn classify(code: RDKafkaErrorCode, shared: &Shared) -> Failure {
    use RDKafkaErrorCode as C;
    match code {
        C::MessageSizeTooLarge | C::InvalidMessageSize => Failure::TooLarge,
        C::QueueFull => Failure::QueueFull,
        C::MessageTimedOut
        | C::PurgeQueue
        | C::PurgeInflight
        | C::AllBrokersDown
        | C::BrokerTransportFailure
        | C::Resolve
        | C::RequestTimedOut
        | C::OperationTimedOut
        | C::NetworkException => shared.unanswered(),
        _ => Failure::Other,
    }
}

/// librdkafka's callbacks: errors and delivery reports.
struct Ctx(Arc<Shared>);

impl ClientContext for Ctx {
    fn error(&self, error: RdError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.0.down.store(true, Ordering::Relaxed);
        }
        self.0.note(reason.to_string());
    }
    // librdkafka's log lines go nowhere: what matters reaches `error` and the counters.
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, _: &str) {}
}

impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => {
                self.0.down.store(false, Ordering::Relaxed);
                self.0.acked.fetch_add(1, Ordering::Relaxed);
                let n = m.payload_len() + m.key().map_or(0, <[u8]>::len);
                self.0.acked_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err((e, _)) => {
                let f = match e.rdkafka_error_code() {
                    Some(code) => classify(code, &self.0),
                    None => Failure::Other,
                };
                if f == Failure::Other || f == Failure::TooLarge {
                    self.0.note(e.to_string());
                }
                self.0.fail(f, 1);
            }
        }
    }
}

/// What the producer thread is told.
#[derive(Default)]
struct Control {
    /// No more records will come: send what is queued, then end when all are answered.
    done: AtomicBool,
    /// End now: purge what is unanswered and count it failed.
    abort: AtomicBool,
}

/// Exports flow records to a Kafka topic; see the module documentation.
pub struct KafkaExporter {
    queue: Arc<ArrayQueue<FlowRecord>>,
    shared: Arc<Shared>,
    ctl: Arc<Control>,
    thread: Option<JoinHandle<()>>,
    opts: KafkaOptions,
    note: Option<String>,
    /// When the queue is full, wait for the producer thread (file inputs, the final flush)
    /// instead of counting `queue_full` (live packets).
    wait_when_full: AtomicBool,
}

impl KafkaExporter {
    /// Connects: creates the producer, waits up to `opts.timeout` for a broker to describe the
    /// topic (so a wrong address fails here, before any packet is read), and starts the
    /// producer thread.
    pub fn connect(opts: KafkaOptions) -> Result<KafkaExporter, KafkaError> {
        let shared = Arc::new(Shared::default());
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &opts.brokers);
        cfg.set("client.id", format!("linerate-{}", opts.probe));
        for (k, v) in DEFAULT_SETTINGS {
            cfg.set(k, v);
        }
        for (k, v) in &opts.settings {
            cfg.set(k, v);
        }
        let producer: BaseProducer<Ctx> = cfg
            .create_with_context(Ctx(shared.clone()))
            .map_err(|e| KafkaError::Config(e.to_string()))?;
        let md = match producer
            .client()
            .fetch_metadata(Some(&opts.topic), opts.timeout)
        {
            Ok(md) => md,
            Err(e) => {
                // Serve the error events (connection refused, name not resolved, ...).
                producer.poll(Duration::ZERO);
                let said = shared.last_error.lock().ok().and_then(|l| l.clone());
                return Err(KafkaError::Unreachable {
                    brokers: opts.brokers.clone(),
                    secs: opts.timeout.as_secs_f64(),
                    reason: match said {
                        Some(s) => format!("{s} ({e})"),
                        None => e.to_string(),
                    },
                });
            }
        };
        let mut note = None;
        if let Some(t) = md.topics().iter().find(|t| t.name() == opts.topic) {
            if let Some(err) = t.error() {
                match RDKafkaErrorCode::from(err) {
                    // Being created: it has no leader for a moment.
                    RDKafkaErrorCode::LeaderNotAvailable => {}
                    // A metadata request does not create topics, a first record does where the
                    // broker allows it (auto.create.topics.enable); where it does not, records
                    // fail (counted) and the note says why.
                    RDKafkaErrorCode::UnknownTopicOrPartition => {
                        note = Some(format!(
                            "topic '{}' does not exist on {} yet: the first record creates it if \
                             the broker allows it (auto.create.topics.enable), else create it \
                             (kafka-topics.sh --create)",
                            opts.topic, opts.brokers
                        ));
                    }
                    code => {
                        return Err(KafkaError::Topic {
                            topic: opts.topic.clone(),
                            brokers: opts.brokers.clone(),
                            reason: code.to_string(),
                        })
                    }
                }
            }
        }
        let queue = Arc::new(ArrayQueue::new(opts.queue.max(1)));
        let ctl = Arc::new(Control::default());
        let extra = format!(
            ",\"probe\":{}",
            serde_json::to_string(&opts.probe).unwrap_or_else(|_| "\"\"".into())
        );
        let thread = {
            let (queue, shared, ctl, topic) = (
                queue.clone(),
                shared.clone(),
                ctl.clone(),
                opts.topic.clone(),
            );
            std::thread::Builder::new()
                .name("kafka".into())
                .spawn(move || produce_loop(producer, &queue, &shared, &ctl, &topic, &extra))
                .map_err(KafkaError::Thread)?
        };
        Ok(KafkaExporter {
            queue,
            shared,
            ctl,
            thread: Some(thread),
            opts,
            note,
            wait_when_full: AtomicBool::new(false),
        })
    }

    /// Something the user should know before records flow (the topic does not exist yet).
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Hands records over. On the live packet path (the default) it never waits and never
    /// allocates: records that do not fit in the queue are counted failed (`queue_full`). With
    /// [`Self::set_wait_when_full`] (file inputs, where waiting loses no packet, and the final
    /// flush) it waits for room while the producer thread makes progress, and gives up
    /// (`queue_full`) once it made none for [`STALL`].
    pub fn records(&self, recs: &[FlowRecord]) {
        let wait = self.wait_when_full.load(Ordering::Relaxed);
        let mut full = 0u64;
        let mut stalled = false;
        for r in recs {
            let mut r = *r;
            let mut since: Option<(Instant, u64)> = None;
            loop {
                match self.queue.push(r) {
                    Ok(()) => break,
                    Err(back) => r = back,
                }
                if !wait || stalled {
                    full += 1;
                    break;
                }
                let taken = self.shared.taken.load(Ordering::Relaxed);
                match since {
                    Some((t, n)) if n == taken => {
                        if t.elapsed() >= STALL {
                            stalled = true;
                            full += 1;
                            break;
                        }
                    }
                    _ => since = Some((Instant::now(), taken)),
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        self.shared
            .records
            .fetch_add(recs.len() as u64, Ordering::Relaxed);
        self.shared.fail(Failure::QueueFull, full);
    }

    /// Whether [`Self::records`] waits for room when the queue is full (see there).
    pub fn set_wait_when_full(&self, on: bool) {
        self.wait_when_full.store(on, Ordering::Relaxed);
    }

    /// The counters now (any thread may read them while records flow).
    pub fn stats(&self) -> KafkaStats {
        self.shared.stats()
    }

    /// A handle to read the counters from another thread (metrics).
    pub fn stats_handle(&self) -> impl Fn() -> KafkaStats + Send + Sync + 'static {
        let s = self.shared.clone();
        move || s.stats()
    }

    /// The options it runs with.
    pub fn options(&self) -> &KafkaOptions {
        &self.opts
    }

    /// The last error librdkafka reported, if any.
    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.lock().ok().and_then(|l| l.clone())
    }

    /// No more records: waits up to the timeout for every record to be acknowledged, then
    /// purges what is left and counts it failed (`unreachable` if no broker is up, else
    /// `timed_out`). `stop` (a signal) ends the wait early the same way, within ~20 ms.
    pub fn finish(&mut self, stop: &AtomicBool) -> KafkaStats {
        let Some(t) = self.thread.take() else {
            return self.stats();
        };
        self.ctl.done.store(true, Ordering::Release);
        let deadline = Instant::now() + self.opts.timeout;
        while !t.is_finished() {
            if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                self.ctl.abort.store(true, Ordering::Release);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = t.join();
        // The thread is gone (it ended, or panicked): whatever it left is failed.
        let s = self.shared.stats();
        let left = s.pending();
        self.shared.fail(self.shared.unanswered(), left);
        self.shared.stats()
    }
}

impl Drop for KafkaExporter {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.ctl.abort.store(true, Ordering::Release);
            let _ = self.finish(&AtomicBool::new(true));
        }
    }
}

/// The producer thread: queue → JSON → librdkafka, and delivery callbacks, until told to end.
fn produce_loop(
    producer: BaseProducer<Ctx>,
    queue: &ArrayQueue<FlowRecord>,
    shared: &Shared,
    ctl: &Control,
    topic: &str,
    extra: &str,
) {
    // The record as before `--fields` had Ethernet addresses and TTLs (read only on request).
    let fields: Vec<Field> = Field::ALL
        .iter()
        .map(|f| f.0)
        .filter(|f| !f.needs_extra())
        .collect();
    let mut value = String::with_capacity(640);
    let mut cell = String::with_capacity(64);
    let mut key = String::with_capacity(96);
    // A record librdkafka's full queue refused: retried after serving callbacks.
    let mut held: Option<FlowRecord> = None;
    loop {
        if ctl.abort.load(Ordering::Acquire) {
            break;
        }
        // Read `done` before draining: records pushed before it was set are then all seen.
        let done = ctl.done.load(Ordering::Acquire);
        let mut sent = 0usize;
        while sent < 4096 {
            let r = match held.take() {
                Some(r) => r,
                None => match queue.pop() {
                    Some(r) => {
                        shared.taken.fetch_add(1, Ordering::Relaxed);
                        r
                    }
                    None => break,
                },
            };
            value.clear();
            json_object(&r, &fields, extra, &mut value, &mut cell);
            key.clear();
            key_text(&r, &mut key);
            let rec = BaseRecord::to(topic)
                .key(key.as_bytes())
                .payload(value.as_bytes());
            match producer.send(rec) {
                Ok(()) => {
                    shared.produced.fetch_add(1, Ordering::Relaxed);
                    sent += 1;
                }
                Err((e, _)) => {
                    let code = e.rdkafka_error_code();
                    if code == Some(RDKafkaErrorCode::QueueFull) {
                        // librdkafka holds queue.buffering.max.messages already: let it send
                        // (poll below), the packet path's queue absorbs the wait.
                        held = Some(r);
                        break;
                    }
                    let f = code.map_or(Failure::Other, |c| classify(c, shared));
                    shared.note(e.to_string());
                    shared.fail(f, 1);
                }
            }
        }
        if done && held.is_none() && queue.is_empty() && producer.in_flight_count() == 0 {
            break;
        }
        let idle = sent == 0 || held.is_some();
        producer.poll(if idle {
            Duration::from_millis(5)
        } else {
            Duration::ZERO
        });
    }
    // Told to abort (or done): nothing more will be acknowledged in time.
    let mut left = held.is_some() as u64;
    while queue.pop().is_some() {
        left += 1;
    }
    shared.fail(shared.unanswered(), left);
    if producer.in_flight_count() > 0 {
        producer.purge(PurgeConfig::default().queue().inflight());
        let t = Instant::now();
        while producer.in_flight_count() > 0 && t.elapsed() < Duration::from_secs(1) {
            producer.poll(Duration::from_millis(10));
        }
    }
    producer.poll(Duration::ZERO);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::apps::flow::record::{EndReason, State};

    fn rec(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: u8) -> FlowRecord {
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&src);
        let mut d = [0u8; 16];
        d[..4].copy_from_slice(&dst);
        FlowRecord {
            start_ns: 1_700_000_000_000_000_000,
            last_ns: 1_700_000_001_000_000_000,
            src: s,
            dst: d,
            sport,
            dport,
            proto,
            v6: false,
            vlan: 7,
            src_pkts: 3,
            dst_pkts: 2,
            src_bytes: 300,
            dst_bytes: 200,
            src_tcp_flags: 0,
            dst_tcp_flags: 0,
            icmp_type: 0,
            icmp_code: 0,
            state: State::Con,
            reason: EndReason::Idle,
            dir_certain: false,
            encap: 0,
            side_ns: [[1_700_000_000_000_000_000, 1_700_000_001_000_000_000]; 2],
            side_icmp: [[0; 2]; 2],
            extra: Default::default(),
        }
    }

    #[test]
    fn the_key_is_the_same_both_ways() {
        let (mut a, mut b) = (String::new(), String::new());
        key_text(&rec([10, 0, 0, 2], 80, [10, 0, 0, 1], 40000, 6), &mut a);
        key_text(&rec([10, 0, 0, 1], 40000, [10, 0, 0, 2], 80, 6), &mut b);
        assert_eq!(a, "7|6|10.0.0.1|40000|10.0.0.2|80");
        assert_eq!(a, b);
        // Same addresses, ports decide.
        let (mut c, mut d) = (String::new(), String::new());
        key_text(&rec([10, 0, 0, 1], 9, [10, 0, 0, 1], 5, 17), &mut c);
        key_text(&rec([10, 0, 0, 1], 5, [10, 0, 0, 1], 9, 17), &mut d);
        assert_eq!(c, "7|17|10.0.0.1|5|10.0.0.1|9");
        assert_eq!(c, d);
    }

    #[test]
    fn targets_settings_and_probe_ids_are_checked() {
        let o = KafkaOptions::parse("127.0.0.1:9092,[::1]:9093/flows.v1", "tap-1").unwrap();
        assert_eq!(o.brokers, "127.0.0.1:9092,[::1]:9093");
        assert_eq!(o.topic, "flows.v1");
        assert_eq!(o.target(), "127.0.0.1:9092,[::1]:9093/flows.v1");
        for bad in [
            "127.0.0.1:9092",
            "/flows",
            "127.0.0.1/flows",
            "127.0.0.1:0/flows",
            "127.0.0.1:70000/flows",
            "127.0.0.1:9092,/flows",
        ] {
            assert!(
                matches!(KafkaOptions::parse(bad, "p"), Err(KafkaError::BadTarget(_))),
                "{bad}"
            );
        }
        for bad in [
            "127.0.0.1:9092/",
            "127.0.0.1:9092/a b",
            "127.0.0.1:9092/a/b",
        ] {
            assert!(
                matches!(KafkaOptions::parse(bad, "p"), Err(KafkaError::BadTopic(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            KafkaOptions::parse("h:1/t", ""),
            Err(KafkaError::BadProbe(_))
        ));
        assert!(matches!(
            KafkaOptions::parse("h:1/t", "a\nb"),
            Err(KafkaError::BadProbe(_))
        ));
        let mut o = KafkaOptions::parse("h:1/t", "p").unwrap();
        o.set("compression.type = zstd").unwrap();
        assert_eq!(o.settings, vec![("compression.type".into(), "zstd".into())]);
        assert!(matches!(o.set("acks"), Err(KafkaError::BadSetting(_))));
        assert!(matches!(o.set("=1"), Err(KafkaError::BadSetting(_))));
    }

    #[test]
    fn an_unknown_setting_is_refused_before_any_connection() {
        let mut o = KafkaOptions::parse("127.0.0.1:1/t", "p").unwrap();
        o.set("no.such.setting=1").unwrap();
        let e = KafkaExporter::connect(o).err().unwrap();
        assert!(matches!(e, KafkaError::Config(_)), "{e}");
        assert!(e.to_string().contains("no.such.setting"), "{e}");
    }

    #[test]
    fn an_unreachable_broker_fails_within_the_timeout() {
        // Port 1 on loopback: nothing listens there, connections are refused at once.
        let mut o = KafkaOptions::parse("127.0.0.1:1/t", "p").unwrap();
        o.timeout = Duration::from_millis(1500);
        let t = Instant::now();
        let e = KafkaExporter::connect(o).err().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(matches!(e, KafkaError::Unreachable { .. }), "{e}");
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    }

    #[test]
    fn prometheus_text_has_every_reason() {
        let s = KafkaStats {
            records: 10,
            produced: 9,
            acked: 7,
            acked_bytes: 700,
            failed: [1, 0, 0, 1, 0],
        };
        assert_eq!(s.pending(), 1);
        assert_eq!(s.failures_text(), "unreachable 1, queue_full 1");
        let t = s.prometheus("flows", "tap\"1");
        assert!(
            t.contains("linerate_flows_kafka_acked_total{topic=\"flows\",probe=\"tap\\\"1\"} 7")
        );
        for f in Failure::ALL {
            assert!(t.contains(&format!("reason=\"{}\"", f.name())), "{t}");
        }
        assert!(t.contains("linerate_flows_kafka_pending{topic=\"flows\",probe=\"tap\\\"1\"} 1"));
    }
}
