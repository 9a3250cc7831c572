//! Command lines redacted by their grammar: the value a program takes after a
//! credential flag is cut whatever it looks like, where the pattern rules of
//! [`super::redact_text`] see only an innocent word (`curl -u admin:PASSWORD`, `mysql
//! -pPASSWORD`). Each program's grammar is its own: `-p` is MySQL's password and
//! PostgreSQL's port, `-i` is ssh's key *path*.
//!
//! A command line comes as an argument vector (`["curl", "-u", "a:b", ...]`) or as one
//! shell string (`sh -c "curl -u a:b ..."`), which is split into words the way a POSIX
//! shell quotes them, redacted as vectors, and put back with only the changed words
//! rewritten. Wrappers (`env`, `sudo`, `sh -c`, `ssh HOST CMD`, `sshpass`, `timeout`,
//! anything after `--`) are followed to the command they run, and variable assignments
//! before a command (`PGPASSWORD=x psql`) are cut by name.
//!
//! This adds to the pattern rules, never replaces them: what this grammar keeps (a
//! port, a key's path) is still redacted when a pattern says so.

use super::{REDACTED, is_auth_scheme, is_secret_name, redact_url_credentials};

/// How deep wrappers nest (`sh -c "sudo env sh -c '...'"`) before the rest is left to
/// the pattern rules: a bound, so no input can recurse without end.
const MAX_DEPTH: usize = 8;

/// What a credential flag's value holds, and so what of it is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    /// All of it: a password, a token.
    Secret,
    /// `user:password` (curl `-u`): the user is kept. `%` for smbclient's `user%pass`.
    UserPass(char),
    /// `Name: value`: the value when the header's name is secret (`Authorization`,
    /// `Cookie`, `X-Api-Key`), after its scheme if it has one (`Basic`, `Bearer`).
    Header,
    /// `cert:password` (curl `--cert`): the password, if any.
    CertPass,
    /// Cookie data (`name=value`) rather than a cookie file's path.
    CookieData,
    /// A PostgreSQL connection string: its `password=` (URLs' passwords are cut by the
    /// pattern rules).
    Conninfo,
    /// `KEY=VALUE` (kubectl `--from-literal`): the value.
    Literal,
    /// Takes a value that is no secret (a path, a port, a user name).
    Plain,
}

/// One program's grammar: which options take a value, and what that value is.
struct Grammar {
    /// Short options (one letter after `-`) that take a value, glued (`-pX`) or next.
    short: &'static [(char, Value)],
    /// Long options that take a value, as `--name=X` or `--name X`.
    long: &'static [(&'static str, Value)],
    /// Short options whose value must be glued (`mysql -pX`; `-p` alone prompts and
    /// the next word is the database).
    glued_only: &'static [char],
    /// The word before which its credential options apply (`docker login -p`), if any.
    subcommand: Option<&'static str>,
    operands: Operands,
}

/// What a program's operands (the words that are no option) are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operands {
    /// Its own business (URLs, files): the pattern rules read them.
    Own,
    /// Connection strings (`psql "host=db password=x"`).
    Conninfo,
    /// A command to run, from the first operand on (`sshpass -p x ssh ...`) or the
    /// second (`ssh HOST CMD`).
    Command,
}

const CURL: Grammar = Grammar {
    short: &[
        ('u', Value::UserPass(':')),
        ('U', Value::UserPass(':')),
        ('H', Value::Header),
        ('E', Value::CertPass),
        ('b', Value::CookieData),
        ('A', Value::Plain),
        ('c', Value::Plain),
        ('C', Value::Plain),
        ('d', Value::Plain),
        ('D', Value::Plain),
        ('e', Value::Plain),
        ('F', Value::Plain),
        ('K', Value::Plain),
        ('m', Value::Plain),
        ('o', Value::Plain),
        ('P', Value::Plain),
        ('Q', Value::Plain),
        ('r', Value::Plain),
        ('T', Value::Plain),
        ('t', Value::Plain),
        ('w', Value::Plain),
        ('x', Value::Plain),
        ('X', Value::Plain),
        ('y', Value::Plain),
        ('Y', Value::Plain),
        ('z', Value::Plain),
    ],
    long: &[
        ("user", Value::UserPass(':')),
        ("proxy-user", Value::UserPass(':')),
        ("header", Value::Header),
        ("proxy-header", Value::Header),
        ("oauth2-bearer", Value::Secret),
        ("pass", Value::Secret),
        ("proxy-pass", Value::Secret),
        ("tlspassword", Value::Secret),
        ("proxy-tlspassword", Value::Secret),
        ("cert", Value::CertPass),
        ("proxy-cert", Value::CertPass),
        ("cookie", Value::CookieData),
    ],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Own,
};

