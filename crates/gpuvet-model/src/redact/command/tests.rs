use super::*;
use crate::redact::{redact_command, redact_command_line, redact_json};

/// Each program, each form: the line as a shell string, and what is kept of it.
const REDACTED_LINES: &[(&str, &str)] = &[
    // curl
    (
        "curl -u admin:hunter2 https://h/x",
        "curl -u admin:[redacted] https://h/x",
    ),
    (
        "curl --user admin:hunter2 h",
        "curl --user admin:[redacted] h",
    ),
    ("curl -uadmin:hunter2 h", "curl -uadmin:[redacted] h"),
    (
        "curl -sSfu admin:hunter2 h",
        "curl -sSfu admin:[redacted] h",
    ),
    (
        "curl -U proxy:pw:with:colons h",
        "curl -U proxy:[redacted] h",
    ),
    (
        "curl --proxy-user p:hunter2 h",
        "curl --proxy-user p:[redacted] h",
    ),
    (
        "curl -H 'Authorization: Basic YWRtaW46cHc=' h",
        "curl -H 'Authorization: Basic [redacted]' h",
    ),
    (
        "curl --header \"Cookie: sid=abc123\" h",
        "curl --header \"Cookie: [redacted]\" h",
    ),
    (
        "curl -H 'X-Api-Key: k1' h",
        "curl -H 'X-Api-Key: [redacted]' h",
    ),
    (
        "curl --oauth2-bearer tok123 h",
        "curl --oauth2-bearer [redacted] h",
    ),
    (
        "curl --pass phrase1 --cacert ca.pem h",
        "curl --pass [redacted] --cacert ca.pem h",
    ),
    (
        "curl -E client.pem:certpw h",
        "curl -E client.pem:[redacted] h",
    ),
    ("curl -b 'sid=abc; x=1' h", "curl -b [redacted] h"),
    // wget
    ("wget --password=hunter2 h", "wget --password=[redacted] h"),
    ("wget --password hunter2 h", "wget --password [redacted] h"),
    (
        "wget --http-password=hunter2 h",
        "wget --http-password=[redacted] h",
    ),
    (
        "wget --ftp-password hunter2 h",
        "wget --ftp-password [redacted] h",
    ),
    (
        "wget --proxy-password=hunter2 h",
        "wget --proxy-password=[redacted] h",
    ),
    (
        "wget --header='Authorization: token abc' h",
        "wget '--header=Authorization: [redacted]' h",
    ),
    // mysql and mariadb
    ("mysql -uroot -phunter2 db", "mysql -uroot -p[redacted] db"),
    (
        "mysql --password=hunter2 db",
        "mysql --password=[redacted] db",
    ),
    ("mysql --password hunter2", "mysql --password [redacted]"),
    (
        "mysqldump --pass=hunter2 db",
        "mysqldump --pass=[redacted] db",
    ),
    (
        "/usr/bin/mariadb -phunter2",
        "/usr/bin/mariadb -p[redacted]",
    ),
    // psql: connection strings and the environment
    (
        "psql 'host=db password=hunter2 user=x'",
        "psql 'host=db password=[redacted] user=x'",
    ),
    (
        "psql -d \"password='a b c' host=db\"",
        "psql -d \"password=[redacted] host=db\"",
    ),
    (
        "pg_dump --dbname=postgresql://u:hunter2@db/x",
        "pg_dump --dbname=postgresql://[redacted]@db/x",
    ),
    (
        "PGPASSWORD=hunter2 psql -p 5432",
        "PGPASSWORD=[redacted] psql -p 5432",
    ),
    // ssh and sshpass
    ("sshpass -p hunter2 ssh h", "sshpass -p [redacted] ssh h"),
    ("sshpass -phunter2 ssh h", "sshpass -p[redacted] ssh h"),
    (
        "ssh -i ~/.ssh/id h 'mysql -phunter2'",
        "ssh -i ~/.ssh/id h 'mysql -p[redacted]'",
    ),
    // kubectl
    (
        "kubectl --token abc123 get pods",
        "kubectl --token [redacted] get pods",
    ),
    (
        "kubectl --password=hunter2 get pods",
        "kubectl --password=[redacted] get pods",
    ),
    (
        "kubectl create secret generic s --from-literal=db=hunter2",
        "kubectl create secret generic s --from-literal=db=[redacted]",
    ),
    (
        "kubectl exec pod -- mysql -phunter2",
        "kubectl exec pod -- mysql -p[redacted]",
    ),
    // registries, redis, LDAP, SMB
    (
        "docker login -u me -p hunter2 r.io",
        "docker login -u me -p [redacted] r.io",
    ),
    (
        "podman login --password hunter2 r.io",
        "podman login --password [redacted] r.io",
    ),
    ("redis-cli -a hunter2 ping", "redis-cli -a [redacted] ping"),
    (
        "ldapsearch -D cn=x -w hunter2",
        "ldapsearch -D cn=x -w [redacted]",
    ),
    (
        "smbclient -U bob%hunter2 //h/s",
        "smbclient -U bob%[redacted] //h/s",
    ),
    // wrappers, nesting and several commands
    (
        "sh -c \"curl -u a:hunter2 h\"",
        "sh -c \"curl -u a:[redacted] h\"",
    ),
    (
        "bash -ec 'sh -c \"mysql -phunter2\"'",
        "bash -ec 'sh -c \"mysql -p[redacted]\"'",
    ),
    (
        "sudo -u root env A=1 mysql -phunter2",
        "sudo -u root env A=1 mysql -p[redacted]",
    ),
    (
        "timeout -s KILL 30 mysql -phunter2",
        "timeout -s KILL 30 mysql -p[redacted]",
    ),
    (
        "cd /x && curl -u a:hunter2 h; mysql -phunter2 | tee log",
        "cd /x && curl -u a:[redacted] h; mysql -p[redacted] | tee log",
    ),
    (
        "echo $(curl -u a:hunter2 h) `mysql -phunter2`",
        "echo $(curl -u a:[redacted] h) `mysql -p[redacted]`",
    ),
];

