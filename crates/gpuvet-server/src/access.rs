//! Reads need the server's read token when it was started with one
//! (`GPUVET_READ_TOKEN`): the JSON API, the pages and `/metrics`. Without one, reads
//! are open, as before.
//!
//! What stays open, and why:
//! - `/api/v1/openapi.json`: the shape of the API, no fleet data; tools (client
//!   generators, schemathesis) read it before they hold any credential.
//! - `/api/v1/health`: says only `ok` and the version; probes (a Kubernetes
//!   `readinessProbe`) call it without a secret in the Pod's spec.
//! - the pushes (`POST` of attempts, reports and events): they need the write token
//!   instead (`auth.rs`), so a node never holds the read token.
//! - `/session/{ticket}`: the one-time link below; the ticket is its own credential.
//!
//! Everything else is guarded, unknown addresses included: the guard is one layer over
//! the whole router that lets through only the routes named here, so a route added
//! later is guarded unless it is named.
//!
//! The write token grants no reads. Every node holds the write token (in its
//! environment, often in a Kubernetes Secret mounted into every job's pods); the read
//! token is held by the people and tools that look at the fleet. A node taken over
//! must not be able to read every other node's names, serials and findings.
//!
//! API clients send `Authorization: Bearer <read token>`. A browser cannot, so pages
//! get a session cookie, made without the token ever being in a URL:
//! 1. `POST /api/v1/session` with the bearer read token answers a one-time link
//!    `/session/<ticket>`, valid for a minute and for one use. The server never prints
//!    a link itself: its stderr is a log, and a link in a log is a credential in a log.
//! 2. Opening the link sets the cookie `gpuvet_session` (`HttpOnly`, so no script
//!    reads it; `SameSite=Strict`, so no other site's page sends it; `Path=/`) for 8
//!    hours, and moves on to `/`. It moves on with a page that refreshes itself rather
//!    than a 303: a browser that followed the link from another site (a chat, a mail)
//!    would not send a `Strict` cookie on a redirect of that same navigation, but it
//!    does on one the server's own page starts.
//! 3. Every response carries `Referrer-Policy: no-referrer`, so neither the link nor a
//!    page's address (job and node names) goes to another site in a `Referer`.
//!
//! The ticket and the cookie are not the token: each is `EXPIRY.NONCE.MAC`, the MAC an
//! HMAC-SHA256 with a key derived from the read token, over what it is for (a link or
//! a session), its expiry and a random nonce. So any server started with the same read
//! token (replicas behind one Service) takes them, nothing is stored per session, and
//! changing the read token ends every session. A link is refused once this server has
//! taken it; a replica knows only the links it took itself, so a stolen link could
//! open one more session on another replica within its minute.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use gpuvet_model::env_vars::{READ_TOKEN, REPORT_TOKEN};
use gpuvet_model::hex::to_hex;
use gpuvet_model::ids::{is_id, new_id};
use gpuvet_model::time::unix_now_ms;
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::same_secret;
use crate::error::{ApiError, ErrorBody};
use crate::extract::Path;

/// The cookie that carries a page session.
pub(crate) const SESSION_COOKIE: &str = "gpuvet_session";

/// How long a one-time link may wait to be opened.
pub(crate) const LINK_LIFETIME_MS: u64 = 60_000;

/// How long a page session lasts: a working day.
pub(crate) const SESSION_LIFETIME_MS: u64 = 8 * 60 * 60 * 1000;

/// Routes anyone may call (their templates, as the router matched them).
const OPEN_ROUTES: [&str; 3] = [
    "/api/v1/openapi.json",
    "/api/v1/health",
    "/session/{ticket}",
];

/// Routes whose `POST` is a push, which needs the write token instead.
const PUSH_ROUTES: [&str; 3] = ["/api/v1/attempts", "/api/v1/reports", "/api/v1/events"];

type HmacSha256 = Hmac<Sha256>;