const WGET: Grammar = Grammar {
    short: &[],
    long: &[
        ("password", Value::Secret),
        ("http-password", Value::Secret),
        ("ftp-password", Value::Secret),
        ("proxy-password", Value::Secret),
        ("header", Value::Header),
        ("user", Value::Plain),
        ("http-user", Value::Plain),
        ("ftp-user", Value::Plain),
        ("proxy-user", Value::Plain),
    ],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Own,
};

const MYSQL: Grammar = Grammar {
    short: &[
        ('p', Value::Secret),
        ('u', Value::Plain),
        ('h', Value::Plain),
        ('P', Value::Plain),
        ('S', Value::Plain),
        ('D', Value::Plain),
        ('e', Value::Plain),
    ],
    // MySQL takes any unambiguous prefix of a long option (`--pass=x`).
    long: &[
        ("password", Value::Secret),
        ("passwor", Value::Secret),
        ("passwo", Value::Secret),
        ("passw", Value::Secret),
        ("pass", Value::Secret),
        ("user", Value::Plain),
        ("host", Value::Plain),
        ("port", Value::Plain),
    ],
    glued_only: &['p'],
    subcommand: None,
    operands: Operands::Own,
};

const PSQL: Grammar = Grammar {
    short: &[
        ('d', Value::Conninfo),
        ('p', Value::Plain),
        ('h', Value::Plain),
        ('U', Value::Plain),
        ('c', Value::Plain),
        ('f', Value::Plain),
        ('o', Value::Plain),
    ],
    long: &[
        ("dbname", Value::Conninfo),
        ("port", Value::Plain),
        ("host", Value::Plain),
        ("username", Value::Plain),
    ],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Conninfo,
};

const SSHPASS: Grammar = Grammar {
    short: &[
        ('p', Value::Secret),
        ('f', Value::Plain),
        ('d', Value::Plain),
        ('P', Value::Plain),
    ],
    long: &[],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Command,
};

/// ssh's options that take a value; none is a secret (`-i` is a key's path).
const SSH: Grammar = Grammar {
    short: &[
        ('b', Value::Plain),
        ('c', Value::Plain),
        ('D', Value::Plain),
        ('E', Value::Plain),
        ('e', Value::Plain),
        ('F', Value::Plain),
        ('I', Value::Plain),
        ('i', Value::Plain),
        ('J', Value::Plain),
        ('L', Value::Plain),
        ('l', Value::Plain),
        ('m', Value::Plain),
        ('O', Value::Plain),
        ('o', Value::Plain),
        ('p', Value::Plain),
        ('Q', Value::Plain),
        ('R', Value::Plain),
        ('S', Value::Plain),
        ('W', Value::Plain),
        ('w', Value::Plain),
    ],
    long: &[],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Command,
};

const KUBECTL: Grammar = Grammar {
    short: &[],
    long: &[
        ("token", Value::Secret),
        ("password", Value::Secret),
        ("from-literal", Value::Literal),
        ("username", Value::Plain),
        ("client-key", Value::Plain),
        ("client-certificate", Value::Plain),
        ("kubeconfig", Value::Plain),
    ],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Own,
};

