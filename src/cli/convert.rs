//! Flags into domain configs: the only place that knows both.

use super::{BenchArgs, ClientArgs, LoadArgs, ServerArgs, TuneArgs};
use crate::bench::BenchConfig;
use crate::client::{ClientConfig, LoadConfig, Traffic};
use crate::server::ServerConfig;
use crate::tune::TuneConfig;

/// What a server serves, from `--serve` entries or the `--protocol`/
/// `--ports` shorthand (with `--tls-cert`, every port of it TLS); Err for
/// a mix of the two, or TLS files no `--serve` entry uses.
fn services(a: &ServerArgs) -> Result<Vec<crate::server::services::Service>, String> {
    use crate::server::services::Service;
    let tls_files = a.tls.tls_cert.is_some();
    if a.serve.is_empty() {
        let ports = a.ports.as_ref().map_or_else(|| (8000..=8099).collect(), |p| p.0.clone());
        return Ok(vec![Service { protocol: a.protocol.unwrap_or(crate::proto::Protocol::Framed), tls: tls_files, ports }]);
    }
    if let Some(flag) = [(a.protocol.is_some(), "--protocol"), (a.ports.is_some(), "--ports")].iter().find(|(given, _)| *given).map(|(_, f)| f) {
        return Err(format!(
            "{flag} with --serve is ambiguous (which ports would speak what?): write every protocol as a --serve entry, e.g. --serve framed=8000-8099 --serve mqtt=1883, or use --protocol P --ports R alone"
        ));
    }
    if tls_files && !a.serve.iter().any(|s| s.tls) {
        return Err(
            "--tls-cert with --serve serves TLS only on entries marked +tls, and none is: mark one (e.g. --serve mqtt+tls=8883) or drop --tls-cert/--tls-key"
                .into(),
        );
    }
    Ok(a.serve.clone())
}

impl ServerArgs {
    /// `--mqtt-auth-http` or `--mqtt-authz-http` to `target`, with the bounds they share.
    fn hook_config(&self, target: crate::server::broker::upstream::Target) -> crate::server::broker::auth_hook::HookConfig {
        crate::server::broker::auth_hook::HookConfig {
            target,
            timeout: self.mqtt_auth_http_timeout,
            cache_ttl: self.mqtt_auth_http_cache,
            concurrency: self.mqtt_auth_http_concurrency,
            fail_open: self.mqtt_auth_http_fail_open,
        }
    }
}

