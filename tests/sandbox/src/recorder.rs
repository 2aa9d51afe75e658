//! Samples the cluster twice a second while the scenarios play: the live progress line, the
//! data behind the timeline picture, and the latest snapshot the player waits on.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use joiner_agent::catalog::Catalog;
use kube::Client;

use crate::cluster::{snapshot, Snapshot};
use crate::pricing::cluster_price;

pub const PERIOD: Duration = Duration::from_millis(500);

/// One point of the timeline.
#[derive(Debug, Clone)]
pub struct Sample {
    pub t: f64,
    pub pending: usize,
    pub running: usize,
    /// EC2 nodes by (capacity type, zone); Fargate nodes are not counted.
    pub nodes: BTreeMap<(String, String), usize>,
    pub dollars_per_hour: f64,
}

impl Sample {
    pub fn node_count(&self) -> usize {
        self.nodes.values().sum()
    }
}

/// Something the player did, drawn as a vertical line on the timeline.
#[derive(Debug, Clone)]
pub struct Marker {
    pub t: f64,
    pub label: String,
}

#[derive(Default)]
struct Inner {
    samples: Vec<Sample>,
    markers: Vec<Marker>,
    latest: Option<(Instant, Snapshot)>,
    last_error: Option<String>,
}

#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    inner: Arc<Mutex<Inner>>,
    tty: bool,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            inner: Arc::default(),
            tty: std::io::stderr().is_terminal(),
        }
    }

    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn mark(&self, label: &str) {
        let t = self.now();
        self.inner.lock().unwrap().markers.push(Marker {
            t,
            label: label.to_string(),
        });
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.inner.lock().unwrap().samples.clone()
    }

    pub fn markers(&self) -> Vec<Marker> {
        self.inner.lock().unwrap().markers.clone()
    }

    /// The most recent snapshot taken at or after `since`.
    pub fn latest_since(&self, since: Instant) -> Option<Snapshot> {
        let g = self.inner.lock().unwrap();
        g.latest
            .as_ref()
            .filter(|(at, _)| *at >= since)
            .map(|(_, s)| s.clone())
    }

    pub fn last_error(&self) -> Option<String> {
        self.inner.lock().unwrap().last_error.clone()
    }

    /// A message on its own line, above the progress line.
    pub fn say(&self, msg: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = writeln!(err, "{msg}");
    }

    /// Samples until the returned handle is aborted.
    pub fn spawn(&self, client: Client, catalog: Arc<Catalog>) -> tokio::task::JoinHandle<()> {
        let rec = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_print = Instant::now() - Duration::from_secs(60);
            loop {
                tick.tick().await;
                let taken = Instant::now();
                match snapshot(&client).await {
                    Ok(s) => {
                        let sample = rec.sample_of(&s, &catalog);
                        let line = progress_line(&sample);
                        {
                            let mut g = rec.inner.lock().unwrap();
                            g.samples.push(sample);
                            g.latest = Some((taken, s));
                            g.last_error = None;
                        }
                        if rec.tty {
                            let mut err = std::io::stderr().lock();
                            let _ = write!(err, "\r\x1b[2K{line}");
                            let _ = err.flush();
                        } else if last_print.elapsed() >= Duration::from_secs(5) {
                            eprintln!("{line}");
                            last_print = Instant::now();
                        }
                    }
                    Err(e) => {
                        rec.inner.lock().unwrap().last_error = Some(format!("{e:#}"));
                    }
                }
            }
        })
    }

    fn sample_of(&self, s: &Snapshot, catalog: &Catalog) -> Sample {
        let mut nodes = BTreeMap::new();
        for n in s.ec2_nodes() {
            *nodes
                .entry((n.capacity_type.clone(), n.zone.clone()))
                .or_default() += 1;
        }
        Sample {
            t: self.now(),
            pending: s.pending(),
            running: s.running(),
            nodes,
            dollars_per_hour: cluster_price(catalog, s),
        }
    }

    /// Clears the progress line before the summary is printed.
    pub fn finish_line(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

fn zone_letter(zone: &str) -> &str {
    zone.get(zone.len().saturating_sub(1)..).unwrap_or(zone)
}

/// `t=42.1s  pods 88 running, 12 pending | nodes 21: spot 17 (a6 b6 c5) on-demand 4 (a2 b1 c1) | $1.234/h`
pub fn progress_line(s: &Sample) -> String {
    let mut by_ct: BTreeMap<&str, Vec<(&str, usize)>> = BTreeMap::new();
    for ((ct, zone), n) in &s.nodes {
        by_ct
            .entry(ct.as_str())
            .or_default()
            .push((zone_letter(zone), *n));
    }
    let mut parts = Vec::new();
    for (ct, zones) in by_ct.iter().rev() {
        let total: usize = zones.iter().map(|z| z.1).sum();
        let z: Vec<String> = zones.iter().map(|(l, n)| format!("{l}{n}")).collect();
        parts.push(format!("{ct} {total} ({})", z.join(" ")));
    }
    format!(
        "t={:>6.1}s  pods {:>3} running, {:>3} pending | nodes {:>2}: {} | ${:.3}/h",
        s.t,
        s.running,
        s.pending,
        s.node_count(),
        if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join(", ")
        },
        s.dollars_per_hour
    )
}