/// What no grammar may touch: ports, paths, switches, prompts, other programs' `-p`.
const KEPT_LINES: &[&str] = &[
    "psql -p 5432 -h db -U app",
    "pg_dump -p5432 db",
    "ssh -i ~/.ssh/id -p 2222 host uptime",
    "scp -P 2222 -i key f host:/x",
    "ls -u",
    "ls -lu /tmp",
    "mysql -p mydb",
    "mysql -u root -h db -P 3306",
    "docker run -p 8080:80 img",
    "podman run -u 1000 img",
    "curl -u admin https://h/x",
    "curl -H 'Accept: application/json' -o out.json h",
    "curl -b cookies.txt h",
    "wget --user=bob h",
    "git log -- src",
    "sh -c 'echo hi'",
    "sh script.sh -p x",
    "redis-cli -h r -p 6379",
    "kubectl --kubeconfig /k get pods",
    "env -u HOME ls -u",
    "sudo -p prompt ls",
    "psql 'host=db user=x'",
    "PGHOST=db psql",
    "",
    "'unterminated",
    "a\\",
];

#[test]
fn each_programs_credentials_are_cut_by_its_grammar() {
    for (line, want) in REDACTED_LINES {
        assert_eq!(redact_shell(line).as_deref(), Some(*want), "{line}");
        // The pattern rules that follow keep what the grammar left.
        assert_eq!(redact_command_line(line, &[]), *want, "{line}");
        // Idempotent: a redacted line stays as it is.
        assert_eq!(redact_shell(want), None, "{want}");
    }
}

#[test]
fn what_is_no_credential_in_its_program_is_kept() {
    for line in KEPT_LINES {
        assert_eq!(redact_shell(line), None, "{line}");
        assert_eq!(redact_command_line(line, &[]), *line, "{line}");
    }
}

