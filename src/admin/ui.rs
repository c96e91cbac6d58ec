//! The live dashboard on the admin port (`GET /ui`): one page, its script
//! and its style, embedded in the binary and served from the same origin
//! under a Content-Security-Policy that lets it load and ask nothing
//! elsewhere. The page itself holds no data, so it needs no token (a
//! browser's navigation cannot carry one); every second it asks `/stats`
//! as any client would, with the token when the admin API has one (given
//! once in the address, `/ui#token=...`: a fragment never leaves the
//! browser), and under the same cross-site rules. Served by a server and
//! by a load generator's `--admin` alike: the page shows what the
//! `/stats` it gets holds.

use super::Response;

/// The page's policy: its own script and style, `/stats` on its own
/// origin, its charts drawn on canvases; nothing from anywhere else, no
/// framing, no form posted anywhere.
pub(crate) const PAGE_POLICY: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// Every other answer's: nothing to run or load.
pub(crate) const API_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

const PAGE: &str = include_str!("ui/dashboard.html");
const SCRIPT: &str = include_str!("ui/dashboard.js");
const STYLE: &str = include_str!("ui/dashboard.css");

/// Whether `path` is one of the dashboard's files (answered without a
/// token, as `/healthz` is).
pub(crate) fn is_asset(path: &str) -> bool {
    matches!(path, "/ui" | "/ui/" | "/ui/dashboard.js" | "/ui/dashboard.css")
}

/// The dashboard's file at `path`, if it is one.
pub(crate) fn asset(path: &str) -> Option<Response> {
    let (content_type, body) = match path {
        "/ui" | "/ui/" => ("text/html; charset=utf-8", PAGE),
        "/ui/dashboard.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/ui/dashboard.css" => ("text/css; charset=utf-8", STYLE),
        _ => return None,
    };
    Some(Response { status: 200, content_type, body: body.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_only_its_own_files() {
        let page = asset("/ui").unwrap();
        assert_eq!((page.status, page.content_type), (200, "text/html; charset=utf-8"));
        assert!(page.body.contains(r#"src="/ui/dashboard.js""#) && page.body.contains(r#"href="/ui/dashboard.css""#));
        // Nothing another origin serves: no scheme-relative or absolute URL.
        for file in ["/ui", "/ui/dashboard.js", "/ui/dashboard.css"] {
            let body = asset(file).unwrap().body;
            assert!(!body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"), "{file} names another origin");
            assert!(is_asset(file));
        }
        assert!(asset("/ui/other.js").is_none() && !is_asset("/stats"));
    }
}