/// The read token of a server, and what it has signed.
#[derive(Debug)]
pub(crate) struct ReadAccess {
    token: String,
    /// Signs links and sessions; derived from the token, never sent.
    key: [u8; 32],
    /// Nonces of the links taken, until they expire: a link opens one session.
    taken: Mutex<HashMap<String, u64>>,
    /// The cookie is `Secure` when the server serves HTTPS.
    secure: AtomicBool,
}

/// What a signed value is for; a link cannot pass for a session or the other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Link,
    Session,
}

impl Purpose {
    fn as_str(self) -> &'static str {
        match self {
            Purpose::Link => "link",
            Purpose::Session => "session",
        }
    }
}

/// Why a signed value is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// Not of the form this server makes, or signed with another key.
    Forged,
    Expired,
    /// A link this server has taken already.
    Used,
}

/// Why a read is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No bearer token and no session cookie.
    NoCredential,
    WrongToken,
    /// A session cookie that is forged or expired.
    SessionEnded,
}

impl ReadAccess {
    /// The read token itself, a secret to cut from what nodes push.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn new(token: &str) -> ReadAccess {
        let mut derive = new_mac(token.as_bytes());
        derive.update(b"gpuvet-server read sessions v1");
        ReadAccess {
            token: token.to_owned(),
            key: derive.finalize().into_bytes().into(),
            taken: Mutex::new(HashMap::new()),
            secure: AtomicBool::new(false),
        }
    }

    /// Marks the session cookie `Secure`: the server speaks only HTTPS, so a browser
    /// must never send it in clear.
    pub fn set_secure(&self) {
        self.secure.store(true, Ordering::Relaxed);
    }

    fn mac(&self, purpose: Purpose, expires_at_ms: u64, nonce: &str) -> String {
        let mut mac = new_mac(&self.key);
        mac.update(format!("{}.{expires_at_ms}.{nonce}", purpose.as_str()).as_bytes());
        to_hex(&mac.finalize().into_bytes())
    }

    /// A new signed value: `EXPIRY.NONCE.MAC`.
    fn sign(&self, purpose: Purpose, expires_at_ms: u64) -> String {
        let nonce = new_id();
        let mac = self.mac(purpose, expires_at_ms, &nonce);
        format!("{expires_at_ms}.{nonce}.{mac}")
    }

    /// The nonce and expiry of `value` when this server signed it for `purpose` and it
    /// has not expired at `now_ms`.
    fn verify<'a>(
        &self,
        purpose: Purpose,
        value: &'a str,
        now_ms: u64,
    ) -> Result<(&'a str, u64), Invalid> {
        let mut parts = value.split('.');
        let (Some(expires), Some(nonce), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Invalid::Forged);
        };
        let expires_at_ms = expires.parse::<u64>().map_err(|_| Invalid::Forged)?;
        if !is_id(nonce) {
            return Err(Invalid::Forged);
        }
        let expected = self.mac(purpose, expires_at_ms, nonce);
        if !same_secret(mac.as_bytes(), expected.as_bytes()) {
            return Err(Invalid::Forged);
        }
        if now_ms >= expires_at_ms {
            return Err(Invalid::Expired);
        }
        Ok((nonce, expires_at_ms))
    }

    /// A one-time link's ticket, valid from `now_ms` for [`LINK_LIFETIME_MS`].
    pub fn new_link(&self, now_ms: u64) -> String {
        self.sign(Purpose::Link, now_ms + LINK_LIFETIME_MS)
    }

    /// Takes the link `ticket` at `now_ms`: the value of a new session cookie, or why
    /// not. A link is taken once.
    pub fn take_link(&self, ticket: &str, now_ms: u64) -> Result<String, Invalid> {
        let (nonce, expires_at_ms) = self.verify(Purpose::Link, ticket, now_ms)?;
        let mut taken = self
            .taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Expired links are refused by their signature; they need no keeping.
        taken.retain(|_, expires| *expires > now_ms);
        if taken.contains_key(nonce) {
            return Err(Invalid::Used);
        }
        taken.insert(nonce.to_owned(), expires_at_ms);
        Ok(self.sign(Purpose::Session, now_ms + SESSION_LIFETIME_MS))
    }

    /// Whether `token` is the read token.
    fn is_token(&self, token: &str) -> bool {
        same_secret(token.as_bytes(), self.token.as_bytes())
    }

    /// `Ok` when `headers` carry the read token as a bearer token, or else a session
    /// cookie valid at `now_ms`. A bearer token, when there is one, decides alone.
    pub fn admits(&self, headers: &HeaderMap, now_ms: u64) -> Result<(), Denied> {
        if let Some(given) = bearer(headers) {
            return if self.is_token(given) {
                Ok(())
            } else {
                Err(Denied::WrongToken)
            };
        }
        let Some(session) = session_cookie(headers) else {
            return Err(Denied::NoCredential);
        };
        self.verify(Purpose::Session, session, now_ms)
            .map(drop)
            .map_err(|_| Denied::SessionEnded)
    }
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    <HmacSha256 as Mac>::new_from_slice(key).expect("hmac accepts any key length")
}

