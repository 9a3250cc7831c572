use super::*;
use crate::ids::new_id;
use serde_json::json;

const SECRET_NAMES: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "HF_TOKEN",
    "GPUVET_TOKEN",
    "GPUVET_REPORT_TOKEN",
    "NCCL_IB_SECRET",
    "OPENAI_API_KEY",
    "STRIPE_KEY",
    "api-key",
    "apiKey",
    "APIKey",
    "apikey",
    "accessToken",
    "XAuthToken",
    "private_key",
    "privateKey",
    "session.key",
    "db_password",
    "DB_PASSWD",
    "MYSQL_PWD",
    "passphrase",
    "Authorization",
    "auth",
    "credentials",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON",
    "cookie",
    "Set-Cookie",
    "request_signature",
    "client_secret",
    "password1",
    "key",
];

const PLAIN_NAMES: &[&str] = &[
    "NCCL_IB_HCA",
    "MASTER_ADDR",
    "keys_total",
    "monkey",
    "CUDA_VISIBLE_DEVICES",
    "tokenizer",
    "TOKENIZERS_PARALLELISM",
    "max_tokens",
    "author",
    "authority",
    "oauth_client_id",
    "public_key",
    "keyboard",
    "PWD",
    "GPUVET_TOKEN_FILE",
    "HF_TOKEN_PATH",
    "auth_enabled",
    "secret_name",
    "",
    "_-.",
    "report_to",
    "rebuild_hook",
];

#[test]
fn secret_names_are_matched_by_word_not_substring() {
    let wrong: Vec<_> = SECRET_NAMES
        .iter()
        .filter(|name| !is_secret_name(name))
        .collect();
    assert!(wrong.is_empty(), "not taken as secret: {wrong:?}");
    let wrong: Vec<_> = PLAIN_NAMES
        .iter()
        .filter(|name| is_secret_name(name))
        .collect();
    assert!(wrong.is_empty(), "taken as secret: {wrong:?}");
}

#[test]
fn names_split_into_words_at_separators_and_camel_case() {
    assert_eq!(
        words("AWS_SECRET_ACCESS_KEY"),
        ["aws", "secret", "access", "key"]
    );
    assert_eq!(words("myAPIKey2"), ["my", "api", "key"]);
    assert_eq!(words("x.y-z__w"), ["x", "y", "z", "w"]);
    assert_eq!(words("ÜberToken"), ["über", "token"]);
    assert!(is_secret_name("ÜberToken"));
    assert!(words("").is_empty());
    assert!(words("123").is_empty());
}

/// Random-looking, made once with a generator; not secrets of anything.
const RANDOM_BASE64: &str = "q8Zr3VkT0pXw7LbN2yHf5sJd9mQa4cUe6gRt1iOv";
const RANDOM_HEX_48: &str = "9f3c1a7be04d28c6f51a0e93b7d24c8a6e1f05b39d7c2a48";

#[test]
fn secret_values_are_recognized_by_shape() {
    let jwt = concat!(
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    );
    let secret = [
        "Bearer abc",
        "basic dXNlcjpwYXNz",
        "  Bearer eyJx  ",
        "http://user:pass@host/x",
        "postgres://gpuvet:hunter22@db:5432/gpuvet",
        "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/x.git",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH",
        jwt,
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "glpat-Ab3dEf6hIj9kLm2nOp5q",
        "AKIAIOSFODNN7EXAMPLE",
        RANDOM_BASE64,
        RANDOM_HEX_48,
        "dGhpcyBpcyBhIHNlY3JldCB0b2tlbiAxMjM0NTY3OA==",
        "HF_TOKEN=abc",
        "Authorization: Bearer X",
        "X-Api-Key: 1234",
        "--password=swordfish",
    ];
    let plain = [
        "",
        "   ",
        "Bearer",
        "Bearer [redacted]",
        "Authorization: Bearer [redacted]",
        "Basic checks passed on every node",
        "basic mode",
        "hello",
        "ssh://git@github.com/org/repo.git",
        "http://[redacted]@host/x",
        "http://gpuvet-server:9470",
        &new_id(),
        "0123456789abcdef0123456789abcdef01234567",
        "d2a84f4b8b650937ec8f73cd8be2c74add5a911ba64df27458ed8229da804a26",
        "123e4567-e89b-12d3-a456-426614174000",
        "my-training-job-workers-0-3-x7k2p",
        "llama-3-70b-pretrain-worker-12-abcde",
        "/opt/nvidia/hpc_sdk/Linux_x86_64/24/comm_libs",
        "/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu",
        "NcclCommunicatorInitialization2024",
        "hf_hub_enable_hf_transfer_package",
        "sk-short",
        "AKIAIOSFODNN7EXAMPL",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1",
        "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
        "eth0",
        "a token, a secret and a password walk into a bar",
        "日本語のテキストです日本語のテキストです日本語のテキストです",
    ];
    let missed: Vec<_> = secret
        .iter()
        .filter(|v| !looks_like_secret_value(v))
        .collect();
    assert!(missed.is_empty(), "not taken as secret: {missed:?}");
    let wrong: Vec<_> = plain
        .iter()
        .filter(|v| looks_like_secret_value(v))
        .collect();
    assert!(wrong.is_empty(), "taken as secret: {wrong:?}");
}