#[test]
fn argument_vectors_are_read_by_the_same_grammar() {
    let argv = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["curl", "-u", "admin:pa ss", "h"],
            &["curl", "-u", "admin:[redacted]", "h"],
        ),
        (&["mysql", "-pP@ss w0rd"], &["mysql", "-p[redacted]"]),
        (
            &["sh", "-c", "curl -u a:b h && mysql -p'x y'"],
            &["sh", "-c", "curl -u a:[redacted] h && mysql -p[redacted]"],
        ),
        (
            &["psql", r"host=db password='it\'s'"],
            &["psql", "host=db password=[redacted]"],
        ),
        (
            &["/bin/sh", "-c", "PGPASSWORD=x psql -p 5432"],
            &["/bin/sh", "-c", "PGPASSWORD=[redacted] psql -p 5432"],
        ),
        (&["psql", "-p", "5432"], &["psql", "-p", "5432"]),
        (&["ssh", "-i", "/k/id", "h"], &["ssh", "-i", "/k/id", "h"]),
    ];
    for (input, want) in cases {
        let mut words = argv(input);
        redact_argv(&mut words);
        assert_eq!(words, argv(want), "{input:?}");
        assert_eq!(redact_command(&argv(input), &[]), argv(want), "{input:?}");
    }
    // In JSON (a config's `rebuild_hook`), with the path of what was cut.
    let mut config = serde_json::json!({"gpuvet": {"rebuild_hook": ["curl", "-u", "a:b", "h"]}});
    assert_eq!(redact_json(&mut config, &[]), ["gpuvet.rebuild_hook[2]"]);
    assert_eq!(config["gpuvet"]["rebuild_hook"][2], "a:[redacted]");
    let mut line = serde_json::json!({"hook": "mysql -phunter2 db"});
    assert_eq!(redact_json(&mut line, &[]), ["hook"]);
    assert_eq!(line["hook"], "mysql -p[redacted] db");
}

#[test]
fn conninfo_values_are_cut_with_their_quotes() {
    assert_eq!(
        redact_conninfo("host=db password='a \\' b' sslpassword = x user=y").as_deref(),
        Some("host=db password=[redacted] sslpassword = [redacted] user=y")
    );
    assert_eq!(redact_conninfo("host=db user=y"), None);
    assert_eq!(redact_conninfo("password="), None);
    assert_eq!(redact_conninfo("not a conninfo = x"), None);
}