/// The token of an `Authorization: Bearer` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
}

/// The value of the session cookie, from any `Cookie` header.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .find_map(|cookie| {
            cookie
                .trim()
                .strip_prefix(SESSION_COOKIE)
                .and_then(|rest| rest.strip_prefix('='))
        })
}

/// Whether a request to `route` (its template; `None`: no route matched) with
/// `method` goes through without the read token.
fn is_open(method: &Method, route: Option<&str>) -> bool {
    let Some(route) = route else {
        return false;
    };
    OPEN_ROUTES.contains(&route) || (method == Method::POST && PUSH_ROUTES.contains(&route))
}

/// Middleware over every route: with a read token, a read without it is a 401.
pub(crate) async fn require_read(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(access) = &state.read else {
        return next.run(request).await;
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    if is_open(request.method(), route) {
        return next.run(request).await;
    }
    match access.admits(request.headers(), unix_now_ms()) {
        Ok(()) => next.run(request).await,
        Err(denied) => refusal(request.uri().path(), denied),
    }
}

/// How to get a sign-in link, for messages.
const HOW_TO_SIGN_IN: &str = "POST /api/v1/session with the read token in an `Authorization: Bearer` header answers a one-time link; open it within a minute";

/// The 401 of a read: the API's JSON error under `/api/` and at `/metrics`, a page
/// that says how to sign a browser in elsewhere.
fn refusal(path: &str, denied: Denied) -> Response {
    let (message, hint) = match denied {
        Denied::NoCredential => (
            "reading this server needs its read token in an `Authorization: Bearer` header"
                .to_owned(),
            format!(
                "set `{READ_TOKEN}` to the server's read token (`gpuvet timeline|explain|bundle --server` send it from there); for the pages, {HOW_TO_SIGN_IN}"
            ),
        ),
        Denied::WrongToken => (
            "the read token does not match the server's".to_owned(),
            format!(
                "set `{READ_TOKEN}` to the read token the server was started with; the write token (`{REPORT_TOKEN}`) grants no reads"
            ),
        ),
        Denied::SessionEnded => (
            "this browser's session has ended, or was made by a server with another read token"
                .to_owned(),
            format!("sign in again: {HOW_TO_SIGN_IN}"),
        ),
    };
    let mut response = if path.starts_with("/api/") || path == "/metrics" {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
            .with_hint(hint)
            .into_response()
    } else {
        crate::pages::html_error(
            StatusCode::UNAUTHORIZED,
            "Sign-in needed",
            &format!("{message}. To sign this browser in: {HOW_TO_SIGN_IN}."),
        )
    };
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"gpuvet\""),
    );
    response
}

/// Every response: no `Referer` to other sites, whatever the page's address holds.
pub(crate) async fn no_referrer(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// A one-time sign-in link for a browser.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionLink {
    /// The link's path on this server, `/session/TICKET`: open it in a browser (after
    /// the server's own `http://HOST:PORT`) to sign the browser in.
    path: String,
    /// Seconds the link waits to be opened; it opens one session.
    expires_in_secs: u64,
}

