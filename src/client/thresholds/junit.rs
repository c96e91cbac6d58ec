//! `--junit FILE`: the thresholds as JUnit XML, the format GitLab,
//! Jenkins and GitHub's test reporters read: one test case per
//! `--threshold` and `--threshold-abort`, and one for the built-in verdict
//! (failed with its sentence). A crossed threshold is a `<failure>` whose
//! message says what was measured.

use super::{Checked, Kind};

/// The document for a run of `command` (client, bench, merge) that took
/// `seconds`; `verdict` is the built-in verdict's reason when it failed
/// (its case is there when `results` hold the built-in rules).
pub(crate) fn render(command: &str, results: &[Checked], verdict: Option<&str>, seconds: f64) -> String {
    let mut cases = String::new();
    let mut failures = 0;
    for r in results.iter().filter(|r| r.kind != Kind::BuiltIn) {
        let kind = if r.kind == Kind::Abort { "threshold-abort" } else { "threshold" };
        cases += &format!("    <testcase classname=\"megaconn.{}.{kind}\" name=\"{}\" time=\"0\">\n", esc(command), esc(&r.expr));
        if !r.pass {
            failures += 1;
            let message = format!("{} crossed: measured {}", r.expr, r.measured);
            cases += &format!("      <failure type=\"{kind}\" message=\"{}\">{}</failure>\n", esc(&message), esc(&message));
        }
        cases += &format!("      <system-out>measured {}</system-out>\n    </testcase>\n", esc(&r.measured));
    }
    let rules: Vec<&str> = results.iter().filter(|r| r.kind == Kind::BuiltIn).map(|r| r.expr.as_str()).collect();
    // merge has no verdict of its own (each shard had one): no case for it.
    if !rules.is_empty() {
        cases += &format!("    <testcase classname=\"megaconn.{}\" name=\"built-in verdict: {}\" time=\"0\">\n", esc(command), esc(&rules.join(", ")));
        if let Some(why) = verdict {
            failures += 1;
            cases += &format!("      <failure type=\"verdict\" message=\"{}\">{}</failure>\n", esc(why), esc(why));
        }
        cases += "    </testcase>\n";
    }
    let tests = results.iter().filter(|r| r.kind != Kind::BuiltIn).count() + usize::from(!rules.is_empty());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"megaconn {cmd}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{seconds:.3}\">\n  <testsuite name=\"megaconn {cmd} thresholds\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{seconds:.3}\">\n{cases}  </testsuite>\n</testsuites>\n",
        cmd = esc(command)
    )
}

/// Text as XML character data or an attribute value.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_are_escaped_and_failures_counted() {
        let s = crate::client::run::ClientSummary { requested: 1, established: 1, held: 1, ..Default::default() };
        let mut results = vec![Checked::of(&super::super::parse("established<=1").unwrap(), &s, Kind::Threshold)];
        results.extend(super::super::builtin(false).iter().map(|b| Checked::of(b, &s, Kind::BuiltIn)));
        let xml = render("client", &results, Some("a <reason>"), 1.5);
        assert!(xml.contains("name=\"established&lt;=1\""), "{xml}");
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "one threshold and the verdict, the verdict failed: {xml}");
        assert!(xml.contains("message=\"a &lt;reason&gt;\""), "{xml}");
        assert_eq!(esc("a\u{1}b'"), "a?b&apos;");
    }
}
