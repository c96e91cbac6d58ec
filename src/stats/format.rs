//! Number formatting for human-readable reports.

use std::collections::BTreeMap;

/// 1234567 -> "1,234,567".
pub(crate) fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An axis label: 1500 -> "1.5K", 2000000 -> "2M", 0.25 -> "0.25".
pub(crate) fn short(v: f64) -> String {
    let (d, unit) = match v.abs() {
        a if a >= 1e9 => (1e9, "G"),
        a if a >= 1e6 => (1e6, "M"),
        a if a >= 1e3 => (1e3, "K"),
        _ => (1.0, ""),
    };
    let s = format!("{:.2}", v / d);
    format!("{}{unit}", s.trim_end_matches('0').trim_end_matches('.'))
}

/// Bytes with a binary unit: "512 B", "3.4 MiB".
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// "ECONNREFUSED=3, timeout=1", or "none".
pub(crate) fn kinds(map: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = map.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k}={}", count(*v))).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::count(1_234_567), "1,234,567");
        assert_eq!(super::count(12), "12");
        assert_eq!(super::bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