/// `docker login -p`: in `docker run`, `-p` publishes a port.
const REGISTRY_LOGIN: Grammar = Grammar {
    short: &[('p', Value::Secret), ('u', Value::Plain)],
    long: &[("password", Value::Secret), ("username", Value::Plain)],
    glued_only: &[],
    subcommand: Some("login"),
    operands: Operands::Own,
};

const REDIS_CLI: Grammar = Grammar {
    short: &[
        ('a', Value::Secret),
        ('h', Value::Plain),
        ('p', Value::Plain),
        ('u', Value::Plain),
        ('n', Value::Plain),
    ],
    long: &[("pass", Value::Secret), ("user", Value::Plain)],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Own,
};

const LDAP: Grammar = Grammar {
    short: &[
        ('w', Value::Secret),
        ('D', Value::Plain),
        ('H', Value::Plain),
        ('b', Value::Plain),
        ('y', Value::Plain),
    ],
    long: &[],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Own,
};

const SMBCLIENT: Grammar = Grammar {
    short: &[('U', Value::UserPass('%'))],
    long: &[("user", Value::UserPass('%')), ("password", Value::Secret)],
    glued_only: &[],
    subcommand: None,
    operands: Operands::Own,
};

/// The grammar of a program, by its file name.
fn grammar(program: &str) -> Option<&'static Grammar> {
    Some(match program {
        "curl" => &CURL,
        "wget" => &WGET,
        "mysql" | "mariadb" | "mysqldump" | "mysqladmin" | "mysqlimport" | "mysqlshow"
        | "mysqlcheck" | "mysqlpump" | "mysqlsh" | "mariadb-dump" | "mariadb-admin" => &MYSQL,
        "psql" | "pg_dump" | "pg_dumpall" | "pg_restore" | "pg_basebackup" | "pg_isready"
        | "createdb" | "dropdb" | "createuser" | "dropuser" | "vacuumdb" | "reindexdb"
        | "clusterdb" | "pgbench" => &PSQL,
        "sshpass" => &SSHPASS,
        "ssh" | "scp" | "sftp" => &SSH,
        "kubectl" | "oc" => &KUBECTL,
        "docker" | "podman" | "nerdctl" | "buildah" | "skopeo" | "helm" => &REGISTRY_LOGIN,
        "redis-cli" => &REDIS_CLI,
        "ldapsearch" | "ldapmodify" | "ldapadd" | "ldapdelete" | "ldapwhoami" | "ldappasswd" => {
            &LDAP
        }
        "smbclient" => &SMBCLIENT,
        _ => return None,
    })
}

/// Redacts `argv` in place by its programs' grammar.
pub(super) fn redact_argv(argv: &mut [String]) {
    redact_at(argv, 0);
}

/// Redacts a shell command line by its programs' grammar; `None` when nothing changed.
pub(super) fn redact_shell(text: &str) -> Option<String> {
    redact_shell_at(text, 0)
}

fn redact_shell_at(text: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut replacements: Vec<(usize, usize, String)> = Vec::new();
    for command in shell_commands(text) {
        let mut argv: Vec<String> = command.iter().map(|word| word.value.clone()).collect();
        redact_at(&mut argv, depth);
        for (word, value) in command.iter().zip(argv) {
            if value != word.value {
                replacements.push((
                    word.start,
                    word.end,
                    requote(&text[word.start..word.end], &value),
                ));
            }
        }
    }
    if replacements.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for (start, end, replacement) in replacements {
        out.push_str(&text[done..start]);
        out.push_str(&replacement);
        done = end;
    }
    out.push_str(&text[done..]);
    Some(out)
}

/// `NAME=value` before a command, with NAME a shell variable's name.
fn assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some((name, value))
}

