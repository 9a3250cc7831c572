//! Authentication: a shared token, random nonces, and HMAC-SHA256 proofs in both
//! directions.
//!
//! The agent proves it holds the token by answering the coordinator's nonce; the
//! coordinator proves the same by answering the agent's nonce, so an agent never takes
//! commands from a stray coordinator. Each proof is
//! `HMAC-SHA256(token, label ‖ nonce ‖ len(job_id) ‖ job_id ‖ rank)`: the label keeps
//! one direction's proof from being replayed as the other's, and the fixed-width
//! length and rank keep `job "a1", rank 2` apart from `job "a", rank 12`.
//!
//! The data plane between agents never sees the token: each run the coordinator picks a
//! random session id, and every agent derives the run's data-plane key from the token,
//! the job id and that session ([`data_plane_key`]). A greeting recorded in one run
//! proves nothing in the next, and the key cannot be turned back into the token.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::ClusterError;

/// Hex as the frames carry it; the one implementation is `gpuvet_model`'s.
pub use gpuvet_model::hex::{from_hex, to_hex};

/// Bytes in a nonce; as long as the MAC, so guessing one is no easier than forging it.
pub const NONCE_LEN: usize = 32;

const AGENT_LABEL: &[u8] = b"gpuvet/agent-proof/v1\0";
const COORDINATOR_LABEL: &[u8] = b"gpuvet/coordinator-proof/v1\0";
const DATA_PLANE_LABEL: &[u8] = b"gpuvet/data-plane-key/v1\0";

/// The shortest token accepted, in bytes: 128 bits even for a token of random bytes;
/// a hex token needs 32 digits to carry as much.
pub const MIN_TOKEN_BYTES: usize = 16;
/// How to make a good token, for the hint of a refused one.
pub const TOKEN_HINT: &str =
    "generate one with `openssl rand -hex 32` and give every node the same value in `GPUVET_TOKEN`";

type HmacSha256 = Hmac<Sha256>;

/// The group's shared secret. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from `GPUVET_TOKEN`. Surrounding whitespace is dropped, since a secret
    /// mounted from a file often ends with a newline on some nodes only. A token shorter
    /// than [`MIN_TOKEN_BYTES`] is refused: anyone who can reach a node could guess it.
    pub fn new(secret: impl AsRef<str>) -> Result<Token, ClusterError> {
        Token::from_setting(secret, "`GPUVET_TOKEN`")
    }

    /// [`Token::new`] for a secret from the setting `name` (quoted, e.g. "`--token`"),
    /// which errors then name.
    pub fn from_setting(secret: impl AsRef<str>, name: &str) -> Result<Token, ClusterError> {
        let secret = secret.as_ref().trim();
        if secret.is_empty() {
            return Err(ClusterError::InvalidSetting {
                name: name.to_owned(),
                value: String::new(),
                expected: "a non-empty secret shared by every node".to_owned(),
            });
        }
        if secret.len() < MIN_TOKEN_BYTES {
            // The value stays out of the message: it is a secret, if a weak one.
            return Err(ClusterError::WeakToken {
                name: name.to_owned(),
                len: secret.len(),
                min: MIN_TOKEN_BYTES,
            });
        }
        Ok(Token(secret.to_owned()))
    }

    /// A fresh random token (64 hex digits), e.g. for agents spawned on one machine.
    pub fn random() -> Result<Token, ClusterError> {
        Ok(Token(to_hex(&random_nonce()?)))
    }

    /// The secret itself, to hand to a child process; never log it.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        <HmacSha256 as Mac>::new_from_slice(self.0.as_bytes()).expect("hmac accepts any key length")
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// A nonce from the operating system's random source.
pub fn random_nonce() -> Result<[u8; NONCE_LEN], ClusterError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|err| {
        ClusterError::io(
            "cannot read the system's random source",
            std::io::Error::other(err.to_string()),
        )
    })?;
    Ok(nonce)
}

/// The agent's answer to the coordinator's nonce.
pub fn agent_proof(token: &Token, nonce: &[u8], job_id: &str, rank: u32) -> [u8; 32] {
    proof(token, AGENT_LABEL, nonce, job_id, rank)
}

/// Whether `proof` is the agent's answer for this nonce, job and rank; constant-time.
pub fn verify_agent_proof(
    token: &Token,
    nonce: &[u8],
    job_id: &str,
    rank: u32,
    proof: &[u8],
) -> bool {
    verify(token, AGENT_LABEL, nonce, job_id, rank, proof)
}

/// The coordinator's answer to the agent's nonce.
pub fn coordinator_proof(token: &Token, nonce: &[u8], job_id: &str, rank: u32) -> [u8; 32] {
    proof(token, COORDINATOR_LABEL, nonce, job_id, rank)
}

/// Whether `proof` is the coordinator's answer for this nonce, job and rank; constant-time.
pub fn verify_coordinator_proof(
    token: &Token,
    nonce: &[u8],
    job_id: &str,
    rank: u32,
    proof: &[u8],
) -> bool {
    verify(token, COORDINATOR_LABEL, nonce, job_id, rank, proof)
}

/// Bytes in a data-plane session id.
pub const SESSION_LEN: usize = 16;

/// A fresh data-plane session id from the operating system's random source.
pub fn random_session() -> Result<[u8; SESSION_LEN], ClusterError> {
    let mut session = [0u8; SESSION_LEN];
    session.copy_from_slice(&random_nonce()?[..SESSION_LEN]);
    Ok(session)
}

