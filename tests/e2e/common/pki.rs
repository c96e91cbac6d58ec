//! Certificates for TLS tests, made by the `openssl` command (not by
//! megaconn's own code): a CA, and a leaf for localhost/127.0.0.1 signed
//! by it whose file holds the full chain. Removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Pki {
    pub dir: PathBuf,
    pub ca: String,
    pub cert: String,
    pub key: String,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl is installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Pki {
    /// `kind`: "ec" (P-256) or "rsa" (2048).
    pub fn new(kind: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("megaconn-pki-{}-{}-{kind}", super::test_name(), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let newkey = if kind == "rsa" { "rsa:2048" } else { "ec" };
        let mut ca_args =
            vec!["req", "-x509", "-newkey", newkey, "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "3", "-subj", "/CN=megaconn test CA"];
        if kind != "rsa" {
            ca_args.extend(["-pkeyopt", "ec_paramgen_curve:P-256"]);
        }
        openssl(&dir, &ca_args);
        let pki = Pki {
            ca: dir.join("ca.pem").display().to_string(),
            cert: dir.join("cert.pem").display().to_string(),
            key: dir.join("key.pem").display().to_string(),
            dir,
        };
        pki.issue(kind, "localhost", "cert.pem", "key.pem");
        pki
    }

    /// A leaf named `cn` (SAN localhost, 127.0.0.1) signed by the CA,
    /// written as `cert` (leaf then CA) and `key` in the directory.
    pub fn issue(&self, kind: &str, cn: &str, cert: &str, key: &str) {
        self.issue_for_days(kind, cn, cert, key, "2");
    }

    /// [`Pki::issue`] valid for `days` ("-1": expired since it was made).
    pub fn issue_for_days(&self, kind: &str, cn: &str, cert: &str, key: &str, days: &str) {
        let newkey = if kind == "rsa" { "rsa:2048" } else { "ec" };
        let mut args = vec!["req", "-newkey", newkey, "-nodes", "-keyout", key, "-out", "leaf.csr", "-subj"];
        let subj = format!("/CN={cn}");
        args.push(&subj);
        if kind != "rsa" {
            args.extend(["-pkeyopt", "ec_paramgen_curve:P-256"]);
        }
        openssl(&self.dir, &args);
        std::fs::write(self.dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                days,
                "-extfile",
                "san.ext",
                "-out",
                "leaf.pem",
            ],
        );
        let chain = [std::fs::read(self.dir.join("leaf.pem")).unwrap(), std::fs::read(self.dir.join("ca.pem")).unwrap()].concat();
        // Replace atomically, as a certificate manager would.
        let tmp = self.dir.join(format!("{cert}.tmp"));
        std::fs::write(&tmp, chain).unwrap();
        std::fs::rename(&tmp, self.dir.join(cert)).unwrap();
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