impl TryFrom<ServerArgs> for ServerConfig {
    type Error = crate::UsageError;
    fn try_from(a: ServerArgs) -> Result<ServerConfig, crate::UsageError> {
        let services = services(&a).map_err(crate::UsageError)?;
        if a.mqtt_auth_http_fail_open && a.mqtt_auth_http.is_none() && a.mqtt_authz_http.is_none() {
            return Err(crate::UsageError(
                "--mqtt-auth-http-fail-open says what to do when an HTTP backend cannot answer, and none is set: add --mqtt-auth-http URL or --mqtt-authz-http URL, or drop it".into(),
            ));
        }
        let auth_hook = a.mqtt_auth_http.clone().map(|target| a.hook_config(target));
        let authz_hook = a.mqtt_authz_http.clone().map(|target| a.hook_config(target));
        Ok(ServerConfig {
            config_file: a.config_file.clone(),
            listen: a.listen,
            services,
            workers: a.workers,
            connections: a.connections,
            max_connections: a.max_connections,
            max_connections_per_ip: a.max_connections_per_ip,
            max_topics: a.max_topics,
            max_commands_per_second: a.max_commands_per_second,
            stall_timeout: a.stall_timeout.0,
            tcp_keepalive: a.tcp_keepalive,
            tcp_user_timeout: a.tcp_user_timeout,
            idle_timeout: a.idle_timeout.0,
            stats_interval: a.stats_interval,
            duration: a.duration.0,
            business: a.business,
            queue: a.queue,
            service_time: a.service_time,
            body_size: a.body_size,
            max_header_bytes: a.max_header_bytes,
            header_timeout: a.header_timeout,
            retire_after: a.retire_after,
            drain_timeout: a.drain_timeout,
            drain_period: a.drain_period,
            io: a.io,
            io_batch_wait: a.io_batch_wait,
            max_pending_bytes: a.max_pending_bytes,
            max_push_bytes: a.max_push_bytes,
            history: crate::server::broker::history::HistoryConfig { size: a.history, ttl: a.history_ttl, max_bytes: a.history_max_bytes },
            mqtt_flight: crate::server::session::mqtt::flight::Bounds { inflight: a.mqtt_inflight, queued: a.mqtt_queue, queued_bytes: a.mqtt_queue_bytes },
            mqtt_max_keep_alive: a.mqtt_max_keep_alive,
            auth_hook,
            authz_hook,
            broker_shards: a.broker_shards,
            mqtt_retained: crate::server::broker::retained::RetainedConfig {
                max_messages: a.mqtt_retained,
                max_bytes: a.mqtt_retained_bytes,
                per_identity: a.mqtt_retained_per_identity,
            },
            mqtt_retained_file: a.mqtt_retained_file.clone(),
            mqtt_retained_save_every: a.mqtt_retained_save_every,
            mqtt_sessions_file: a.mqtt_sessions_file.clone(),
            mqtt_sessions_save_every: a.mqtt_sessions_save_every,
            mqtt_sessions: crate::server::broker::sessions::SessionsConfig {
                max_ids: a.mqtt_client_ids,
                max_kept: a.mqtt_sessions,
                per_identity: a.mqtt_sessions_per_identity,
                max_kept_bytes: a.mqtt_sessions_bytes,
                queue: a.mqtt_session_queue,
                queue_bytes: a.mqtt_session_queue_bytes,
            },
            sys_interval: a.sys_interval,
            mqtt_files: crate::server::auth::mosquitto::FilesConfig {
                password_file: a.mqtt_password_file.clone(),
                acl_file: a.mqtt_acl_file.clone(),
                allow_anonymous: a.mqtt_allow_anonymous,
            },
            max_message_bytes: a.max_message_bytes,
            push_format: a.push_format,
            ws_deflate: crate::server::session::ws_deflate::DeflateConfig {
                mode: a.ws_deflate,
                min_bytes: a.ws_deflate_min_bytes,
                window_bits: a.ws_deflate_window_bits,
            },
            admin: a.admin.0,
            admin_token: a.admin_token_file.or(a.admin_token),
            cluster: a.cluster.map(|url| crate::cluster::ClusterConfig {
                max_push: a.max_push_bytes,
                log: (a.cluster_history == crate::cluster::log::HistoryMode::Jetstream).then_some(crate::cluster::log::LogConfig {
                    storage: a.cluster_storage,
                    per_topic: a.history,
                    max_age: a.history_ttl,
                    max_bytes: a.history_max_bytes,
                }),
                ..a.cluster_auth.into_cluster(url, a.node_id.unwrap_or_else(crate::cluster::default_node_id))
            }),
            tls: a.tls.tls_cert.zip(a.tls.tls_key).map(|(cert, key)| crate::tls::files::ServerTls {
                cert,
                key,
                handshake_timeout_ms: a.tls.handshake_timeout.as_millis() as u64,
                ticket_key: String::new(),
                alpn_http: false,
                pem: None,
            }),
            auth: match a.auth.auth {
                super::AuthMode::Off => crate::server::config::Auth::Off,
                super::AuthMode::Jwt => crate::server::config::Auth::Jwt(a.auth.jwt_secret_file.or(a.auth.jwt_public_key_file).or(a.auth.jwt_jwks_file)),
            },
            admin_topics: a.auth.admin_topics,
            jwt_expected: crate::server::auth::jwt::Expected { audience: a.auth.jwt_audience, issuer: a.auth.jwt_issuer },
            upstream: a.auth.upstream,
            upstream_queue: a.auth.upstream_queue,
            upstream_queue_bytes: a.auth.upstream_queue_bytes,
            upstream_secret: a.auth.upstream_secret_file,
            upstream_nats_creds: a.auth.upstream_nats_creds.map(|s| s.0),
            presence_events: a.auth.presence_events,
            presence_notices: a.auth.presence_notices,
            json: a.json,
        })
    }
}

