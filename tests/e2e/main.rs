//! End-to-end tests over loopback and in network namespaces: the real
//! binary against peers nobody here wrote. One test binary (one link, not
//! 29); each module is the suite of one concern, and `cargo test --test e2e
//! -- ws::` runs one of them.
// A test binary is a leaf nobody links: its `pub` means "seen by the
// suites", so the crate's unreachable_pub lint (Cargo.toml) says nothing here.
#![allow(unreachable_pub)]
mod common;

mod accounting;
mod admin_exposed;
mod any_peer;
mod auth;
mod auth_http;
mod authz_http;
mod bad_input;
mod broker;
mod chat;
mod cli_props;
mod cluster;
mod conn_bounds;
mod connections;
mod counters;
mod dashboard;
mod drain;
mod extremes;
mod fuzz_regressions;
mod history;
mod hostile;
mod http;
mod io;
mod journeys;
mod kubernetes;
mod layers;
mod mosquitto_files;
mod mqtt;
mod mqtt_client;
mod mqtt_loadgen;
mod mqtt_owners;
mod mqtt_qos;
mod mqtt_sessions;
mod mqtt_timing;
mod mqtt_v5;
mod mqtt_ws;
mod multiproto;
mod push;
mod report;
mod requests;
mod settings;
mod shards;
mod stages;
mod sys_topics;
mod thresholds;
mod tls;
mod tls_client;
mod topology;
mod tune;
mod upstream;
mod upstream_nats;
mod visibility;
mod workers;
mod ws;
mod ws_deflate;
