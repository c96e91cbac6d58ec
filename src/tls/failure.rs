//! Why a TLS handshake failed, named for a counter label
//! (`tls_handshake_failures{reason}`) and a close reason; and why a
//! connection was closed after it (`closed{reason}`).

use rustls::{AlertDescription, CertificateError, Error};

/// Cleartext (an HTTP request, a telnet) sent to a TLS port
/// ([`TlsError::Plaintext`]'s label).
pub(crate) const PLAINTEXT: &str = "tls_plaintext";
/// The handshake did not finish within `--handshake-timeout`.
pub(crate) const TIMEOUT: &str = "tls_timeout";
/// The peer closed before the handshake finished.
pub(crate) const EOF: &str = "tls_eof";

/// Why a TLS connection cannot go on, as the data path returns it: each
/// variant one label (its `Display`), which is the close reason and the
/// `tls_handshake_failures{reason}` / `closed{reason}` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TlsError {
    /// Cleartext (an HTTP request, a telnet) sent to a TLS port.
    #[error("tls_plaintext")]
    Plaintext,
    /// The peer sent this fatal alert.
    #[error("tls_alert_{}", alert_name(*.0))]
    Alert(AlertDescription),
    /// The peer's certificate, as [`certificate_name`] names the problem.
    #[error("tls_certificate_{0}")]
    Certificate(&'static str),
    #[error("tls_no_application_protocol")]
    NoApplicationProtocol,
    #[error("tls_peer_incompatible")]
    PeerIncompatible,
    #[error("tls_peer_misbehaved")]
    PeerMisbehaved,
    /// A record or handshake message that does not parse, or is not
    /// allowed where it came.
    #[error("tls_bad_message")]
    BadMessage,
    #[error("tls_decrypt_error")]
    DecryptError,
    /// A record longer than TLS allows, or than the buffer it goes into.
    #[error("tls_record_overflow")]
    RecordOverflow,
    /// A handshake message after the handshake (renegotiation included).
    #[error("tls_unexpected_handshake")]
    UnexpectedHandshake,
    /// 0-RTT data, which is never enabled (no replays).
    #[error("tls_early_data")]
    EarlyData,
    /// More KeyUpdates than [`super::records::MAX_KEY_UPDATES`] with no
    /// application data in between.
    #[error("tls_key_update_limit")]
    KeyUpdateLimit,
    /// A malformed KeyUpdate, answered with the alert RFC 8446 names.
    #[error("tls_bad_key_update")]
    BadKeyUpdate,
    /// A TLS 1.2 AES-GCM key at its record limit (1.3 updates the key).
    #[error("tls_record_limit")]
    RecordLimit,
    /// The negotiated cipher is not one our record layer seals.
    #[error("tls_unsupported_cipher")]
    UnsupportedCipher,
    /// A key update changed the cipher.
    #[error("tls_cipher_changed")]
    CipherChanged,
    /// A key update on records with no rustls remainder (fuzzing).
    #[error("tls_key_update_unsupported")]
    KeyUpdateUnsupported,
    /// rustls would not hand the traffic keys over after the handshake.
    #[error("tls_key_handover")]
    KeyHandover,
    /// rustls asked for after the keys moved to our record layer.
    #[error("tls_handed_over")]
    HandedOver,
    /// Data to send before the handshake finished.
    #[error("tls_handshaking")]
    Handshaking,
    /// Data to send on a closed connection.
    #[error("tls_closed")]
    Closed,
    #[error("tls_encrypt_failed")]
    EncryptFailed,
    #[error("tls_encode_failed")]
    EncodeFailed,
    /// rustls kept asking to encode without getting to the data (bounded).
    #[error("tls_encode_loop")]
    EncodeLoop,
    /// Any other rustls error.
    #[error("tls_error")]
    Other,
}

impl From<&Error> for TlsError {
    /// `tls_alert_<name>` for an alert the peer sent, else what we found wrong.
    fn from(e: &Error) -> TlsError {
        match e {
            Error::AlertReceived(a) => TlsError::Alert(*a),
            Error::NoApplicationProtocol => TlsError::NoApplicationProtocol,
            Error::PeerIncompatible(_) => TlsError::PeerIncompatible,
            Error::PeerMisbehaved(_) => TlsError::PeerMisbehaved,
            Error::InvalidMessage(_) | Error::InappropriateMessage { .. } | Error::InappropriateHandshakeMessage { .. } => TlsError::BadMessage,
            Error::DecryptError => TlsError::DecryptError,
            Error::InvalidCertificate(c) => TlsError::Certificate(certificate_name(c)),
            _ => TlsError::Other,
        }
    }
}

impl From<TlsError> for std::io::Error {
    /// Through the read path's `io::Result` (`net::Source`), typed still:
    /// [`TlsError::of`] finds it again.
    fn from(e: TlsError) -> std::io::Error {
        std::io::Error::other(e)
    }
}

impl TlsError {
    /// The TLS failure an I/O error carries, if it carries one.
    pub(crate) fn of(e: &std::io::Error) -> Option<TlsError> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<TlsError>()).copied()
    }
}

/// The label of a rustls error (a handshake failure's counter label).
pub(crate) fn reason_of(e: &Error) -> String {
    TlsError::from(e).to_string()
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
        assert_eq!(TlsError::Plaintext.to_string(), PLAINTEXT);
        assert_eq!(TlsError::KeyUpdateLimit.to_string(), "tls_key_update_limit");
        assert_eq!(TlsError::BadKeyUpdate.to_string(), "tls_bad_key_update");
    }

    /// A failure sent through the read path's io::Error comes out typed.
    #[test]
    fn a_failure_survives_the_io_error_it_travels_in() {
        let e: std::io::Error = TlsError::Alert(AlertDescription::HandshakeFailure).into();
        assert_eq!(TlsError::of(&e), Some(TlsError::Alert(AlertDescription::HandshakeFailure)));
        assert_eq!(e.to_string(), "tls_alert_handshake_failure");
        assert_eq!(TlsError::of(&std::io::Error::other("tls_plaintext")), None);
    }
}