fn redact_at(argv: &mut [String], depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    // Assignments before the command: `PGPASSWORD=x psql`.
    let mut at = 0;
    while let Some(word) = argv.get(at) {
        let Some((name, value)) = assignment(word) else {
            break;
        };
        if is_secret_name(name) && !value.is_empty() && value != REDACTED {
            argv[at] = format!("{name}={REDACTED}");
        }
        at += 1;
    }
    let Some((program, args)) = argv[at..].split_first_mut() else {
        return;
    };
    let program = program.rsplit('/').next().unwrap_or(program).to_owned();
    match program.as_str() {
        "env" => wrapper(args, &["-u", "--unset", "-C", "--chdir"], 0, depth),
        "sudo" | "doas" => wrapper(
            args,
            &["-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"],
            0,
            depth,
        ),
        "nohup" | "exec" | "time" | "command" | "setsid" | "stdbuf" | "xargs" => {
            wrapper(args, &[], 0, depth);
        }
        "nice" | "ionice" => wrapper(args, &["-n", "-c"], 0, depth),
        // `timeout [OPTION] DURATION COMMAND`.
        "timeout" => wrapper(args, &["-s", "-k", "--signal", "--kill-after"], 1, depth),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" => shell(args, depth),
        _ => {
            if let Some(grammar) = grammar(&program) {
                let tail = options(grammar, args);
                match program.as_str() {
                    "sshpass" => redact_at(&mut args[tail..], depth + 1),
                    "ssh" => remote_command(&mut args[tail..], depth),
                    _ => {}
                }
            }
            // What follows `--` is often a command (`kubectl exec POD -- CMD`,
            // `gpuvet run -- CMD`); as a command it is read by its own grammar.
            if let Some(dashes) = args.iter().position(|arg| arg == "--") {
                redact_at(&mut args[dashes + 1..], depth + 1);
            }
        }
    }
}

/// A wrapper's options (those in `with_value` take the next word), then `skip` words,
/// then its assignments (`env A=b`) and the command it runs.
fn wrapper(args: &mut [String], with_value: &[&str], skip: usize, depth: usize) {
    let mut at = 0;
    while let Some(arg) = args.get(at) {
        if arg == "--" {
            at += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        at += if with_value.contains(&arg.as_str()) {
            2
        } else {
            1
        };
    }
    let at = (at + skip).min(args.len());
    redact_at(&mut args[at..], depth + 1);
}

/// `sh [OPTIONS] -c STRING [NAME [ARGS]]`: the string is a command line.
fn shell(args: &mut [String], depth: usize) {
    let mut reads_string = false;
    for arg in args.iter_mut() {
        if reads_string {
            if let Some(redacted) = redact_shell_at(arg, depth + 1) {
                *arg = redacted;
            }
            return;
        }
        match arg.strip_prefix('-') {
            Some(flags) if !flags.starts_with('-') && flags.contains('c') => reads_string = true,
            Some(_) => {}
            // A script's path: its arguments are its own.
            None => return,
        }
    }
}

/// `ssh [OPTIONS] HOST [COMMAND...]`: the command runs in the remote shell.
fn remote_command(args: &mut [String], depth: usize) {
    let Some((_host, command)) = args.split_first_mut() else {
        return;
    };
    if let [line] = command {
        if let Some(redacted) = redact_shell_at(line, depth + 1) {
            *line = redacted;
        }
    } else {
        redact_at(command, depth + 1);
    }
}

/// Walks a program's options by its grammar, cutting credential values; returns where
/// its operands begin (the first word that is no option or option value), for the
/// programs that run a command after them. Conninfo-taking programs also read every
/// operand as a connection string.
fn options(grammar: &Grammar, args: &mut [String]) -> usize {
    let mut active = grammar.subcommand.is_none();
    let mut operands_at = None;
    let mut at = 0;
    while at < args.len() {
        let arg = args[at].clone();
        if arg == "--" {
            operands_at.get_or_insert(at + 1);
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, glued) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let kind = active
                .then(|| grammar.long.iter().find(|(n, _)| *n == name))
                .flatten()
                .map(|(_, kind)| *kind);
            match (kind, glued) {
                (Some(kind), Some(value)) => {
                    if let Some(cut) = cut(kind, value) {
                        args[at] = format!("--{name}={cut}");
                    }
                }
                (Some(kind), None) => {
                    if let Some(value) = args.get(at + 1).cloned() {
                        if let Some(cut) = cut(kind, &value) {
                            args[at + 1] = cut;
                        }
                        at += 1;
                    }
                }
                (None, _) => {}
            }
            at += 1;
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            at += short_cluster(grammar, args, at, active);
            continue;
        }
        // An operand.
        if grammar.subcommand == Some(arg.as_str()) {
            active = true;
        }
        operands_at.get_or_insert(at);
        match grammar.operands {
            Operands::Own => {}
            Operands::Conninfo => {
                if let Some(cut) = cut(Value::Conninfo, &arg) {
                    args[at] = cut;
                }
            }
            // What follows is the command's, not this program's.
            Operands::Command => break,
        }
        at += 1;
    }
    operands_at.unwrap_or(args.len())
}

