//! Why a TLS handshake failed, named for a counter label
//! (`tls_handshake_failures{reason}`) and a close reason; and why a
//! connection was closed after it (`closed{reason}`).

use rustls::{AlertDescription, CertificateError, Error};

/// Cleartext (an HTTP request, a telnet) sent to a TLS port.
pub(crate) const PLAINTEXT: &str = "tls_plaintext";
/// The handshake did not finish within `--handshake-timeout`.
pub(crate) const TIMEOUT: &str = "tls_timeout";
/// The peer closed before the handshake finished.
pub(crate) const EOF: &str = "tls_eof";
/// More KeyUpdates than [`super::records::MAX_KEY_UPDATES`] with no
/// application data in between.
pub(crate) const KEY_UPDATE_LIMIT: &str = "tls_key_update_limit";
/// A malformed KeyUpdate (a request byte other than 0 or 1, a body of
/// another length), answered with the alert RFC 8446 names for it.
pub(crate) const BAD_KEY_UPDATE: &str = "tls_bad_key_update";

/// `tls_alert_<name>` for an alert the peer sent, else what we found wrong.
pub(crate) fn reason_of(e: &Error) -> String {
    match e {
        Error::AlertReceived(a) => format!("tls_alert_{}", alert_name(*a)),
        Error::NoApplicationProtocol => "tls_no_application_protocol".into(),
        Error::PeerIncompatible(_) => "tls_peer_incompatible".into(),
        Error::PeerMisbehaved(_) => "tls_peer_misbehaved".into(),
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } | Error::InappropriateHandshakeMessage { .. } => "tls_bad_message".into(),
        Error::DecryptError => "tls_decrypt_error".into(),
        Error::InvalidCertificate(c) => format!("tls_certificate_{}", certificate_name(c)),
        _ => "tls_error".into(),
    }
}

/// A certificate problem in the words a user searches for.
pub(crate) fn certificate_name(c: &CertificateError) -> &'static str {
    match c {
        CertificateError::UnknownIssuer => "unknown_ca",
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => "name_mismatch",
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired",
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => "not_yet_valid",
        CertificateError::Revoked => "revoked",
        CertificateError::BadSignature => "bad_signature",
        CertificateError::BadEncoding => "bad_encoding",
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => "invalid_purpose",
        CertificateError::UnsupportedSignatureAlgorithmContext { .. } => "unsupported_signature_algorithm",
        // A CA certificate served as the server's own (e.g. `openssl req
        // -x509` output used directly): serve a leaf signed by the CA.
        CertificateError::Other(e) if format!("{e:?}").contains("CaUsedAsEndEntity") => "ca_used_as_end_entity",
        _ => "invalid",
    }
}

/// `bad_certificate` from `BadCertificate`.
pub(crate) fn alert_name(a: AlertDescription) -> String {
    let debug = format!("{a:?}");
    let mut out = String::with_capacity(debug.len() + 4);
    let mut prev_lower = false;
    for ch in debug.chars() {
        if ch.is_ascii_uppercase() && prev_lower {
            out.push('_');
        }
        prev_lower = ch.is_ascii_lowercase() || ch.is_ascii_digit();
        out.push(ch.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_and_certificates_are_named() {
        assert_eq!(reason_of(&Error::AlertReceived(AlertDescription::BadCertificate)), "tls_alert_bad_certificate");
        assert_eq!(reason_of(&Error::AlertReceived(AlertDescription::UnknownCA)), "tls_alert_unknown_ca");
        assert_eq!(reason_of(&Error::InvalidCertificate(CertificateError::Expired)), "tls_certificate_expired");
        assert_eq!(reason_of(&Error::InvalidCertificate(CertificateError::UnknownIssuer)), "tls_certificate_unknown_ca");
    }
}
