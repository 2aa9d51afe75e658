//! The tfplugin6 request handlers of the real provider, unconfigured (as Terraform first
//! meets it): validation of the provider block, of every resource and data source (their
//! own validators included: NodePool requirements, budgets, durations...), state upgrades
//! from stored JSON, refresh of a null state and the generic half of planning. Input: an
//! operation byte, a resource or data source index byte, then the DynamicValue (msgpack, or
//! JSON for state upgrades). A handler may refuse anything; it must never panic.
//!
//! `JOINER_FUZZ_WRITE_SEEDS=DIR` writes, before fuzzing, one input per operation and type
//! with a sample configuration built from the type's schema (how fuzz/seeds/tfplugin began).

use std::sync::OnceLock;

use crate::split_first;
use joiner_provider::protocol::proto::tfplugin6 as pb;
use joiner_provider::protocol::proto::tfplugin6::provider_server::Provider as _;
use joiner_provider::protocol::resource::Provider as _;
use joiner_provider::protocol::server::ProviderService;
use joiner_provider::protocol::stop::StopToken;
use joiner_provider::protocol::value::{Type, Value};
use joiner_provider::protocol::{msgpack, schema::Schema};
use joiner_provider::provider::JoinerProvider;

struct World {
    service: ProviderService<JoinerProvider>,
    resources: Vec<(String, Type)>,
    data_sources: Vec<(String, Type)>,
    runtime: tokio::runtime::Runtime,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let p = JoinerProvider;
        let ty = |s: Schema| s.implied_type();
        World {
            resources: p
                .resources()
                .iter()
                .map(|r| (r.type_name().to_string(), ty(r.schema())))
                .collect(),
            data_sources: p
                .data_sources()
                .iter()
                .map(|d| (d.type_name().to_string(), ty(d.schema())))
                .collect(),
            service: ProviderService::new(p, StopToken::new()),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime"),
        }
    })
}

fn dynamic(bytes: &[u8]) -> Option<pb::DynamicValue> {
    Some(pb::DynamicValue {
        msgpack: bytes.to_vec(),
        json: Vec::new(),
    })
}

/// Operations, by the input's first byte (modulo their count).
const OPS: u8 = 7;

async fn handle(w: &World, op: u8, index: u8, payload: &[u8]) {
    let s = &w.service;
    let resource = |i: u8| w.resources[i as usize % w.resources.len()].0.clone();
    let data_source = |i: u8| w.data_sources[i as usize % w.data_sources.len()].0.clone();
    let _ = match op % OPS {
        0 => s
            .validate_provider_config(tonic::Request::new(pb::validate_provider_config::Request {
                config: dynamic(payload),
            }))
            .await
            .map(drop),
        1 => s
            .validate_resource_config(tonic::Request::new(pb::validate_resource_config::Request {
                type_name: resource(index),
                config: dynamic(payload),
                ..Default::default()
            }))
            .await
            .map(drop),
        2 => s
            .validate_data_resource_config(tonic::Request::new(
                pb::validate_data_resource_config::Request {
                    type_name: data_source(index),
                    config: dynamic(payload),
                },
            ))
            .await
            .map(drop),
        3 => s
            .upgrade_resource_state(tonic::Request::new(pb::upgrade_resource_state::Request {
                type_name: resource(index),
                version: (index >> 4) as i64,
                raw_state: Some(pb::RawState {
                    json: payload.to_vec(),
                    ..Default::default()
                }),
            }))
            .await
            .map(drop),
        4 => s
            .read_resource(tonic::Request::new(pb::read_resource::Request {
                type_name: resource(index),
                current_state: dynamic(payload),
                ..Default::default()
            }))
            .await
            .map(drop),
        5 => s
            .plan_resource_change(tonic::Request::new(pb::plan_resource_change::Request {
                type_name: resource(index),
                prior_state: None,
                proposed_new_state: dynamic(payload),
                config: dynamic(payload),
                ..Default::default()
            }))
            .await
            .map(drop),
        _ => s
            .plan_resource_change(tonic::Request::new(pb::plan_resource_change::Request {
                type_name: resource(index),
                prior_state: dynamic(payload),
                proposed_new_state: dynamic(payload),
                config: dynamic(payload),
                ..Default::default()
            }))
            .await
            .map(drop),
    };
}

/// A value of type `t` with every attribute set to something plausible.
fn sample(t: &Type, depth: usize) -> Value {
    match t {
        Type::Bool => Value::Bool(true),
        Type::Number => Value::int(1),
        Type::String => Value::string("a"),
        Type::Dynamic => Value::string("a"),
        _ if depth > 6 => Value::Null,
        Type::List(e) => Value::List(vec![sample(e, depth + 1)]),
        Type::Set(e) => Value::Set(vec![sample(e, depth + 1)]),
        Type::Map(e) => Value::Map([("k".to_string(), sample(e, depth + 1))].into()),
        Type::Object(a) => Value::Object(
            a.iter()
                .map(|(k, t)| (k.clone(), sample(t, depth + 1)))
                .collect(),
        ),
        Type::Tuple(ts) => Value::Tuple(ts.iter().map(|t| sample(t, depth + 1)).collect()),
    }
}

fn write_seeds(dir: &str, w: &World) {
    std::fs::create_dir_all(dir).expect("seed directory");
    let mut n = 0;
    let mut put = |op: u8, index: usize, payload: Vec<u8>| {
        let mut input = vec![op, index as u8];
        input.extend(payload);
        std::fs::write(format!("{dir}/seed-{n:03}"), input).expect("write a seed");
        n += 1;
    };
    let provider_ty = JoinerProvider.schema().implied_type();
    put(
        0,
        0,
        msgpack::encode(&sample(&provider_ty, 0), &provider_ty).unwrap(),
    );
    for (i, (_, t)) in w.resources.iter().enumerate() {
        let v = sample(t, 0);
        let bytes = msgpack::encode(&v, t).unwrap();
        for op in [1, 4, 5, 6] {
            put(op, i, bytes.clone());
        }
        let json = joiner_provider::protocol::json::encode(&v, t).unwrap();
        put(3, i, json);
    }
    for (i, (_, t)) in w.data_sources.iter().enumerate() {
        put(2, i, msgpack::encode(&sample(t, 0), t).unwrap());
    }
}

/// Before fuzzing: builds the provider once and, with `JOINER_FUZZ_WRITE_SEEDS=DIR`, writes
/// the schema-built seeds there.
pub fn init() {
    let w = world();
    if let Ok(dir) = std::env::var("JOINER_FUZZ_WRITE_SEEDS") {
        write_seeds(&dir, w);
    }
}

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((op, rest)) = split_first(data) else {
        return;
    };
    let Some((index, payload)) = split_first(rest) else {
        return;
    };
    let w = world();
    w.runtime.block_on(handle(w, op, index, payload));
}