/// `-abc`, `-uVALUE`, `-u VALUE`: reads a cluster of short options at `at`, cutting a
/// credential value; returns how many words it took.
fn short_cluster(grammar: &Grammar, args: &mut [String], at: usize, active: bool) -> usize {
    let arg = args[at].clone();
    for (offset, letter) in arg.char_indices().skip(1) {
        let Some(&(_, kind)) = grammar.short.iter().find(|(l, _)| *l == letter) else {
            continue; // a switch
        };
        let glued = &arg[offset + letter.len_utf8()..];
        if !glued.is_empty() {
            if active && let Some(cut) = cut(kind, glued) {
                args[at] = format!("{}{cut}", &arg[..offset + letter.len_utf8()]);
            }
            return 1;
        }
        if grammar.glued_only.contains(&letter) {
            return 1; // `mysql -p`: prompts; the next word is the database
        }
        if let Some(value) = args.get(at + 1).cloned() {
            if active && let Some(cut) = cut(kind, &value) {
                args[at + 1] = cut;
            }
            return 2;
        }
        return 1;
    }
    1
}

/// What is left of `value` once the secret `kind` says it holds is cut; `None` when
/// nothing is cut.
fn cut(kind: Value, value: &str) -> Option<String> {
    if value.is_empty() || value == REDACTED {
        return None;
    }
    let cut = match kind {
        Value::Plain => return None,
        Value::Secret => REDACTED.to_owned(),
        Value::UserPass(separator) => keep_before(value, separator)?,
        Value::CertPass => keep_before(value, ':')?,
        Value::Literal => keep_before(value, '=')?,
        Value::Header => {
            let (name, rest) = value.split_once(':')?;
            let rest = rest.trim();
            // `Authorization: Basic x` keeps its scheme, as the pattern rules do.
            let (scheme, credential) = match rest.split_once(char::is_whitespace) {
                Some((scheme, credential)) if is_auth_scheme(scheme) => {
                    (format!("{scheme} "), credential.trim())
                }
                _ => (String::new(), rest),
            };
            if !is_secret_name(name.trim()) || credential.is_empty() || credential == REDACTED {
                return None;
            }
            format!("{name}: {scheme}{REDACTED}")
        }
        Value::CookieData => {
            if !value.contains('=') {
                return None; // a cookie file's path
            }
            REDACTED.to_owned()
        }
        Value::Conninfo if value.contains("://") => {
            return match redact_url_credentials(value) {
                std::borrow::Cow::Owned(cut) => Some(cut),
                std::borrow::Cow::Borrowed(_) => None,
            };
        }
        Value::Conninfo => return redact_conninfo(value),
    };
    (cut != value).then_some(cut)
}

/// `user:secret` as `user:[redacted]`; `None` without a secret after `separator`.
fn keep_before(value: &str, separator: char) -> Option<String> {
    let (kept, secret) = value.split_once(separator)?;
    (!secret.is_empty() && secret != REDACTED).then(|| format!("{kept}{separator}{REDACTED}"))
}