impl From<LoadArgs> for LoadConfig {
    fn from(a: LoadArgs) -> LoadConfig {
        LoadConfig {
            traffic: Traffic {
                protocol: a.protocol,
                heartbeat: a.heartbeat.0,
                payload: a.payload,
                request_rate: a.request_rate.0,
                requests_per_connection: a.requests_per_connection,
                request_timeout: a.request_timeout,
                connect_timeout: a.connect_timeout,
                close: a.close,
                reconnect: a.reconnect,
                reconnect_to: a.reconnect_to,
                raw_message: a.message,
                raw_first: a.first_message.map(|m| m.bytes),
                raw_codec: a.codec,
                subscribe: a.subscribe.as_ref().map(|s| s.0.clone()).unwrap_or_default(),
                subscribe_spread: a.subscribe.is_some_and(|s| s.1),
                jwt_secret: match a.jwt_secret_file {
                    Some(crate::server::auth::jwt::JwtKey::Secret(s)) => Some(s),
                    _ => None,
                },
                mqtt: crate::client::mqtt::MqttOptions {
                    v5: a.mqtt.mqtt_version == "5",
                    client_id: a.mqtt.mqtt_client_id,
                    username: a.mqtt.mqtt_username,
                    password: a.mqtt.mqtt_password,
                    qos: a.mqtt.mqtt_qos,
                    publish_topic: a.mqtt.mqtt_publish_topic,
                    subscribe: a.mqtt.mqtt_subscribe,
                    topic_alias_maximum: a.mqtt.mqtt_topic_alias_maximum.unwrap_or(0),
                    ramp_s: 0,
                },
                ..Traffic::default()
            },
            ports: a.ports.0,
            // With --stages: the highest target, and the steepest change.
            connections: a.stages.as_ref().map(|s| s.highest()).or(a.connections).unwrap_or(LoadConfig::default().connections),
            rate: a.stages.as_ref().map(|s| s.steepest_rate()).or(a.rate).unwrap_or(LoadConfig::default().rate),
            source_ips: a.source_ips.map(|l| l.0),
            hold: a.hold.unwrap_or(crate::client::config::DEFAULT_HOLD),
            stages: a.stages,
            stats_interval: a.stats_interval,
            allow_loss: a.allow_loss,
            io: a.io,
            churn: a.churn.0,
            json: a.json,
            ..LoadConfig::default()
        }
    }
}

impl From<ClientArgs> for ClientConfig {
    fn from(a: ClientArgs) -> ClientConfig {
        let mut c = ClientConfig {
            target: a.target,
            load: a.load.into(),
            workers: a.workers,
            shard: a.shard,
            admin: a.admin.0,
            url: a.url,
            report: a.report,
            dry_run: a.dry_run,
            summary_json: a.summary_json,
            hdr_log: a.hdr_log,
        };
        c.load.start_at = a.start_at;
        c.load.until_pushes = a.until_pushes;
        c.load.thresholds = a.gate.into_thresholds(a.threshold_abort);
        if let Some(u) = &mut c.url {
            crate::client::url::one_family(&mut u.addrs, c.load.source_ips.as_ref().and_then(|s| s.first()).map(std::net::IpAddr::is_ipv6));
        }
        if let Some(u) = &c.url {
            // The URL names the protocol; its host, port and path win.
            if c.load.traffic.protocol == crate::proto::Protocol::Framed {
                c.load.traffic.protocol = if u.websocket { crate::proto::Protocol::Ws } else { crate::proto::Protocol::Http };
            }
            c.target = u.addrs.first().copied().unwrap_or(c.target);
            if u.addrs.len() > 1 {
                let addrs = &u.addrs;
                c.load.nodes = (0..addrs.len())
                    .map(|i| crate::client::config::NodeTarget {
                        target: addrs[i],
                        netns_fd: None,
                        elsewhere: (1..addrs.len()).map(|j| addrs[(i + j) % addrs.len()]).collect(),
                    })
                    .collect();
            }
            c.load.ports = vec![u.port];
            c.load.traffic.mqtt_ws = u.websocket && c.load.traffic.protocol == crate::proto::Protocol::Mqtt;
            c.load.traffic.ws_target = u.target.clone();
            c.load.traffic.host = Some(u.authority());
        }
        for (name, value) in a.headers {
            if name.eq_ignore_ascii_case("host") {
                c.load.traffic.host = Some(value);
            } else {
                c.load.traffic.headers.push(format!("{name}: {value}"));
            }
        }
        if let Some(o) = a.origin {
            c.load.traffic.headers.push(format!("Origin: {o}"));
        }
        c.load.traffic.ws_binary = a.ws_binary;
        c.load.traffic.ws_deflate = a.ws_deflate;
        if !a.ws_subprotocol.is_empty() {
            c.load.traffic.headers.push(format!("Sec-WebSocket-Protocol: {}", a.ws_subprotocol.join(", ")));
            c.load.traffic.subprotocols = a.ws_subprotocol;
        }
        let t = a.tls;
        let wanted = t.tls || t.tls_ca.is_some() || t.insecure || t.tls_server_name.is_some() || t.tls_versions.is_some() || t.tls_resume.is_some();
        if wanted || c.url.as_ref().is_some_and(|u| u.tls) {
            let defaults = crate::tls::client::ClientTls::default();
            c.load.traffic.tls = Some(crate::tls::client::ClientTls {
                ca: t.tls_ca,
                insecure: t.insecure,
                server_name: t.tls_server_name.or_else(|| c.url.as_ref().map(|u| u.host.clone())).unwrap_or_else(|| c.target.to_string()),
                versions: t.tls_versions.unwrap_or(defaults.versions),
                // MQTT over WebSocket begins as HTTP, as ws does.
                alpn: crate::tls::client::alpn_for(if c.load.traffic.mqtt_ws { crate::proto::Protocol::Ws } else { c.load.traffic.protocol }),
                resume: t.tls_resume.unwrap_or(defaults.resume),
            });
        }
        c
    }
}