#[utoipa::path(post, path = "/api/v1/session", tag = "server",
    security(("read_token" = [])),
    responses((status = 200, description = "A one-time link that signs a browser in to the pages", body = SessionLink),
              (status = 401, description = "No read token, or not the server's", body = ErrorBody),
              (status = 404, description = "The server has no read token: its pages are open", body = ErrorBody)))]
pub(crate) async fn new_session_link(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(access) = &state.read else {
        return Err(ApiError::not_found(
            "this server has no read token: its pages and API are open to every reader",
        )
        .with_hint(format!(
            "start `gpuvet serve` with `{READ_TOKEN}` set to guard its reads"
        )));
    };
    // Only the token makes a link: a session cannot stretch itself with new ones.
    if !bearer(&headers).is_some_and(|given| access.is_token(given)) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a sign-in link is made only for the read token in an `Authorization: Bearer` header",
        )
        .with_hint(format!("set `{READ_TOKEN}` to the server's read token")));
    }
    let link = SessionLink {
        path: format!("/session/{}", access.new_link(unix_now_ms())),
        expires_in_secs: LINK_LIFETIME_MS / 1000,
    };
    Ok((
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(link),
    )
        .into_response())
}

/// `GET /session/{ticket}`: takes a one-time link, sets the session cookie and moves on
/// to `/`.
pub(crate) async fn open_session_link(
    State(state): State<AppState>,
    Path(ticket): Path<String>,
) -> Response {
    let Some(access) = &state.read else {
        return crate::pages::html_error(
            StatusCode::NOT_FOUND,
            "No sign-in here",
            "this server has no read token: its pages are open, with no sign-in",
        );
    };
    let session = match access.take_link(&ticket, unix_now_ms()) {
        Ok(session) => session,
        Err(invalid) => {
            let why = match invalid {
                Invalid::Used => "this sign-in link was used already; a link signs in once",
                Invalid::Expired => "this sign-in link has expired; a link waits a minute",
                Invalid::Forged => {
                    "this is no sign-in link of this server (or of its current read token)"
                }
            };
            let mut response = crate::pages::html_error(
                StatusCode::UNAUTHORIZED,
                "Sign-in link refused",
                &format!("{why}. Ask for a new one: {HOW_TO_SIGN_IN}"),
            );
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return response;
        }
    };
    let secure = if access.secure.load(Ordering::Relaxed) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        SESSION_LIFETIME_MS / 1000
    );
    let mut response = Html(SIGNED_IN_PAGE).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a cookie of digits, hex and ASCII"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Moves on to `/` from the server's own page, so that the `Strict` cookie goes along.
