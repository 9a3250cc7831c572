//! Removing secrets before anything is stored or packed into a fault bundle: by the
//! name they sit under (`HF_TOKEN`, `"password"`), by their shape (`Bearer ...`, a JWT,
//! a URL's credentials, a long random string), and by value, for secrets the caller
//! knows (the group's token, the report token), wherever they appear.
//!
//! Pure functions of their input. What is cut is replaced by [`REDACTED`]; names and
//! JSON keys are kept, so a reader still sees that a value was set.
//!
//! Command lines are also read by their programs' grammar (`command`): the value
//! after a credential flag is cut whatever it looks like (`curl -u admin:[redacted]`,
//! `mysql -p[redacted]`), in an argument vector and in a shell string alike.
//!
//! The shape rules cannot tell a hex secret from a digest: hex of 32, 40 or 64 digits
//! (report ids, git commits, sha256 sums, and gpuvet's own generated tokens) is never
//! flagged by shape alone. Such secrets are caught by their name or by being passed as
//! known.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

mod command;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Known secrets shorter than this many characters are not searched for: too likely to
/// match innocent text.
pub const MIN_KNOWN_SECRET_CHARS: usize = 8;

/// Words that make a name secret wherever they stand in it.
const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "pwd",
    "credential",
    "credentials",
    "creds",
    "auth",
    "authorization",
    "apikey",
    "apikeys",
    "privatekey",
    "accesskey",
    "secretkey",
    "sessionkey",
    "cookie",
    "cookies",
    "signature",
    // Variables read by programs, one word each: PostgreSQL's and sshpass's.
    "pgpassword",
    "sshpass",
];

/// Words that, followed by `key`, make a name secret (`API_KEY_ID`, `privateKey`).
const KEY_QUALIFIERS: &[&str] = &["api", "private", "access", "session", "secret", "signing"];

/// A last word that makes the name refer to a secret rather than hold one:
/// `GPUVET_TOKEN_FILE` is a path, `auth_enabled` a switch. Kept, since they help a
/// diagnosis and cannot leak the secret.
const REFERENCE_SUFFIXES: &[&str] = &[
    "file", "path", "dir", "env", "var", "name", "url", "uri", "host", "port", "endpoint", "type",
    "kind", "mode", "count", "len", "length", "size", "enabled", "required",
];

/// Prefixes of well-known token formats (GitHub, Hugging Face, OpenAI, Slack, GitLab).
const TOKEN_PREFIXES: &[&str] = &[
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "hf_",
    "sk-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxs-",
    "glpat-",
];

/// Characters of a long random-looking string (base64, base64url).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-')
}