impl From<BenchArgs> for BenchConfig {
    fn from(a: BenchArgs) -> BenchConfig {
        let connections = a.stages.as_ref().map(|s| s.highest()).or(a.connections).unwrap_or(match a.scenario {
            crate::bench::Scenario::Business => crate::bench::business::DEFAULT_CONNECTIONS,
            _ => BenchConfig::default().connections,
        });
        BenchConfig {
            scenario: a.scenario,
            connections,
            ports: a.ports.0,
            rate: a.stages.as_ref().map(|s| s.steepest_rate()).or(a.rate).unwrap_or(BenchConfig::default().rate),
            stages: a.stages,
            hold: a.hold,
            heartbeat: a.heartbeat.0,
            payload: a.payload,
            push_bytes: a.push_bytes,
            ws_deflate: a.ws_deflate,
            history: a.history,
            source_ips: a.source_ips.map(|l| l.0),
            server_workers: a.workers.unwrap_or(a.server_workers),
            client_workers: a.workers.unwrap_or(a.client_workers),
            connect_timeout: a.connect_timeout,
            // 0: a rollout's own count (bench::rollout::broadcasts).
            broadcasts: a.broadcasts.unwrap_or(match a.scenario {
                crate::bench::Scenario::Rollout => 0,
                crate::bench::Scenario::Recovery => 100,
                _ => 10,
            }),
            broadcast_interval: a.broadcast_interval.unwrap_or(match a.scenario {
                crate::bench::Scenario::Rollout => crate::bench::rollout::default_interval(connections),
                _ => std::time::Duration::from_secs(5),
            }),
            topics: a.topics,
            protocol: a.protocol,
            mqtt_qos: a.mqtt_qos,
            tls: a.tls,
            pki: None,
            io: a.io,
            client_io: a.client_io,
            jwt_secret: (a.auth == super::AuthMode::Jwt).then(|| {
                use rand::RngCore;
                let mut s = vec![0u8; 48];
                rand::thread_rng().fill_bytes(&mut s);
                s
            }),
            churn: a.churn.0,
            admin: a.admin.0,
            report: a.report,
            topology: a.topology,
            target: std::net::Ipv4Addr::LOCALHOST,
            client_netns: None,
            nodes: a.nodes,
            cluster: a.cluster,
            cluster_history: a.cluster_history,
            drain_period: a.drain_period,
            thresholds: a.gate.into_thresholds(a.threshold_abort),
            json: a.json,
        }
    }
}

