//! SIGHUP reads `--config` again. What can change while the server runs
//! takes the file's new value: the TLS certificate and key (new
//! handshakes use them), mosquitto's password and ACL files and
//! `mqtt_allow_anonymous` (every worker decides by them), the JWT key
//! (`jwt_secret_file`, `jwt_public_key_file`, `jwt_jwks_file`: read, and
//! every worker verifies new tokens with it), `max_connections` (new
//! connections count against it; those over a lowered cap stay) and the
//! `upstream` target (the next batch goes there). Any other change is
//! named as needing a restart and left as it is; an option a flag or a
//! variable sets keeps that value, as at the start. A file that does not
//! read (not TOML, an unknown key, a value its flag refuses) changes
//! nothing: the configuration in force stays, counted; a new key file
//! that does not read keeps the key in force, named.

use crate::server::config::ConfigChange;

crate::counters! {
    /// SIGHUP's reading of `--config` (`/stats` "config", `/metrics`).
    pub(crate) struct ConfigCounters {
        reloaded: counter "config_reloaded" "Times SIGHUP read --config again (each change it held applied, or named as needing a restart)",
        refused: counter "config_reload_refused" "Times SIGHUP found --config unreadable or wrong (not TOML, an unknown key, a value its flag refuses): the configuration in force stayed",
        applied: counter "config_changes_applied" "Changed options SIGHUP applied without a restart (TLS certificate and key, mosquitto password and ACL files, the JWT key, max_connections, the upstream target)",
        need_restart: counter "config_changes_need_restart" "Changed options SIGHUP left as they were: they take effect at the next start",
    }
}

/// What one reading decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub applied: Vec<String>,
    pub need_restart: Vec<String>,
    /// Changed in the file, but a flag or a variable sets them.
    pub pinned: Vec<String>,
    /// Changes that could not be applied, with why (the old value stays).
    pub failed: Vec<String>,
    /// The JWT key changed: every worker is to take it.
    pub new_key: bool,
}

impl Outcome {
    pub(crate) fn describe(&self) -> String {
        let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
        let failed = if self.failed.is_empty() { String::new() } else { format!("; not applied: {}", self.failed.join("; ")) };
        format!(
            "applied: {}; need a restart: {}; set by a flag or a variable (kept): {}{failed}",
            list(&self.applied),
            list(&self.need_restart),
            list(&self.pinned)
        )
    }
}

/// Where run-time options live in the supervisor, for [`sort`].
pub(crate) struct Live<'a> {
    pub tls: Option<&'a mut crate::tls::files::ServerTls>,
    pub mqtt: &'a mut crate::server::auth::mosquitto::FilesConfig,
    /// `--auth jwt`'s key (None: no `--auth jwt`).
    pub jwt: Option<&'a mut crate::server::auth::jwt::JwtKey>,
    pub cap: Option<&'a crate::server::limits::cap::SharedCap>,
    pub upstream: Option<&'a crate::server::broker::upstream::Upstream>,
}

/// A changed JWT key file's key: read now (None: the option was taken
/// out of the file, which another key option's change decides).
fn read_key(long: &str, value: Option<&String>) -> Option<Result<crate::server::auth::jwt::JwtKey, String>> {
    use crate::server::auth::jwt::JwtKey;
    let path = value?;
    Some(match long {
        "jwt-secret-file" => JwtKey::read_secret(path),
        "jwt-public-key-file" => JwtKey::read_public(path),
        _ => JwtKey::read_jwks(path),
    })
}