#[test]
fn url_credentials_are_replaced_and_the_rest_kept() {
    assert_eq!(
        redact_url_credentials("http://user:pw@host/x"),
        "http://[redacted]@host/x"
    );
    assert_eq!(
        redact_url_credentials("a https://u:p@one?x and ftp://v:q@two#y b"),
        "a https://[redacted]@one?x and ftp://[redacted]@two#y b"
    );
    // The last `@` ends the user info: a password may hold `@`.
    assert_eq!(
        redact_url_credentials("http://u:p@ss@host"),
        "http://[redacted]@host"
    );
    for unchanged in [
        "",
        "http://host/x",
        "ssh://git@github.com/x",
        "mailto:someone@example.com",
        "http://host/path@thing",
        "http://[redacted]@host",
    ] {
        assert!(
            matches!(redact_url_credentials(unchanged), Cow::Borrowed(_)),
            "{unchanged}"
        );
    }
    assert_eq!(
        redact_url_credentials("üñí://ü:ö@hôst/ß"),
        "üñí://[redacted]@hôst/ß"
    );
    // Redacting twice changes nothing more.
    let once = redact_url_credentials("http://u:p@h").into_owned();
    assert_eq!(redact_url_credentials(&once), once);
}

#[test]
fn scrub_replaces_every_known_secret_of_eight_characters_or_more() {
    let known = ["hunter2hunter2", "short7!", "quo\"te\\secret"];
    assert_eq!(
        scrub("pw=hunter2hunter2 again hunter2hunter2.", &known),
        "pw=[redacted] again [redacted]."
    );
    // Inside a longer word it is still the secret.
    assert_eq!(scrub("xhunter2hunter2y", &known), "x[redacted]y");
    // Too short to search for.
    assert_eq!(scrub("short7! stays", &known), "short7! stays");
    // Raw and as it appears inside JSON text.
    assert_eq!(scrub("a quo\"te\\secret b", &known), "a [redacted] b");
    assert_eq!(
        scrub(r#"{"k":"quo\"te\\secret"}"#, &known),
        r#"{"k":"[redacted]"}"#
    );
    assert!(matches!(scrub("nothing here", &known), Cow::Borrowed(_)));
    assert_eq!(scrub("", &known), "");
    assert_eq!(scrub("anything", &[]), "anything");
    // A secret that holds another is replaced whole, not in pieces.
    assert_eq!(
        scrub("abcdefgh-ijklmnop", &["abcdefgh", "abcdefgh-ijklmnop"]),
        "[redacted]"
    );
    // Unicode secrets count characters, not bytes: 8 characters of 2 bytes each.
    assert_eq!(scrub("ключ: пароль12", &["пароль12"]), "ключ: [redacted]");
    assert_eq!(scrub("ключ: парол1", &["парол1"]), "ключ: парол1");
}

#[test]
fn free_text_keeps_its_words_and_loses_its_secrets() {
    let known = ["s3cr3t-value"];
    let cases = [
        (
            "curl -H 'Authorization: Bearer abc.def' http://u:p@h/x",
            "curl -H 'Authorization: Bearer [redacted]' http://[redacted]@h/x",
        ),
        (
            "HF_TOKEN=hf_x python train.py --token=abc --lr=3e-4",
            "HF_TOKEN=[redacted] python train.py --token=[redacted] --lr=3e-4",
        ),
        (
            "gpuvet push --password swordfish --verbose",
            "gpuvet push --password [redacted] --verbose",
        ),
        ("--no-auth --verbose", "--no-auth --verbose"),
        (
            "GET /x?a=1&token=abc&b=2 done",
            "GET /x?a=1&token=[redacted]&b=2 done",
        ),
        ("X-Api-Key: 1234 rest", "X-Api-Key: [redacted] rest"),
        (
            "sent Authorization: Bearer abc to the server",
            "sent Authorization: Bearer [redacted] to the server",
        ),
        (
            &format!("leaked {RANDOM_BASE64} here"),
            "leaked [redacted] here",
        ),
        (
            "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----\nafter",
            "key:\n[redacted]\nafter",
        ),
        ("cut -----BEGIN CERT\nMII", "cut [redacted]"),
        (
            "value s3cr3t-value twice s3cr3t-value",
            "value [redacted] twice [redacted]",
        ),
        ("Basic checks passed", "Basic checks passed"),
        // A name after a character of several bytes.
        ("€token=abc «x=1» €=2", "€token=[redacted] «x=1» €=2"),
        ("", ""),
    ];
    for (text, want) in cases {
        assert_eq!(redact_text(text, &known), want, "{text}");
    }
}

#[test]
fn json_is_redacted_by_key_by_value_and_by_known_secret() {
    let token = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let mut config = json!({
        "gpuvet": {
            "report_to": "http://admin:pw@server:9470",
            "report_token": {"nested": ["anything", 1]},
            "api_key": 12345,
            "password": null,
            "secret": "",
            "rebuild_hook": ["curl", "-H", "Authorization: Bearer X", "http://server/x"],
            "fail_hook": ["gpuvet", "--token", "abc", "--verbose", "--token"],
            "note": format!("the token is {token}, again {token}"),
            "nodes": [[{"id": new_id()}], [["ghp_16C7e42F292c6912E7710c838347Ae178B4a"]]],
            "count": 3,
            "ok": true,
        },
        "tokenizer": "llama",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
    });
    let id = config["gpuvet"]["nodes"][0][0]["id"].clone();
    let paths = redact_json(&mut config, &[token, "short"]);
    assert_eq!(
        config,
        json!({
            "gpuvet": {
                "report_to": "http://[redacted]@server:9470",
                "report_token": "[redacted]",
                "api_key": "[redacted]",
                "password": null,
                "secret": "",
                "rebuild_hook": [
                    "curl", "-H", "Authorization: Bearer [redacted]", "http://server/x"
                ],
                "fail_hook": ["gpuvet", "--token", "[redacted]", "--verbose", "--token"],
                "note": "the token is [redacted], again [redacted]",
                "nodes": [[{"id": id}], [["[redacted]"]]],
                "count": 3,
                "ok": true,
            },
            "tokenizer": "llama",
            "jwt": "[redacted]",
        })
    );
    let mut paths = paths;
    paths.sort();
    assert_eq!(
        paths,
        [
            "gpuvet.api_key",
            "gpuvet.fail_hook[2]",
            "gpuvet.nodes[1][0][0]",
            "gpuvet.note",
            "gpuvet.rebuild_hook[2]",
            "gpuvet.report_to",
            "gpuvet.report_token",
            "jwt",
        ]
    );
    // Redacting again finds nothing more.
    let before = config.clone();
    assert!(redact_json(&mut config, &[token]).is_empty());
    assert_eq!(config, before);
}

#[test]
fn json_scalars_and_empty_values() {
    let mut root = json!("Bearer Abc123");
    assert_eq!(redact_json(&mut root, &[]), ["$"]);
    assert_eq!(root, json!("Bearer [redacted]"));
    // A lowercase word after `Bearer` may be prose in a sentence, but alone it is the
    // credential, so the whole value goes.
    let mut root = json!("Bearer abcdef");
    assert_eq!(redact_json(&mut root, &[]), ["$"]);
    assert_eq!(root, json!("[redacted]"));
    for plain in [
        json!(null),
        json!({}),
        json!([]),
        json!(""),
        json!(1.5),
        json!("ünïcödé"),
    ] {
        let mut value = plain.clone();
        assert!(redact_json(&mut value, &["ünïcödé-secret"]).is_empty());
        assert_eq!(value, plain);
    }
    let mut value = json!(["ünïcödé-secret", {"ключ": "x ünïcödé-secret"}]);
    assert_eq!(
        redact_json(&mut value, &["ünïcödé-secret"]),
        ["[0]", "[1].ключ"]
    );
    assert_eq!(value, json!(["[redacted]", {"ключ": "x [redacted]"}]));
}

#[test]
fn environment_keeps_names_and_loses_secret_values() {
    let env: BTreeMap<String, String> = [
        ("GPUVET_TOKEN", "whatever-it-is"),
        ("HF_TOKEN", ""),
        ("NCCL_IB_HCA", "mlx5_0,mlx5_1"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("GPUVET_REPORT_TO", "http://u:p@server:9470"),
        ("TORCH_EXTRA", "uses whatever-it-is inside"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("PET_RDZV_ENDPOINT", RANDOM_BASE64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let redacted = redact_environment(&env, &["whatever-it-is"]);
    let get = |name: &str| redacted[name].as_str();
    assert_eq!(redacted.len(), env.len());
    assert_eq!(get("GPUVET_TOKEN"), REDACTED);
    assert_eq!(get("HF_TOKEN"), "");
    assert_eq!(get("NCCL_IB_HCA"), "mlx5_0,mlx5_1");
    assert_eq!(get("MASTER_ADDR"), "10.0.0.1");
    assert_eq!(get("GPUVET_REPORT_TO"), "http://[redacted]@server:9470");
    assert_eq!(get("TORCH_EXTRA"), "uses [redacted] inside");
    assert_eq!(get("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
    assert_eq!(get("PET_RDZV_ENDPOINT"), REDACTED);
    assert!(redact_environment(&BTreeMap::new(), &[]).is_empty());
}

#[test]
fn launcher_environment_keeps_only_what_a_diagnosis_needs() {
    let vars = [
        "GPUVET_TOKEN",
        "NCCL_DEBUG",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "CUDA_VISIBLE_DEVICES",
        "LWS_LEADER_ADDRESS",
        "PET_NNODES",
        "SLURM_JOB_ID",
        "OMPI_COMM_WORLD_RANK",
        "UCX_TLS",
        "GLOO_SOCKET_IFNAME",
        "NVIDIA_VISIBLE_DEVICES",
        "KUBERNETES_SERVICE_HOST",
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
    let dropped = [
        "HOME",
        "PATH",
        "AWS_SECRET_ACCESS_KEY",
        "HF_TOKEN",
        "RANKING",
        "MY_RANK",
        "nccl_debug",
        "KUBERNETES_PORT",
        "",
    ];
    let all = vars
        .iter()
        .chain(&dropped)
        .map(|name| (name.to_string(), format!("value of {name}")));
    let kept = launcher_environment(all);
    let kept_names: Vec<&str> = kept.keys().map(String::as_str).collect();
    let mut want = vars.to_vec();
    want.sort();
    assert_eq!(kept_names, want);
    // Values pass through untouched: redacting is the next step.
    assert_eq!(kept["GPUVET_TOKEN"], "value of GPUVET_TOKEN");
    assert!(launcher_environment(Vec::new()).is_empty());
}

/// Generated text from pieces that the rules split on: no input panics, and a known
/// secret never survives, whatever surrounds it.
#[test]
fn generated_text_never_panics_nor_keeps_a_known_secret() {
    const PIECES: &[&str] = &[
        "=",
        ":",
        "@",
        "/",
        "://",
        "-",
        "--",
        "&",
        "?",
        " ",
        "\n",
        "\"",
        "'",
        "€",
        "é",
        "日",
        "token",
        "Bearer",
        "basic",
        "http",
        "x",
        "ab12CD34",
        "-----BEGIN",
        "-----END",
        "-----",
        "[redacted]",
        "KEY",
        "%",
        "\\",
    ];
    const SECRET: &str = "Zq9-secret-€-value";
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    for _ in 0..3000 {
        let mut text = String::new();
        for _ in 0..next(12) {
            text.push_str(PIECES[next(PIECES.len())]);
        }
        if next(2) == 0 {
            let at = text
                .char_indices()
                .map(|(i, _)| i)
                .nth(next(4))
                .unwrap_or(text.len());
            text.insert_str(at, SECRET);
        }
        let redacted = redact_text(&text, &[SECRET]);
        assert!(!redacted.contains(SECRET), "{text:?} -> {redacted:?}");
        let _ = looks_like_secret_value(&text);
        let _ = is_secret_name(&text);
        let _ = redact_url_credentials(&text);
        let mut value = json!({ text.clone(): [text.clone(), {"password": text.clone()}] });
        redact_json(&mut value, &[SECRET]);
        // Keys are kept, so the secret may stay in the key, never in a value.
        let (_, values) = value.as_object().unwrap().iter().next().unwrap();
        assert!(!values.to_string().contains(SECRET), "{text:?} -> {values}");
    }
}