/// The key of one run's data plane: `HMAC-SHA256(token, label ‖ len(job_id) ‖ job_id ‖
/// session)`, where `session` is the random id the coordinator chose for the run. Every
/// agent of the run derives the same key; a stranger without the token cannot.
pub fn data_plane_key(token: &Token, job_id: &str, session: &[u8]) -> [u8; 32] {
    let mut mac = token.mac();
    mac.update(DATA_PLANE_LABEL);
    mac.update(&length_prefix(job_id));
    mac.update(job_id.as_bytes());
    mac.update(session);
    mac.finalize().into_bytes().into()
}

fn length_prefix(text: &str) -> [u8; 4] {
    // A job id longer than u32::MAX bytes cannot arrive in a 16 MiB frame.
    u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes()
}

fn keyed(token: &Token, label: &[u8], nonce: &[u8], job_id: &str, rank: u32) -> HmacSha256 {
    let mut mac = token.mac();
    mac.update(label);
    mac.update(nonce);
    mac.update(&length_prefix(job_id));
    mac.update(job_id.as_bytes());
    mac.update(&rank.to_be_bytes());
    mac
}

fn proof(token: &Token, label: &[u8], nonce: &[u8], job_id: &str, rank: u32) -> [u8; 32] {
    keyed(token, label, nonce, job_id, rank)
        .finalize()
        .into_bytes()
        .into()
}

fn verify(
    token: &Token,
    label: &[u8],
    nonce: &[u8],
    job_id: &str,
    rank: u32,
    proof: &[u8],
) -> bool {
    keyed(token, label, nonce, job_id, rank)
        .verify_slice(proof)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token of at least [`MIN_TOKEN_BYTES`] made from a short name.
    fn token(name: &str) -> Token {
        Token::new(format!("{name}-0123456789abcdef")).unwrap()
    }

    #[test]
    fn a_proof_verifies_only_for_its_token_nonce_job_and_rank() {
        let nonce = [7u8; NONCE_LEN];
        let proof = agent_proof(&token("s3cret"), &nonce, "job-1", 2);
        assert!(verify_agent_proof(
            &token("s3cret"),
            &nonce,
            "job-1",
            2,
            &proof
        ));
        assert!(!verify_agent_proof(
            &token("other"),
            &nonce,
            "job-1",
            2,
            &proof
        ));
        assert!(!verify_agent_proof(
            &token("s3cret"),
            &[8u8; NONCE_LEN],
            "job-1",
            2,
            &proof
        ));
        assert!(!verify_agent_proof(
            &token("s3cret"),
            &nonce,
            "job-2",
            2,
            &proof
        ));
        assert!(!verify_agent_proof(
            &token("s3cret"),
            &nonce,
            "job-1",
            3,
            &proof
        ));
        assert!(!verify_agent_proof(
            &token("s3cret"),
            &nonce,
            "job-1",
            2,
            &proof[..31]
        ));
    }

    #[test]
    fn proofs_of_the_two_directions_differ() {
        let nonce = [1u8; NONCE_LEN];
        let agent = agent_proof(&token("t"), &nonce, "j", 0);
        assert!(!verify_coordinator_proof(
            &token("t"),
            &nonce,
            "j",
            0,
            &agent
        ));
        let coordinator = coordinator_proof(&token("t"), &nonce, "j", 0);
        assert!(verify_coordinator_proof(
            &token("t"),
            &nonce,
            "j",
            0,
            &coordinator
        ));
    }

    #[test]
    fn job_and_rank_boundaries_cannot_be_shifted() {
        let nonce = [0u8; NONCE_LEN];
        let a = agent_proof(&token("t"), &nonce, "a1", 2);
        assert!(!verify_agent_proof(&token("t"), &nonce, "a", 12, &a));
    }

    #[test]
    fn tokens_are_trimmed_redacted_and_never_empty() {
        assert_eq!(
            Token::new(" abcdefghijklmnop\n").unwrap(),
            Token::new("abcdefghijklmnop").unwrap()
        );
        assert_eq!(format!("{:?}", token("abc")), "Token(<redacted>)");
        let err = Token::new(" \n").unwrap_err().to_string();
        assert!(err.contains("`GPUVET_TOKEN`"), "{err}");
        let random = Token::random().unwrap();
        assert_eq!(random.reveal().len(), 64);
        assert_ne!(random, Token::random().unwrap());
    }

    #[test]
    fn short_tokens_are_refused_without_showing_them() {
        for short in ["s3cret", "fifteen-bytes!!"] {
            let err = Token::new(short).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("`GPUVET_TOKEN` is {} bytes long", short.len()))
                    && text.contains("at least 16 bytes"),
                "{text}"
            );
            assert!(!text.contains(short), "the secret leaked: {text}");
            assert!(err.hint().unwrap().contains("openssl rand -hex 32"));
        }
        // Whitespace does not count towards the length.
        assert!(Token::new(" fifteen-bytes!! \n").is_err());
        assert!(Token::new("sixteen-bytes!!!").is_ok());
        let err = Token::from_setting("x", "`--token`")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("`--token` is 1 byte long"), "{err}");
    }

    #[test]
    fn data_plane_keys_differ_by_token_job_and_session() {
        let key = data_plane_key(&token("a"), "job", &[1; SESSION_LEN]);
        assert_eq!(key, data_plane_key(&token("a"), "job", &[1; SESSION_LEN]));
        assert_ne!(key, data_plane_key(&token("b"), "job", &[1; SESSION_LEN]));
        assert_ne!(key, data_plane_key(&token("a"), "job2", &[1; SESSION_LEN]));
        assert_ne!(key, data_plane_key(&token("a"), "job", &[2; SESSION_LEN]));
        // Not the proof of an agent: the label keeps the two apart.
        assert_ne!(key, agent_proof(&token("a"), &[1; SESSION_LEN], "job", 0));
    }
}
