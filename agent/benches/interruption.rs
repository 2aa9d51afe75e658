//! Interruption message visible in the queue → node cordoned: p50/p99 for single messages
//! and for a 1,000-message burst.
//!
//! Real pieces: the AWS emulator's SQS (long polls, SentTimestamp, batch deletes), kube-sim's
//! API server (a real `PATCH` of `spec.unschedulable` per node, through kube-rs), the
//! agent's consumer and message parsing. Not included: the cluster-side planning of
//! replacements (the end-to-end tests cover that path); the handler here looks the node up
//! by instance ID and cordons it, which is what the latency figure measures.
//!
//! "Visible" is the message's SQS `SentTimestamp` (millisecond resolution).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use joiner_agent::cloud::sqs::SqsQueue;
use joiner_agent::controllers::interruption::queue::{
    Consumer, Handler, Outcome, PollSettings, Received,
};
use joiner_agent::controllers::operator::metrics::interruption::InterruptionMetrics;
use joiner_test_support::MotoServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

struct Cordoner {
    nodes: Api<Node>,
    by_instance: HashMap<String, String>,
    latencies: Mutex<Vec<f64>>,
    done: Mutex<Option<Instant>>,
}

#[async_trait::async_trait]
impl Handler for Cordoner {
    async fn handle(&self, r: Received) -> Result<Outcome, String> {
        let id = r.event.instance_ids()[0].to_string();
        let Some(node) = self.by_instance.get(&id) else {
            return Ok(Outcome::Dropped("not_ours"));
        };
        self.nodes
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .map_err(|e| e.to_string())?;
        let l = SystemTime::now()
            .duration_since(r.sent_at)
            .unwrap_or_default()
            .as_secs_f64();
        self.latencies.lock().unwrap().push(l);
        *self.done.lock().unwrap() = Some(Instant::now());
        Ok(Outcome::Acted("replace"))
    }
}

fn spot(i: usize) -> String {
    json!({"version": "0", "id": format!("ev-{i}"), "source": "aws.ec2", "account": "123456789012",
        "detail-type": "EC2 Spot Instance Interruption Warning", "time": "2026-11-22T18:00:00Z",
        "detail": {"instance-id": format!("i-{i:017x}"), "instance-action": "terminate"}})
    .to_string()
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

fn main() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let burst: usize = std::env::var("JOINER_BENCH_BURST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let moto = MotoServer::start();
    let sim = kube_sim::KubeSim::start(kube_sim::Options::default()).expect("kube-sim");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let cfg = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(http)
            .endpoint_url(moto.endpoint())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_credential_types::Credentials::new(
                "testing", "testing", None, None, "bench",
            ))
            .load()
            .await;
        let sqs = aws_sdk_sqs::Client::new(&cfg);
        let url = sqs
            .create_queue()
            .queue_name("bench")
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        let client = sim.client().await.unwrap();
        let nodes: Api<Node> = Api::all(client);
        let mut by_instance = HashMap::new();
        for i in 0..burst + 20 {
            let name = format!("node-{i:05}");
            let id = format!("i-{i:017x}");
            let n: Node = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"providerID": format!("aws:///us-east-1a/{id}")}
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &n).await.unwrap();
            by_instance.insert(id, name);
        }
        let handler = Arc::new(Cordoner {
            nodes,
            by_instance,
            latencies: Mutex::new(Vec::new()),
            done: Mutex::new(None),
        });
        let metrics = Arc::new(InterruptionMetrics::new());
        let consumer = Arc::new(Consumer::new(
            Arc::new(SqsQueue::new(sqs.clone(), &url)),
            PollSettings::default(),
            metrics.clone(),
        ));
        let task = tokio::spawn(consumer.clone().run(handler.clone()));
        tokio::time::sleep(Duration::from_millis(500)).await;

        // Single messages, one at a time, while the consumer long-polls an empty queue.
        for i in 0..20 {
            let before = handler.latencies.lock().unwrap().len();
            sqs.send_message()
                .queue_url(&url)
                .message_body(spot(burst + i))
                .send()
                .await
                .unwrap();
            while handler.latencies.lock().unwrap().len() == before {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut single = std::mem::take(&mut *handler.latencies.lock().unwrap());
        println!(
            "interruption: message visible -> node cordoned (nproc {cores}, pollers {})",
            PollSettings::default().pollers
        );
        println!(
            "  1 message at a time (20 runs): p50 {:.0} ms, p99 {:.0} ms",
            pct(&mut single, 0.5) * 1e3,
            pct(&mut single, 0.99) * 1e3
        );

        // A burst, sent as fast as SendMessageBatch allows.
        let started = Instant::now();
        for chunk in (0..burst).collect::<Vec<_>>().chunks(10) {
            let entries = chunk
                .iter()
                .map(|i| {
                    aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(spot(*i))
                        .build()
                        .unwrap()
                })
                .collect();
            sqs.send_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap();
        }
        let sent = started.elapsed().as_secs_f64();
        let deadline = Instant::now() + Duration::from_secs(120);
        while handler.latencies.lock().unwrap().len() < burst && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let handled = handler.latencies.lock().unwrap().len();
        let total = handler
            .done
            .lock()
            .unwrap()
            .map(|t| t.duration_since(started).as_secs_f64())
            .unwrap_or(f64::NAN);
        let mut lat = std::mem::take(&mut *handler.latencies.lock().unwrap());
        println!(
            "  burst of {burst}: sent in {sent:.2} s; {handled} cordoned, last {total:.2} s after the first send; \
             per message p50 {:.0} ms, p99 {:.0} ms; {} messages deleted",
            pct(&mut lat, 0.5) * 1e3,
            pct(&mut lat, 0.99) * 1e3,
            metrics.deleted.get()
        );
        task.abort();
    });
}