/// The words of a name, lowercased, with trailing digits dropped (`KEY2` is `key`):
/// split on anything not a letter or digit and at camelCase boundaries (`apiKey`,
/// `APIKey`).
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    for piece in name.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            let boundary = cur.is_uppercase()
                && (prev.is_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_uppercase() && next_lower));
            if boundary {
                words.push(chars[start..i].iter().collect::<String>());
                start = i;
            }
        }
        words.push(chars[start..].iter().collect::<String>());
    }
    words
        .into_iter()
        .map(|w| {
            w.to_lowercase()
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .to_owned()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether a variable, key or flag name holds a secret: its words (split on `_`, `-`,
/// `.` and camelCase) include `token`, `secret`, `password`, `auth`, `cookie`, ... or
/// `api`/`private`/`access`/`session` followed by `key`, or its last word is `key`
/// (not `public key`). Words, not substrings: `tokenizer` and `monkey` are not secret.
/// A last word such as `file` or `path` makes it a reference (`GPUVET_TOKEN_FILE`), and
/// a bare `PWD` is the shell's working directory.
pub fn is_secret_name(name: &str) -> bool {
    let words = words(name);
    let Some(last) = words.last() else {
        return false;
    };
    if words.len() == 1 && last == "pwd" {
        return false;
    }
    if words.len() > 1 && REFERENCE_SUFFIXES.contains(&last.as_str()) {
        return false;
    }
    if words.iter().any(|w| SECRET_WORDS.contains(&w.as_str())) {
        return true;
    }
    let qualified_key = words.windows(2).any(|pair| {
        KEY_QUALIFIERS.contains(&pair[0].as_str()) && matches!(pair[1].as_str(), "key" | "keys")
    });
    let public = words.len() > 1 && words[words.len() - 2] == "public";
    qualified_key || (last == "key" && !public)
}

/// Whether a whole value looks like a secret, whatever name it sits under: an
/// `Authorization` scheme (`Bearer x`, `Basic x`), a URL with credentials, a PEM block,
/// a `NAME=value` or `Name: value` pair whose name is secret, or one token that looks
/// like one (see [`is_secret_token`]).
pub fn looks_like_secret_value(value: &str) -> bool {
    let value = value.trim();
    if value.is_empty() {
        return false;
    }
    if value.contains("-----BEGIN") || has_url_credentials(value) {
        return true;
    }
    let words: Vec<&str> = value.split_whitespace().collect();
    // `Basic mode` is prose; `Bearer` is hardly ever followed by anything but a token.
    if let [scheme, credential] = words[..]
        && is_auth_scheme(scheme)
        && credential != REDACTED
        && (scheme.eq_ignore_ascii_case("bearer") || looks_like_credential(credential))
    {
        return true;
    }
    if let Some((name, rest)) = split_pair(value)
        && is_secret_name(name)
        && !rest.trim().is_empty()
        && !rest.contains(REDACTED)
    {
        return true;
    }
    is_secret_token(value)
}

/// `Bearer` or `Basic`, the HTTP schemes whose next word is a credential.
fn is_auth_scheme(word: &str) -> bool {
    word.eq_ignore_ascii_case("bearer") || word.eq_ignore_ascii_case("basic")
}

/// `NAME=value` or `Name: value`, with the name one word (leading dashes of a flag
/// dropped).
fn split_pair(value: &str) -> Option<(&str, &str)> {
    let at = value.find(['=', ':'])?;
    let name = value[..at].trim_start_matches('-');
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    name_ok.then(|| (name, &value[at + 1..]))
}

/// Whether one token (no whitespace) looks like a secret: a JWT, a well-known token
/// format (`ghp_`, `hf_`, `sk-`, `AKIA...`, ...), or a long random-looking string.
///
/// Random-looking: at least 32 characters of base64/base64url, with a letter and a
/// digit, not a path, and with a run of at least 16 characters between separators
/// (`-_/+=`) that changes between lowercase, uppercase and digits at least once in five
/// characters. Words joined by dashes (`my-job-workers-0-x7k2p`), camelCase
/// identifiers, and hex of 32, 40 or 64 digits (ids, commits, digests) are not.
pub fn is_secret_token(token: &str) -> bool {
    if token.is_empty() || token.chars().any(char::is_whitespace) {
        return false;
    }
    is_jwt(token) || has_token_prefix(token) || is_aws_key_id(token) || is_random(token)
}

fn is_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    let base64url = |part: &str| {
        part.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
    };
    parts.len() == 3
        && parts[0].starts_with("eyJ")
        && parts[0].len() >= 10
        && !parts[1].is_empty()
        && parts.iter().all(|part| base64url(part))
}

fn has_token_prefix(token: &str) -> bool {
    TOKEN_PREFIXES.iter().any(|prefix| {
        token.strip_prefix(prefix).is_some_and(|rest| {
            // The rest of a real token is long and mixes classes; `hf_hub_transfer` is
            // a package, not a token.
            let classes = [
                rest.chars().any(|c| c.is_ascii_lowercase()),
                rest.chars().any(|c| c.is_ascii_uppercase()),
                rest.chars().any(|c| c.is_ascii_digit()),
            ];
            rest.len() >= 16
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
                && classes.iter().filter(|&&has| has).count() >= 2
        })
    })
}

/// An AWS access key id: `AKIA` (or `ASIA`, temporary) and 16 uppercase letters or digits.
fn is_aws_key_id(token: &str) -> bool {
    (token.starts_with("AKIA") || token.starts_with("ASIA"))
        && token.len() == 20
        && token[4..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

fn is_hex_id(text: &str) -> bool {
    matches!(text.len(), 32 | 40 | 64) && text.chars().all(|c| c.is_ascii_hexdigit())
}

fn is_random(token: &str) -> bool {
    if token.len() < 32
        || !token.chars().all(is_token_char)
        || !token.chars().any(|c| c.is_ascii_digit())
        || !token.chars().any(|c| c.is_ascii_alphabetic())
        || token.starts_with('/')
        || is_hex_id(token)
    {
        return false;
    }
    token
        .split(['-', '_', '/', '+', '='])
        .any(|run| run.len() >= 16 && !is_hex_id(run) && 5 * class_changes(run) >= run.len())
}

/// How often neighbouring characters change between lowercase, uppercase and digit.
fn class_changes(run: &str) -> usize {
    let class = |c: char| match c {
        'a'..='z' => 0,
        'A'..='Z' => 1,
        _ => 2,
    };
    let classes: Vec<u8> = run.chars().map(class).collect();
    classes.windows(2).filter(|pair| pair[0] != pair[1]).count()
}

/// Whether a URL in `value` carries credentials (see [`redact_url_credentials`]).
fn has_url_credentials(value: &str) -> bool {
    matches!(redact_url_credentials(value), Cow::Owned(_))
}

/// Replaces the credentials of every URL in `value`: `http://user:pw@host/x` becomes
/// `http://[redacted]@host/x`. A user without a password (`ssh://git@host`) is kept
/// unless the user itself looks like a token (`https://ghp_...@github.com`).
pub fn redact_url_credentials(value: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    let mut done = 0; // bytes of `value` already copied to `out`
    let mut search = 0;
    while let Some(found) = value[search..].find("://") {
        let authority_start = search + found + 3;
        let authority_len = value[authority_start..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>')
            })
            .unwrap_or(value.len() - authority_start);
        let authority = &value[authority_start..authority_start + authority_len];
        if let Some(at) = authority.rfind('@') {
            let userinfo = &authority[..at];
            if !userinfo.is_empty()
                && userinfo != REDACTED
                && (userinfo.contains(':') || is_secret_token(userinfo))
            {
                let out = out.get_or_insert_with(String::new);
                out.push_str(&value[done..authority_start]);
                out.push_str(REDACTED);
                done = authority_start + at;
            }
        }
        search = authority_start + authority_len;
    }
    match out {
        Some(mut out) => {
            out.push_str(&value[done..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(value),
    }
}

/// The known secrets worth searching for, longest first (so a secret that holds another
/// is replaced whole), each with its JSON-escaped form when that differs.
fn searchable(known: &[&str]) -> Vec<String> {
    let mut forms: Vec<String> = Vec::new();
    for secret in known {
        if secret.chars().count() < MIN_KNOWN_SECRET_CHARS {
            continue;
        }
        forms.push((*secret).to_owned());
        let escaped = serde_json::to_string(secret).unwrap_or_default();
        let escaped = escaped.trim_matches('"');
        if escaped != *secret {
            forms.push(escaped.to_owned());
        }
    }
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    forms
}

/// Replaces every occurrence of each known secret (of at least
/// [`MIN_KNOWN_SECRET_CHARS`] characters) in `text`, also inside longer words and in its
/// JSON-escaped form, e.g. for a log or a file about to be packed.
pub fn scrub<'a>(text: &'a str, known: &[&str]) -> Cow<'a, str> {
    let mut text = Cow::Borrowed(text);
    for secret in searchable(known) {
        if text.contains(secret.as_str()) {
            text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
        }
    }
    text
}

/// Redacts free text, such as a log line or one string of a command: the known
/// secrets ([`scrub`]), PEM blocks, credentials by the grammar of the command lines in
/// it ([`redact_command_line`]), URL credentials, tokens that look like secrets, the
/// word after `Bearer`/`Basic`, the value of a `NAME=value` with a secret name
/// (`--token=x`, `HF_TOKEN=x`, `?token=x`), and the word after a secret header
/// (`X-Api-Key: x`) or flag (`--password x`). The rest of the text is kept.
pub fn redact_text<'a>(text: &'a str, known: &[&str]) -> Cow<'a, str> {
    let scrubbed = scrub(text, known);
    let without_pem = redact_pem(&scrubbed);
    let by_grammar = command::redact_shell(&without_pem).map_or(without_pem, Cow::Owned);
    let redacted = redact_words(&by_grammar);
    if redacted == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(redacted.into_owned())
    }
}

/// Redacts a command line given as one shell string (a rebuild hook's, `sh -c`'s):
/// as [`redact_text`], which reads the command lines in any text by their grammar.
pub fn redact_command_line<'a>(line: &'a str, known: &[&str]) -> Cow<'a, str> {
    redact_text(line, known)
}