/// The values of `password` and `sslpassword` in a libpq key/value connection string
/// (`host=db password='a b' user=x`), quotes and escapes included.
fn redact_conninfo(value: &str) -> Option<String> {
    let mut out = String::with_capacity(value.len());
    let mut changed = false;
    let mut rest = value;
    while !rest.is_empty() {
        let trimmed = rest.trim_start();
        out.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        let Some(eq) = rest.find('=') else {
            out.push_str(rest);
            break;
        };
        let key = rest[..eq].trim();
        if key.contains(char::is_whitespace) {
            // Not key/value text: leave it.
            out.push_str(rest);
            break;
        }
        out.push_str(&rest[..=eq]);
        let after = rest[eq + 1..].trim_start();
        out.push_str(&rest[eq + 1..rest.len() - after.len()]);
        let value_len = conninfo_value_len(after);
        let secret = matches!(key, "password" | "sslpassword");
        if secret && value_len > 0 && &after[..value_len] != REDACTED {
            out.push_str(REDACTED);
            changed = true;
        } else {
            out.push_str(&after[..value_len]);
        }
        rest = &after[value_len..];
    }
    changed.then_some(out)
}

/// How long a conninfo value is: up to whitespace, or a single-quoted string with `\`
/// escapes.
fn conninfo_value_len(text: &str) -> usize {
    let mut chars = text.char_indices();
    if text.starts_with('\'') {
        chars.next();
        let mut escaped = false;
        for (at, c) in chars {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return at + 1,
                _ => {}
            }
        }
        return text.len();
    }
    for (at, c) in chars {
        if c == '\\' {
            continue;
        }
        if c.is_whitespace() {
            return at;
        }
    }
    text.len()
}

/// A word of a shell command line: where it stands and what the shell makes of it.
#[derive(Debug, Clone, PartialEq)]
struct Word {
    start: usize,
    end: usize,
    value: String,
}

/// Splits a shell command line into its simple commands (at `;`, `&`, `|`, newlines,
/// parentheses and backquotes) and each into words, with POSIX quoting: `'...'`
/// literal, `"..."` with `\` escapes, `\` outside quotes. Lenient: a quote left open
/// runs to the end.
fn shell_commands(text: &str) -> Vec<Vec<Word>> {
    let mut commands = Vec::new();
    let mut command: Vec<Word> = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let separator = matches!(c, ';' | '&' | '|' | '\n' | '(' | ')' | '`');
        if c.is_whitespace() || separator {
            if let Some(done) = word.take() {
                command.push(Word { end: at, ..done });
            }
            if separator && !command.is_empty() {
                commands.push(std::mem::take(&mut command));
            }
            continue;
        }
        let current = word.get_or_insert_with(|| Word {
            start: at,
            end: at,
            value: String::new(),
        });
        match c {
            '\'' => {
                for (_, c) in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    current.value.push(c);
                }
            }
            '"' => {
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.peek() {
                            Some(&(_, next)) if matches!(next, '"' | '\\' | '$' | '`' | '\n') => {
                                current.value.push(next);
                                chars.next();
                            }
                            _ => current.value.push('\\'),
                        },
                        _ => current.value.push(c),
                    }
                }
            }
            '\\' => {
                if let Some((_, next)) = chars.next() {
                    current.value.push(next);
                }
            }
            _ => current.value.push(c),
        }
    }
    if let Some(done) = word.take() {
        command.push(Word {
            end: text.len(),
            ..done
        });
    }
    if !command.is_empty() {
        commands.push(command);
    }
    commands
}

/// `value` written as a shell word: bare when it needs no quotes, in double quotes when
/// `original` was and they can hold it, else in single quotes.
fn requote(original: &str, value: &str) -> String {
    let plain = |c: char| {
        !c.is_whitespace()
            && !matches!(
                c,
                '\'' | '"'
                    | '\\'
                    | '$'
                    | '`'
                    | ';'
                    | '&'
                    | '|'
                    | '('
                    | ')'
                    | '<'
                    | '>'
                    | '*'
                    | '?'
                    | '#'
                    | '~'
            )
    };
    if !value.is_empty() && value.chars().all(plain) {
        return value.to_owned();
    }
    if original.starts_with('"') && !value.contains(['"', '\\', '$', '`']) {
        return format!("\"{value}\"");
    }
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests;