const SIGNED_IN_PAGE: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"refresh\" content=\"0; url=/\"><title>gpuvet: signed in</title></head>\
<body><p>Signed in. <a href=\"/\">Go to the instances</a>.</p></body></html>\n";

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_link_opens_one_session_within_its_minute() {
        let access = ReadAccess::new("read-s3cret");
        let ticket = access.new_link(NOW);
        assert!(!ticket.contains("read-s3cret"), "{ticket}");
        let session = access
            .take_link(&ticket, NOW + LINK_LIFETIME_MS - 1)
            .unwrap();
        assert!(!session.contains("read-s3cret"), "{session}");
        assert_eq!(access.take_link(&ticket, NOW + 1), Err(Invalid::Used));

        let late = access.new_link(NOW);
        assert_eq!(
            access.take_link(&late, NOW + LINK_LIFETIME_MS),
            Err(Invalid::Expired)
        );
    }

    #[test]
    fn a_changed_expiry_nonce_or_mac_or_another_token_is_forged() {
        let access = ReadAccess::new("read-s3cret");
        let ticket = access.new_link(NOW);
        let parts: Vec<&str> = ticket.split('.').collect();
        let later = format!("{}.{}.{}", NOW + 3_600_000, parts[1], parts[2]);
        let other_nonce = format!("{}.{}.{}", parts[0], new_id(), parts[2]);
        let flipped = format!(
            "{}.{}.{}{}",
            parts[0],
            parts[1],
            &parts[2][..63],
            if parts[2].ends_with('0') { "1" } else { "0" }
        );
        for bad in [
            later.as_str(),
            other_nonce.as_str(),
            flipped.as_str(),
            "",
            "1.2.3.4",
            "x.y.z",
        ] {
            assert_eq!(access.take_link(bad, NOW), Err(Invalid::Forged), "{bad}");
        }
        let other = ReadAccess::new("another-token");
        assert_eq!(other.take_link(&ticket, NOW), Err(Invalid::Forged));
    }

    #[test]
    fn a_link_is_no_session_and_a_session_is_no_link() {
        let access = ReadAccess::new("t");
        let ticket = access.new_link(NOW);
        let cookie =
            |value: &str| headers(&[(header::COOKIE, &format!("{SESSION_COOKIE}={value}"))]);
        assert_eq!(
            access.admits(&cookie(&ticket), NOW),
            Err(Denied::SessionEnded)
        );
        let session = access.take_link(&ticket, NOW).unwrap();
        assert_eq!(access.admits(&cookie(&session), NOW), Ok(()));
        assert_eq!(access.take_link(&session, NOW), Err(Invalid::Forged));
    }

    #[test]
    fn reads_pass_with_the_bearer_token_or_a_live_session_and_nothing_else() {
        let access = ReadAccess::new("read-s3cret");
        let session = access.take_link(&access.new_link(NOW), NOW).unwrap();
        let with_session = format!("theme=dark; {SESSION_COOKIE}={session}; other=1");
        for (given, expected) in [
            (
                headers(&[(header::AUTHORIZATION, "Bearer read-s3cret")]),
                Ok(()),
            ),
            (headers(&[(header::COOKIE, &with_session)]), Ok(())),
            (headers(&[]), Err(Denied::NoCredential)),
            (
                headers(&[(header::AUTHORIZATION, "Basic read-s3cret")]),
                Err(Denied::NoCredential),
            ),
            (
                headers(&[(header::AUTHORIZATION, "Bearer read-s3cre")]),
                Err(Denied::WrongToken),
            ),
            // A wrong bearer token is not rescued by a good cookie.
            (
                headers(&[
                    (header::AUTHORIZATION, "Bearer wrong"),
                    (header::COOKIE, &with_session),
                ]),
                Err(Denied::WrongToken),
            ),
            (
                headers(&[(header::COOKIE, "gpuvet_session=1.2.3")]),
                Err(Denied::SessionEnded),
            ),
            (
                headers(&[(header::COOKIE, "gpuvet_sessionx=1")]),
                Err(Denied::NoCredential),
            ),
        ] {
            assert_eq!(access.admits(&given, NOW), expected, "{given:?}");
        }
        let cookie = headers(&[(header::COOKIE, &with_session)]);
        assert_eq!(
            access.admits(&cookie, NOW + SESSION_LIFETIME_MS),
            Err(Denied::SessionEnded)
        );
    }

    #[test]
    fn only_the_named_open_routes_and_pushes_skip_the_read_token() {
        for (method, route, open) in [
            (Method::GET, Some("/api/v1/health"), true),
            (Method::GET, Some("/api/v1/openapi.json"), true),
            (Method::GET, Some("/session/{ticket}"), true),
            (Method::POST, Some("/api/v1/reports"), true),
            (Method::POST, Some("/api/v1/events"), true),
            (Method::POST, Some("/api/v1/attempts"), true),
            (Method::GET, Some("/api/v1/events"), false),
            (Method::GET, Some("/api/v1/reports"), false),
            (Method::POST, Some("/api/v1/session"), false),
            (Method::GET, Some("/metrics"), false),
            (Method::GET, Some("/"), false),
            (Method::GET, None, false),
            (Method::POST, None, false),
        ] {
            assert_eq!(is_open(&method, route), open, "{method} {route:?}");
        }
    }
}