impl From<TuneArgs> for TuneConfig {
    fn from(a: TuneArgs) -> TuneConfig {
        TuneConfig {
            connections: a.connections,
            role: a.role,
            ports: a.ports.0.len() as u64,
            rate: a.rate,
            apply: a.apply,
            dry_run: a.dry_run,
            json: a.json,
            root: a.root,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Cmd};

    /// The flags' defaults and the domain configs' `Default` must agree:
    /// a bare command line gives the same config as `Default` (the
    /// CLI-only fields aside), so neither can drift from the other.
    #[test]
    fn flag_defaults_are_the_domain_defaults() {
        // As the command line alone says: MEGACONN_* variables set around
        // the test (MEGACONN_IO=epoll for the epoll half) must not count.
        fn without_env(c: clap::Command) -> clap::Command {
            c.mut_args(|a| a.env(None)).mut_subcommands(without_env)
        }
        let parse_from = |args: &[&str]| {
            use clap::{CommandFactory, FromArgMatches};
            Cli::from_arg_matches(&without_env(Cli::command()).get_matches_from(args)).expect("parse")
        };
        let Cmd::Client(a) = parse_from(&["megaconn", "client", "--connections", "1000"]).command else { unreachable!() };
        let from_flags: crate::client::ClientConfig = (*a).into();
        assert_eq!(format!("{:?}", from_flags), format!("{:?}", crate::client::ClientConfig::default()));
        let Cmd::Bench(a) = parse_from(&["megaconn", "bench"]).command else { unreachable!() };
        let from_flags: crate::bench::BenchConfig = a.into();
        let domain = crate::bench::BenchConfig { topology: crate::topology::Topology::Auto, ..Default::default() };
        assert_eq!(format!("{:?}", from_flags), format!("{:?}", domain));
        let Cmd::Server(a) = parse_from(&["megaconn", "server"]).command else { unreachable!() };
        let from_flags: crate::server::ServerConfig = a.try_into().expect("no --serve mix");
        // In-process servers (tests, benches) have no admin API unless asked;
        // the command serves it on loopback.
        let domain = crate::server::ServerConfig { admin: crate::server::config::DEFAULT_ADMIN.parse().ok(), ..Default::default() };
        assert_eq!(format!("{:?}", from_flags), format!("{:?}", domain));
    }

    /// `megaconn bench` ramps at 50,000/s unless `--rate` says otherwise,
    /// MQTT too (the supervisor's client id registry no longer holds a
    /// million-client ramp back: BENCHMARKS.md, session 18).
    #[test]
    fn a_bench_ramps_at_50000_a_second_unless_told() {
        use clap::Parser;
        let rate = |args: &[&str]| {
            let Cmd::Bench(a) = Cli::try_parse_from(args).expect("parse").command else { unreachable!() };
            crate::bench::BenchConfig::from(a).rate
        };
        assert_eq!(rate(&["megaconn", "bench", "--protocol", "mqtt"]), 50_000);
        assert_eq!(rate(&["megaconn", "bench", "--protocol", "mqtt", "--rate", "30000"]), 30_000);
        assert_eq!(rate(&["megaconn", "bench", "--protocol", "ws"]), 50_000);
    }

    /// `--serve` entries, the shorthand, and the mixes refused with the fix.
    #[test]
    fn serve_entries_or_the_shorthand_but_never_both() {
        use crate::server::services::Service;
        let server = |args: &[&str]| -> Result<crate::server::ServerConfig, String> {
            use clap::Parser;
            let Cmd::Server(a) = Cli::try_parse_from(args).map_err(|e| e.to_string())?.command else { unreachable!() };
            a.try_into().map_err(|e: crate::UsageError| e.0)
        };
        let c = server(&["megaconn", "server", "--serve", "mqtt=1883", "--serve", "ws=8080-8081"]).unwrap();
        assert_eq!(c.services, vec![Service::plain(crate::proto::Protocol::Mqtt, vec![1883]), Service::plain(crate::proto::Protocol::Ws, vec![8080, 8081])]);
        let c = server(&["megaconn", "server", "--protocol", "mqtt", "--ports", "1883", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).unwrap();
        assert_eq!(c.services, vec![Service { protocol: crate::proto::Protocol::Mqtt, tls: true, ports: vec![1883] }], "the shorthand: every port TLS");
        let e = server(&["megaconn", "server", "--serve", "mqtt=1883", "--protocol", "ws"]).unwrap_err();
        assert!(e.contains("--protocol with --serve is ambiguous") && e.contains("--serve framed=8000-8099"), "{e}");
        assert!(server(&["megaconn", "server", "--serve", "mqtt=1883", "--ports", "9000"]).unwrap_err().contains("--ports with --serve"));
        let e = server(&["megaconn", "server", "--serve", "mqtt=1883", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).unwrap_err();
        assert!(e.contains("marked +tls"), "{e}");
        assert!(server(&["megaconn", "server", "--serve", "mqtt+tls=8883", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).is_ok());
    }
}