/// Apply what can change now, name the rest.
pub(crate) fn sort(changes: Vec<ConfigChange>, mut live: Live<'_>) -> Outcome {
    let mut out = Outcome::default();
    let mut tls = live.tls;
    for c in changes {
        if c.pinned {
            out.pinned.push(c.key);
            continue;
        }
        let path = || c.values.first().map(std::path::PathBuf::from);
        let done = match (c.long.as_str(), tls.as_deref_mut(), path()) {
            ("tls-cert", Some(t), Some(p)) => {
                t.cert = p;
                true
            }
            ("tls-key", Some(t), Some(p)) => {
                t.key = p;
                true
            }
            ("mqtt-password-file", _, Some(p)) if live.mqtt.password_file.is_some() => {
                live.mqtt.password_file = Some(p);
                true
            }
            ("mqtt-acl-file", _, p) if live.mqtt.any() => {
                live.mqtt.acl_file = p;
                true
            }
            ("mqtt-allow-anonymous", _, _) if live.mqtt.any() => {
                live.mqtt.allow_anonymous = c.values.first().is_some_and(|v| v == "true");
                true
            }
            ("jwt-secret-file" | "jwt-public-key-file" | "jwt-jwks-file", _, _) if live.jwt.is_some() => match read_key(&c.long, c.values.first()) {
                Some(Ok(key)) => {
                    if let Some(k) = live.jwt.as_deref_mut() {
                        *k = key;
                    }
                    out.new_key = true;
                    true
                }
                Some(Err(e)) => {
                    out.failed.push(format!("{}: {e}", c.key));
                    continue;
                }
                // Taken out of the file: the key in force stays unless another replaces it.
                None => continue,
            },
            ("max-connections", _, _) if live.cap.is_some() => match c.values.first().map(|v| crate::values::positive_count(v)) {
                Some(Ok(n)) => {
                    live.cap.expect("matched").set_cap(n);
                    true
                }
                _ => false,
            },
            ("upstream", _, _) if live.upstream.is_some() => match c.values.first().map(|v| crate::server::broker::upstream::parse_destination(v)) {
                Some(Ok(t)) => live.upstream.expect("matched").retarget(t),
                _ => false,
            },
            _ => false,
        };
        if done {
            out.applied.push(c.key)
        } else {
            out.need_restart.push(c.key)
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: &str, value: &str, pinned: bool) -> ConfigChange {
        ConfigChange { key: key.into(), long: key.replace('_', "-"), values: vec![value.into()], pinned }
    }

    #[test]
    fn run_time_options_apply_and_the_rest_wait_for_a_restart() {
        let mut tls = crate::tls::files::ServerTls {
            cert: "old.pem".into(),
            key: "old.key".into(),
            handshake_timeout_ms: 1,
            ticket_key: String::new(),
            alpn_http: false,
            pem: None,
        };
        let mut mqtt = crate::server::auth::mosquitto::FilesConfig { password_file: Some("p".into()), acl_file: None, allow_anonymous: false };
        let changes = vec![
            change("tls_cert", "new.pem", false),
            change("max_connections", "5", false),
            change("mqtt_acl_file", "acl", false),
            change("mqtt_allow_anonymous", "true", false),
            change("idle_timeout", "5s", true),
        ];
        let out = sort(changes, Live { tls: Some(&mut tls), mqtt: &mut mqtt, jwt: None, cap: None, upstream: None });
        assert_eq!(out.applied, ["tls_cert", "mqtt_acl_file", "mqtt_allow_anonymous"]);
        assert_eq!(out.need_restart, ["max_connections"]);
        assert_eq!(out.pinned, ["idle_timeout"]);
        assert_eq!((tls.cert.to_str(), mqtt.acl_file.as_deref().and_then(|p| p.to_str()), mqtt.allow_anonymous), (Some("new.pem"), Some("acl"), true));
    }

    #[test]
    fn a_new_cap_counts_at_once_and_a_key_that_does_not_read_keeps_the_old() {
        let cap = crate::server::limits::cap::SharedCap::create(100).unwrap();
        let mut key = crate::server::auth::jwt::JwtKey::Secret(b"an old secret of thirty-two bytes!!".to_vec());
        let mut mqtt = crate::server::auth::mosquitto::FilesConfig::default();
        let changes = vec![change("max_connections", "250", false), change("jwt_secret_file", "/nonexistent/secret", false)];
        let out = sort(changes, Live { tls: None, mqtt: &mut mqtt, jwt: Some(&mut key), cap: Some(&cap), upstream: None });
        assert_eq!((out.applied.as_slice(), cap.cap(), out.new_key), (["max_connections".to_string()].as_slice(), 250, false));
        assert!(out.failed.len() == 1 && out.failed[0].starts_with("jwt_secret_file: "), "{out:?}");
        assert!(matches!(key, crate::server::auth::jwt::JwtKey::Secret(ref s) if s.starts_with(b"an old")));
    }

    #[test]
    fn a_certificate_for_a_server_without_tls_waits_for_a_restart() {
        let mut mqtt = crate::server::auth::mosquitto::FilesConfig::default();
        let out = sort(
            vec![change("tls_cert", "a.pem", false), change("mqtt_acl_file", "acl", false)],
            Live { tls: None, mqtt: &mut mqtt, jwt: None, cap: None, upstream: None },
        );
        assert_eq!(out.need_restart, ["tls_cert", "mqtt_acl_file"]);
    }
}
