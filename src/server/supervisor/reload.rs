//! SIGHUP reads `--config` again. What can change while the server runs
//! takes the file's new value: the TLS certificate and key (new
//! handshakes use them), mosquitto's password and ACL files and
//! `mqtt_allow_anonymous` (every worker decides by them). Any other
//! change is named as needing a restart and left as it is; an option a
//! flag or a variable sets keeps that value, as at the start. A file that
//! does not read (not TOML, an unknown key, a value its flag refuses)
//! changes nothing: the configuration in force stays, counted.

use crate::server::config::ConfigChange;

crate::counters! {
    /// SIGHUP's reading of `--config` (`/stats` "config", `/metrics`).
    pub(crate) struct ConfigCounters {
        reloaded: counter "config_reloaded" "Times SIGHUP read --config again (each change it held applied, or named as needing a restart)",
        refused: counter "config_reload_refused" "Times SIGHUP found --config unreadable or wrong (not TOML, an unknown key, a value its flag refuses): the configuration in force stayed",
        applied: counter "config_changes_applied" "Changed options SIGHUP applied without a restart (TLS certificate and key, mosquitto password and ACL files)",
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
}

impl Outcome {
    pub(crate) fn describe(&self) -> String {
        let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
        format!("applied: {}; need a restart: {}; set by a flag or a variable (kept): {}", list(&self.applied), list(&self.need_restart), list(&self.pinned))
    }
}

/// Where run-time options live in the supervisor, for [`sort`].
pub(crate) struct Live<'a> {
    pub tls: Option<&'a mut crate::tls::files::ServerTls>,
    pub mqtt: &'a mut crate::server::auth::mosquitto::FilesConfig,
}

/// Apply what can change now, name the rest.
pub(crate) fn sort(changes: Vec<ConfigChange>, live: Live<'_>) -> Outcome {
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
        let out = sort(changes, Live { tls: Some(&mut tls), mqtt: &mut mqtt });
        assert_eq!(out.applied, ["tls_cert", "mqtt_acl_file", "mqtt_allow_anonymous"]);
        assert_eq!(out.need_restart, ["max_connections"]);
        assert_eq!(out.pinned, ["idle_timeout"]);
        assert_eq!((tls.cert.to_str(), mqtt.acl_file.as_deref().and_then(|p| p.to_str()), mqtt.allow_anonymous), (Some("new.pem"), Some("acl"), true));
    }

    #[test]
    fn a_certificate_for_a_server_without_tls_waits_for_a_restart() {
        let mut mqtt = crate::server::auth::mosquitto::FilesConfig::default();
        let out = sort(vec![change("tls_cert", "a.pem", false), change("mqtt_acl_file", "acl", false)], Live { tls: None, mqtt: &mut mqtt });
        assert_eq!(out.need_restart, ["tls_cert", "mqtt_acl_file"]);
    }
}