#[test]
fn shell_words_follow_posix_quoting() {
    let words = |line: &str| -> Vec<Vec<String>> {
        shell_commands(line)
            .into_iter()
            .map(|command| command.into_iter().map(|word| word.value).collect())
            .collect()
    };
    assert_eq!(
        words(r#"a 'b c' "d \"e\" \$f" g\ h; i|j"#),
        [vec!["a", "b c", "d \"e\" $f", "g h"], vec!["i"], vec!["j"]]
    );
    assert_eq!(words("x 'open"), [vec!["x", "open"]]);
    assert_eq!(words("  "), Vec::<Vec<String>>::new());
    // Spans are the words' text as written.
    let line = "curl -H 'A: b'";
    let spans: Vec<&str> = shell_commands(line)[0]
        .iter()
        .map(|word| &line[word.start..word.end])
        .collect();
    assert_eq!(spans, ["curl", "-H", "'A: b'"]);
}

#[test]
fn nesting_is_bounded() {
    let mut line = "mysql -phunter2".to_owned();
    for _ in 0..(MAX_DEPTH + 4) {
        line = format!("sh -c {}", requote("'", &line));
    }
    // Too deep for the grammar: left to the pattern rules, and no stack overflow.
    let _ = redact_shell(&line);
    let mut shallow = "mysql -phunter2".to_owned();
    for _ in 0..3 {
        shallow = format!("sh -c {}", requote("'", &shallow));
    }
    assert!(!redact_shell(&shallow).unwrap().contains("hunter2"));
}

/// The forms a secret takes in a command line, `{S}` standing for it.
const FORMS: &[&[&str]] = &[
    &["curl", "-u", "admin:{S}", "https://h/x"],
    &["curl", "--user", "admin:{S}", "h"],
    &["curl", "-uadmin:{S}", "h"],
    &["curl", "-sSu", "admin:{S}", "h"],
    &["curl", "-U", "proxy:{S}", "h"],
    &["curl", "--proxy-user", "p:{S}", "h"],
    &["curl", "-H", "Authorization: Basic {S}", "h"],
    &["curl", "-H", "Cookie: sid={S}", "h"],
    &["curl", "--header", "X-Api-Key: {S}", "h"],
    &["curl", "--oauth2-bearer", "{S}", "h"],
    &["curl", "--pass", "{S}", "h"],
    &["curl", "-E", "cert.pem:{S}", "h"],
    &["curl", "-b", "sid={S}", "h"],
    &["wget", "--password={S}", "h"],
    &["wget", "--password", "{S}", "h"],
    &["wget", "--http-password={S}", "h"],
    &["wget", "--ftp-password", "{S}", "h"],
    &["wget", "--proxy-password={S}", "h"],
    &["wget", "--header=Authorization: Bearer {S}", "h"],
    &["mysql", "-uroot", "-p{S}", "db"],
    &["mysql", "--password={S}", "db"],
    &["mysql", "--password", "{S}"],
    &["mysqldump", "--pass={S}", "db"],
    &["mariadb", "-p{S}"],
    &["psql", "host=db password={S} user=x"],
    &["psql", "-d", "password='{S}' host=db"],
    &["psql", "postgresql://u:{S}@db/x"],
    &["PGPASSWORD={S}", "psql", "-p", "5432"],
    &["sshpass", "-p", "{S}", "ssh", "h"],
    &["sshpass", "-p{S}", "ssh", "h"],
    &["kubectl", "--token", "{S}", "get", "pods"],
    &["kubectl", "--token={S}", "get", "pods"],
    &["kubectl", "--password={S}", "get", "pods"],
    &[
        "kubectl",
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=db={S}",
    ],
    &["docker", "login", "-p", "{S}", "r.io"],
    &["redis-cli", "-a", "{S}", "ping"],
    &["ldapsearch", "-w", "{S}"],
    &["smbclient", "-U", "bob%{S}", "//h/s"],
];

/// Ways a command reaches gpuvet: as it is, or run by a wrapper.
fn wrapped(argv: &[String], wrapper: usize) -> Vec<String> {
    let line = || {
        argv.iter()
            .map(|word| requote("'", word))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let words = |prefix: &[&str]| {
        prefix
            .iter()
            .map(|w| (*w).to_owned())
            .chain(argv.iter().cloned())
            .collect()
    };
    match wrapper {
        0 => argv.to_vec(),
        1 => vec!["sh".into(), "-c".into(), line()],
        2 => words(&["env", "A=1"]),
        3 => words(&["sudo", "-u", "root"]),
        4 => words(&["timeout", "30"]),
        5 => vec!["ssh".into(), "host".into(), line()],
        6 => words(&["kubectl", "exec", "pod", "--"]),
        _ => vec![
            "bash".into(),
            "-c".into(),
            format!("cd /x && {} | tee log", line()),
        ],
    }
}
const WRAPPERS: usize = 8;

/// A password of 8 to 24 characters: letters, digits and the punctuation passwords
/// often hold, with an upper-case letter and a digit so it appears in no fixed word.
fn secret(next: &mut impl FnMut(usize) -> usize) -> String {
    const CHARS: &[u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!%^*_+-.,~:=";
    let len = 8 + next(17);
    let mut secret = format!("Q{}", next(10));
    while secret.len() < len {
        secret.push(CHARS[next(CHARS.len())] as char);
    }
    secret
}

/// A small xorshift: the same cases on every run.
fn generator(seed: u64) -> impl FnMut(usize) -> usize {
    let mut state = seed;
    move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    }
}

#[test]
fn a_generated_secret_in_any_form_never_survives() {
    let mut next = generator(0x9e37_79b9_7f4a_7c15);
    for round in 0..4000 {
        let secret = secret(&mut next);
        let form = FORMS[next(FORMS.len())];
        let argv: Vec<String> = form
            .iter()
            .map(|word| word.replace("{S}", &secret))
            .collect();
        let argv = wrapped(&argv, next(WRAPPERS));
        let by_argv = redact_command(&argv, &[]);
        assert!(
            by_argv.iter().all(|word| !word.contains(&secret)),
            "round {round}: {argv:?} -> {by_argv:?}"
        );
        let line = argv
            .iter()
            .map(|word| requote("'", word))
            .collect::<Vec<_>>()
            .join(" ");
        let by_line = redact_command_line(&line, &[]);
        assert!(
            !by_line.contains(&secret),
            "round {round}: {line} -> {by_line}"
        );
    }
}
