//! One self-contained page: no network, no scripts; the charts inline.

use super::{metrics, Report};
use crate::client::phases::COLUMNS;

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub(crate) const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:960px;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}\
code{background:#f4f4f4;padding:2px 4px}.better{color:#080}.worse{color:#b00}";

/// A table: head row, then body rows (cells are escaped here).
pub(crate) fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = String::from("<table><tr>");
    for h in head {
        t += &format!("<th>{}</th>", escape(h));
    }
    t += "</tr>";
    for r in rows {
        t += "<tr>";
        for c in r {
            t += &format!("<td>{}</td>", escape(c));
        }
        t += "</tr>";
    }
    t + "</table>"
}

fn machine_rows(m: &serde_json::Value) -> Vec<Vec<String>> {
    let s = |p: &str| m.pointer(p).map(|v| v.to_string().trim_matches('"').to_string()).unwrap_or_else(|| "-".into());
    [
        ("cores", "/cores"),
        ("memory (bytes)", "/memory_bytes"),
        ("kernel", "/kernel"),
        ("topology", "/topology/kind"),
        ("open files (hard limit)", "/limits/nofile_hard"),
        ("fs.file-max", "/limits/file_max"),
        ("net.core.somaxconn", "/limits/somaxconn"),
        ("net.ipv4.tcp_max_syn_backlog", "/limits/tcp_max_syn_backlog"),
        ("net.ipv4.ip_local_port_range", "/limits/port_range"),
        ("net.ipv4.tcp_ehash_entries", "/limits/tcp_ehash_entries"),
    ]
    .iter()
    .map(|(k, p)| vec![k.to_string(), s(p)])
    .collect()
}

pub(crate) fn page(r: &Report, charts: &[(String, String)]) -> String {
    let title = format!("megaconn {}: {} connections", r.kind, crate::stats::format::count(r.target_connections));
    let mut body = format!(
        "<h1>{}</h1><p>{}<br>written {} with megaconn {}<br><code>{}</code></p>",
        escape(&title),
        escape(&r.mode),
        escape(&r.written),
        escape(&r.megaconn_version),
        escape(&r.command.join(" "))
    );
    let rows: Vec<Vec<String>> = metrics::of(r).iter().map(|m| vec![m.name.to_string(), metrics::show(m.value, m.unit)]).collect();
    body += &format!("<h2>Summary</h2>{}", table(&["", "value"], &rows));
    let phases: Vec<Vec<String>> = r.phases.iter().map(|p| p.cells()).collect();
    body += &format!("<h2>Phases</h2>{}", table(&COLUMNS, &phases));
    body += "<h2>Charts</h2>";
    for (t, svg) in charts {
        body += &format!("<figure>{svg}<figcaption>{}</figcaption></figure>", escape(t));
    }
    body += &format!("<h2>Machine</h2>{}", table(&["", ""], &machine_rows(&r.machine)));
    body += "<p>Every number of the run is in <code>report.json</code>.</p>";
    wrap(&title, &body)
}

pub(crate) fn wrap(title: &str, body: &str) -> String {
    format!("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>\n", escape(title))
}