/// Redacts a command line given as an argument vector (the app of `gpuvet run --
/// ...`, a rebuild hook's list): by its programs' grammar (`-u user:[redacted]`,
/// `-p[redacted]`, what `sh -c` runs), then each argument as [`redact_json`] redacts an
/// array (the argument after a secret flag, each as text).
pub fn redact_command(argv: &[String], known: &[&str]) -> Vec<String> {
    let mut value = Value::Array(argv.iter().cloned().map(Value::String).collect());
    redact_json(&mut value, known);
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(text) => text,
                other => other.to_string(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Replaces each `-----BEGIN ...` block through its `-----END ...-----` line (or the end
/// of the text, when cut short).
fn redact_pem(text: &str) -> Cow<'_, str> {
    const BEGIN: &str = "-----BEGIN";
    if !text.contains(BEGIN) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        out.push_str(&rest[..start]);
        out.push_str(REDACTED);
        let block = &rest[start..];
        let end = block.find("-----END").and_then(|end_at| {
            let after = end_at + "-----END".len();
            block[after..].find("-----").map(|close| after + close + 5)
        });
        rest = &block[end.unwrap_or(block.len())..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// What the previous word says about the next one.
#[derive(Clone, Copy, PartialEq)]
enum Next {
    Plain,
    /// After a secret header or flag: the next word is the secret.
    Secret,
    /// After `Bearer` or `Basic`: the next word is a credential if it looks like one.
    Credential,
}

/// Characters that end a word in free text besides whitespace: quotes and brackets.
fn is_delimiter(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '`' | ',' | ';' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>'
        )
}

fn redact_words(text: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    let mut done = 0;
    let mut next = Next::Plain;
    let mut word_start = None;
    let ends = text
        .char_indices()
        .map(|(i, c)| (i, is_delimiter(c)))
        .chain(std::iter::once((text.len(), true)));
    for (i, delimiter) in ends {
        match (word_start, delimiter) {
            (None, false) => word_start = Some(i),
            (Some(start), true) => {
                word_start = None;
                let word = &text[start..i];
                let (replacement, after) = redact_word(word, next);
                next = after;
                if let Some(replacement) = replacement {
                    let out = out.get_or_insert_with(String::new);
                    out.push_str(&text[done..start]);
                    out.push_str(&replacement);
                    done = i;
                }
            }
            _ => {}
        }
    }
    match out {
        Some(mut out) => {
            out.push_str(&text[done..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

/// A word's replacement (if any) and what it says about the next word.
fn redact_word(word: &str, next: Next) -> (Option<String>, Next) {
    if word == REDACTED || word == "redacted" {
        return (None, Next::Plain);
    }
    match next {
        // `Authorization: Bearer x`: the scheme, then the secret, whatever it looks like.
        Next::Secret if is_auth_scheme(word) => return (None, Next::Secret),
        Next::Secret if !word.starts_with('-') => return (Some(REDACTED.to_owned()), Next::Plain),
        Next::Credential if looks_like_credential(word) => {
            return (Some(REDACTED.to_owned()), Next::Plain);
        }
        _ => {}
    }
    if is_auth_scheme(word) {
        return (None, Next::Credential);
    }
    if let Some(header) = word.strip_suffix(':')
        && !header.contains([':', '/'])
        && is_secret_name(header)
    {
        return (None, Next::Secret);
    }
    if word.starts_with('-') && !word.contains('=') && is_secret_name(word.trim_start_matches('-'))
    {
        return (None, Next::Secret);
    }
    if is_secret_token(word) {
        return (Some(REDACTED.to_owned()), Next::Plain);
    }
    let without_credentials = redact_url_credentials(word);
    let redacted = redact_assignments(&without_credentials);
    let changed = redacted != word;
    (changed.then(|| redacted.into_owned()), Next::Plain)
}

/// Whether the word after `Bearer`/`Basic` is a credential rather than prose (`Basic
/// checks passed`): not a plain lowercase word, or a long one.
fn looks_like_credential(word: &str) -> bool {
    word.len() >= 20 || !word.chars().all(|c| c.is_ascii_lowercase())
}

/// Replaces the value of every `name=value` in one word whose name is secret or whose
/// value looks like a secret: `--token=x`, `HF_TOKEN=x`, `?a=1&token=x`.
fn redact_assignments(word: &str) -> Cow<'_, str> {
    if !word.contains('=') {
        return Cow::Borrowed(word);
    }
    let mut out: Option<String> = None;
    let mut done = 0;
    let mut search = 0;
    while let Some(found) = word[search..].find('=') {
        let eq = search + found;
        let name_start = word[..eq]
            .char_indices()
            .rev()
            .find(|&(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .map_or(0, |(at, c)| at + c.len_utf8());
        let name = word[name_start..eq].trim_start_matches('-');
        let value_end = word[eq + 1..]
            .find('&')
            .map_or(word.len(), |at| eq + 1 + at);
        let value = &word[eq + 1..value_end];
        let secret = !value.is_empty()
            && value != REDACTED
            && ((!name.is_empty() && is_secret_name(name)) || is_secret_token(value));
        if secret {
            let out = out.get_or_insert_with(String::new);
            out.push_str(&word[done..=eq]);
            out.push_str(REDACTED);
            done = value_end;
        }
        search = value_end.max(eq + 1);
    }
    match out {
        Some(mut out) => {
            out.push_str(&word[done..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(word),
    }
}

/// A string value redacted: the whole value when it still looks like a secret after
/// [`redact_text`], else the text with its secrets cut. `None` when nothing changed.
fn redact_string(value: &str, known: &[&str]) -> Option<String> {
    let text = redact_text(value, known);
    if looks_like_secret_value(&text) {
        Some(REDACTED.to_owned())
    } else {
        match text {
            Cow::Owned(text) => Some(text),
            Cow::Borrowed(_) => None,
        }
    }
}

/// Whether a value under a secret name holds anything: `null` and `""` say only that
/// the secret is unset, which helps a diagnosis, so they are kept.
fn holds_something(value: &Value) -> bool {
    !matches!(value, Value::Null) && value.as_str() != Some("")
}

/// Redacts a JSON value in place: the value of every key with a secret name (whatever
/// its type, except `null` and `""`), every string that looks like a secret, URL
/// credentials and other secrets inside strings ([`redact_text`]), every occurrence of
/// each known secret, and in arrays the element after a secret flag (`["--token",
/// "x"]`). Keys are kept. Returns the paths of what was redacted, such as
/// `gpuvet.rebuild_hook[2]` (`$` for the value itself).
pub fn redact_json(value: &mut Value, known: &[&str]) -> Vec<String> {
    let mut paths = Vec::new();
    walk(value, String::new(), known, &mut paths);
    paths
}

fn walk(value: &mut Value, path: String, known: &[&str], paths: &mut Vec<String>) {
    let shown = |path: String| {
        if path.is_empty() {
            "$".to_owned()
        } else {
            path
        }
    };
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if is_secret_name(key) && holds_something(child) {
                    if child.as_str() != Some(REDACTED) {
                        *child = Value::String(REDACTED.to_owned());
                        paths.push(child_path);
                    }
                } else {
                    walk(child, child_path, known, paths);
                }
            }
        }
        Value::Array(items) => {
            // A list of words may be a command: read by its grammar first.
            if !items.is_empty() && items.iter().all(Value::is_string) {
                let mut argv: Vec<String> = items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_owned))
                    .collect();
                command::redact_argv(&mut argv);
                for (index, (item, word)) in items.iter_mut().zip(argv).enumerate() {
                    if item.as_str() != Some(word.as_str()) {
                        *item = Value::String(word);
                        paths.push(format!("{path}[{index}]"));
                    }
                }
            }
            let mut after_secret_flag = false;
            for (index, item) in items.iter_mut().enumerate() {
                let item_path = format!("{path}[{index}]");
                let flag = item.as_str().is_some_and(is_secret_flag);
                let is_value = item
                    .as_str()
                    .is_some_and(|s| !s.starts_with('-') && !s.is_empty());
                if after_secret_flag && is_value && item.as_str() != Some(REDACTED) {
                    *item = Value::String(REDACTED.to_owned());
                    if !paths.contains(&item_path) {
                        paths.push(item_path);
                    }
                } else {
                    walk(item, item_path, known, paths);
                }
                after_secret_flag = flag;
            }
        }
        Value::String(text) => {
            if let Some(redacted) = redact_string(text, known) {
                *text = redacted;
                let path = shown(path);
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `--token`, `-password`: a flag whose value follows as the next argument.
fn is_secret_flag(arg: &str) -> bool {
    arg.starts_with('-') && !arg.contains('=') && is_secret_name(arg.trim_start_matches('-'))
}

/// The environment with secrets removed, by the rules of [`redact_json`]: a variable
/// with a secret name keeps its name and loses its value (unless empty); any other
/// value is redacted as text.
pub fn redact_environment(
    env: &BTreeMap<String, String>,
    known: &[&str],
) -> BTreeMap<String, String> {
    env.iter()
        .map(|(name, value)| {
            let value = if value.is_empty() {
                value.clone()
            } else if is_secret_name(name) {
                REDACTED.to_owned()
            } else {
                redact_string(value, known).unwrap_or_else(|| value.clone())
            };
            (name.clone(), value)
        })
        .collect()
}

/// Prefixes of the variables that matter when diagnosing a multi-node GPU job.
const LAUNCHER_PREFIXES: &[&str] = &[
    "GPUVET_",
    "NCCL_",
    "TORCH_",
    "CUDA_",
    "LWS_",
    "PET_",
    "SLURM_",
    "OMPI_",
    "UCX_",
    "GLOO_",
    "NVIDIA_",
    "KUBERNETES_SERVICE_HOST",
];

/// Variables kept by their exact name.
const LAUNCHER_NAMES: &[&str] = &[
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "NNODES",
    "GROUP_RANK",
    "HOSTNAME",
    "LD_LIBRARY_PATH",
];

/// The variables that matter for diagnosing a multi-node GPU job (launcher, NCCL, CUDA,
/// PyTorch, Slurm, MPI, gpuvet's own), from e.g. `std::env::vars()`. Nothing is
/// redacted here: pass the result through [`redact_environment`].
pub fn launcher_environment(
    vars: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    vars.into_iter()
        .filter(|(name, _)| {
            LAUNCHER_NAMES.contains(&name.as_str())
                || LAUNCHER_PREFIXES
                    .iter()
                    .any(|prefix| name.starts_with(prefix))
        })
        .collect()
}

#[cfg(test)]
mod tests;
