//! The `kudurru` binary: parse flags, dispatch, map errors to exit codes.

#![forbid(unsafe_code)]

use clap::{CommandFactory, Parser};
use kudurru_control::cli::{
    ApiCommand, AuditCommand, BlockingCommand, BlocklistCommand, CacheCommand, CertCommand, Cli,
    ClientArgs, ClusterCommand, Command, ConfigCommand, QuerylogCommand, ServeArgs,
    SettingsCommand, TokenCommand, ZoneCommand,
};
use kudurru_control::client::percent_encode;
use kudurru_control::{
    certs, check, client, config, lameduck, layers, objects, openapi, querylog, serve, tokens,
};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => match serve::run(&args) {
            Ok(()) => serve::exit::OK,
            Err(e @ serve::ServeError::Config(_)) => {
                // Every problem at once, as `kudurru config check` shows them.
                let problems = check::check(&args, None, std::env::vars());
                if problems.is_empty() {
                    eprintln!("kudurru: {e}");
                } else {
                    for problem in &problems {
                        eprintln!("kudurru: {problem}");
                    }
                }
                e.exit_code()
            }
            Err(e) => {
                eprintln!("kudurru: {e}");
                e.exit_code()
            }
        },
        Command::Upstreams { json, api } => report("upstreams", upstreams(&api, json)),
        Command::Cluster {
            command: ClusterCommand::Status { json, api },
        } => report("cluster status", cluster_status(&api, json)),
        Command::Audit {
            command: AuditCommand::Verify { args },
        } => report("audit verify", audit_verify(&args)),
        Command::Get {
            kind,
            name,
            output,
            api,
        } => report(
            "get",
            api_client(&api)
                .and_then(|c| Ok(objects::cli::get(&c, &kind, name.as_deref(), output)?)),
        ),
        Command::Apply { path, api } => report(
            "apply",
            api_client(&api).and_then(|c| Ok(objects::cli::apply(&c, &path)?)),
        ),
        Command::Delete { kind, name, api } => report(
            "delete",
            api_client(&api).and_then(|c| Ok(objects::cli::delete(&c, &kind, &name)?)),
        ),
        Command::Enable { kind, name, api } => report(
            "enable",
            api_client(&api).and_then(|c| Ok(objects::cli::set_enabled(&c, &kind, &name, true)?)),
        ),
        Command::Disable { kind, name, api } => report(
            "disable",
            api_client(&api).and_then(|c| Ok(objects::cli::set_enabled(&c, &kind, &name, false)?)),
        ),
        Command::Blocklist { command } => match blocklist(&command) {
            Ok(text) => {
                print!("{text}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru blocklist: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Zone { command } => match zone(&command) {
            Ok(text) => {
                print!("{text}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru zone: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Blocking { command } => match blocking(&command) {
            Ok(text) => {
                print!("{text}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru blocking: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Cache { command } => match cache(&command) {
            Ok(text) => {
                print!("{text}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru cache: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Querylog { command } => querylog_command(command),
        Command::Stats {
            from,
            to,
            step,
            top,
            json,
            client,
        } => report(
            "stats",
            api_client(&client).and_then(|c| {
                Ok(querylog::cli::stats(
                    &c,
                    from.as_deref(),
                    to.as_deref(),
                    step.as_deref(),
                    top,
                    json,
                )?)
            }),
        ),
        Command::Config {
            command:
                ConfigCommand::Check {
                    settings_file,
                    args,
                },
        } => {
            let problems = check::check(&args, settings_file.as_deref(), std::env::vars());
            for problem in &problems {
                println!("{problem}");
            }
            if problems.is_empty() {
                println!("ok");
                serve::exit::OK
            } else {
                eprintln!(
                    "kudurru config check: {} problem{}",
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" }
                );
                serve::exit::CONFIG
            }
        }
        Command::Lameduck(args) => match lameduck::run(&args) {
            Ok(state) => {
                println!("{state}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru lameduck: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Config {
            command: ConfigCommand::Keys,
        } => {
            print!("{}", config::render_key_table());
            serve::exit::OK
        }
        Command::Config {
            command: ConfigCommand::Show(args),
        } => match serve::effective_config(&args) {
            Ok((c, _)) => {
                print!("{}", toml::to_string_pretty(&c).unwrap_or_default());
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Api {
            command: ApiCommand::Openapi,
        } => {
            print!("{}", openapi::render());
            serve::exit::OK
        }
        Command::Token { command } => match token(command) {
            Ok(text) => {
                print!("{text}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru token: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Cert {
            command: CertCommand::Generate { cert, key, names },
        } => match write_certificate(&cert, &key, &names) {
            Ok(()) => {
                println!("wrote {} and {}", cert.display(), key.display());
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru cert generate: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Settings {
            command: SettingsCommand::Get { key, args },
        } => match serve::effective_config(&args) {
            Ok((c, sources)) => match layers::render_get(&c, &sources, key.as_deref()) {
                Ok(text) => {
                    print!("{text}");
                    serve::exit::OK
                }
                Err(e) => {
                    eprintln!("kudurru: {e}");
                    serve::exit::CONFIG
                }
            },
            Err(e) => {
                eprintln!("kudurru: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "kudurru",
                &mut std::io::stdout(),
            );
            serve::exit::OK
        }
        Command::Man { dir } => match write_man_pages(&dir) {
            Ok(()) => serve::exit::OK,
            Err(e) => {
                eprintln!("kudurru man: {}: {e}", dir.display());
                serve::exit::CONFIG
            }
        },
    };
    std::process::exit(code);
}

/// Writes `kudurru.1` and a page per subcommand (`kudurru-config-check.1`, …) into `dir`.
fn write_man_pages(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(Cli::command(), dir)
}

/// The binary's own errors: each module's typed error, shown as its message.
type Failure = Box<dyn std::error::Error>;

fn token(command: TokenCommand) -> Result<String, Failure> {
    let args = match &command {
        TokenCommand::Create { args, .. }
        | TokenCommand::Revoke { args, .. }
        | TokenCommand::List { args } => args,
    };
    let (config, _) = serve::effective_config(args)?;
    let validated = config.validate()?;
    if let Some(note) = &validated.data_dir_note {
        eprintln!("kudurru token: {note}");
    }
    let store = tokens::TokenStore::new(&validated.data_dir);
    match command {
        TokenCommand::Create {
            role, ttl, name, ..
        } => {
            let role = tokens::Role::parse(&role)?;
            let ttl = tokens::lifetime(ttl, validated.token_max_lifetime)?;
            let (token, entry) = store.create_named(name.trim(), role, ttl)?;
            eprintln!(
                "kudurru token: created {} ({}, expires in {}) in {}",
                entry.id,
                role.name(),
                humantime::format_duration(ttl),
                store.path().display()
            );
            Ok(format!("{token}\n"))
        }
        TokenCommand::Revoke { id, .. } => {
            store.revoke(&id)?;
            Ok(format!("revoked {id}\n"))
        }
        TokenCommand::List { .. } => {
            let list = store.list()?;
            if list.is_empty() {
                eprintln!("kudurru token: no tokens in {}", store.path().display());
            }
            Ok(list
                .iter()
                .map(|e| {
                    let name = if e.name.is_empty() {
                        String::new()
                    } else {
                        format!(" name {:?}", e.name)
                    };
                    format!(
                        "{} {} created {} expires {}{name}\n",
                        e.id,
                        e.role.name(),
                        e.created,
                        e.expires
                    )
                })
                .collect())
        }
    }
}

/// The API client `args` describe: the URL from `--api` or the configuration.
fn api_client(args: &ClientArgs) -> Result<client::ApiClient, Failure> {
    let url = match &args.api {
        Some(url) => url.clone(),
        None => {
            let serve_args = ServeArgs {
                config: args.config.clone(),
                ..ServeArgs::default()
            };
            let validated = serve::effective_config(&serve_args)?.0.validate()?;
            let address = validated
                .api_address
                .ok_or("the configuration runs no API (api.address is empty); pass --api")?;
            let scheme = if validated.api_tls.is_some() {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{address}")
        }
    };
    let token = client::token(
        args.token.as_deref(),
        std::env::var("KUDURRU_TOKEN").ok(),
        args.token_file.as_deref(),
    )?;
    Ok(client::ApiClient::new(&url, token, args.ca.as_deref())?)
}

/// `kudurru querylog search | tail | purge`: the exit code.
fn querylog_command(command: QuerylogCommand) -> i32 {
    use querylog::cli::SearchOutput;
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let result: Result<String, Failure> = match command {
        QuerylogCommand::Search {
            filters,
            limit,
            all,
            json,
            csv,
            client,
        } => {
            let output = match (json, csv) {
                (true, _) => SearchOutput::Json,
                (_, true) => SearchOutput::Csv,
                _ => SearchOutput::Table,
            };
            let limit = if all {
                None
            } else {
                Some(limit.unwrap_or(100))
            };
            api_client(&client).and_then(|c| {
                querylog::cli::search(&c, &filters, limit, output, &mut stdout.lock())?;
                Ok(String::new())
            })
        }
        QuerylogCommand::Tail {
            filters,
            json,
            client,
        } => api_client(&client).and_then(|c| {
            querylog::cli::tail(&c, &filters, json, &mut stdout.lock(), &mut stderr.lock())?;
            Ok(String::new())
        }),
        QuerylogCommand::Purge { before, client } => {
            api_client(&client).and_then(|c| Ok(querylog::cli::purge(&c, &before)?))
        }
    };
    report("querylog", result)
}

/// `kudurru audit verify`: the chain of the configured data directory's store.
fn audit_verify(args: &ServeArgs) -> Result<String, Failure> {
    let validated = serve::effective_config(args)?.0.validate()?;
    let path = validated.data_dir.join(kudurru_storage::FILE_NAME);
    let report = kudurru_storage::verify_audit_file(&path).map_err(|e| -> Failure {
        let text = e.to_string();
        if text.to_ascii_lowercase().contains("repair") {
            // A file a killed server left needs redb's repair, which only a writer may do.
            format!("{text}: the store was not closed cleanly; start `kudurru serve` once (it repairs the file), then verify again").into()
        } else {
            e.into()
        }
    })?;
    Ok(match report.first_seq {
        None => format!(
            "{}: the audit chain is intact (no records kept)\n",
            path.display()
        ),
        Some(first) => format!(
            "{}: the audit chain is intact: {} records, {first} to {}\n",
            path.display(),
            report.records,
            report.last_seq
        ),
    })
}

/// Prints a command's output, or its error; the exit code.
fn report(command: &str, result: Result<String, Failure>) -> i32 {
    match result {
        Ok(text) => {
            print!("{text}");
            serve::exit::OK
        }
        Err(e) => {
            eprintln!("kudurru {command}: {e}");
            serve::exit::CONFIG
        }
    }
}

/// `kudurru upstreams`: the server's upstream counters as a table (or its JSON).
fn upstreams(args: &ClientArgs, json: bool) -> Result<String, Failure> {
    let api = api_client(args)?;
    let answer = api.call("GET", "/api/v1/upstreams", None)?;
    if answer.status != 200 {
        let message = answer.body["message"].as_str().unwrap_or("");
        return Err(format!("{} answered {}: {message}", api.url(), answer.status).into());
    }
    if json {
        return Ok(format!("{:#}\n", answer.body));
    }
    let mut out = format!(
        "{:<32} {:>10} {:>8} {:>10} {:>9} {}\n",
        "UPSTREAM", "QUERIES", "ERRORS", "ANSWERED", "MEAN ms", "HEALTHY"
    );
    for u in answer.body["upstreams"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<32} {:>10} {:>8} {:>10} {:>9.2} {}\n",
            u["upstream"].as_str().unwrap_or("?"),
            u["queries"].as_u64().unwrap_or(0),
            u["errors"].as_u64().unwrap_or(0),
            u["answered"].as_u64().unwrap_or(0),
            u["meanLatencyMs"].as_f64().unwrap_or(0.0),
            if u["healthy"] == true { "yes" } else { "no" },
        ));
    }
    Ok(out)
}

/// `kudurru cluster status`: the fleet as the node behind the API sees it.
fn cluster_status(args: &ClientArgs, json: bool) -> Result<String, Failure> {
    let api = api_client(args)?;
    let answer = api.call("GET", "/api/v1/cluster", None)?;
    if answer.status != 200 {
        let message = answer.body["message"].as_str().unwrap_or("");
        return Err(format!("{} answered {}: {message}", api.url(), answer.status).into());
    }
    let body = &answer.body;
    if json {
        return Ok(format!("{body:#}\n"));
    }
    if body["driver"] == "none" {
        return Ok("cluster.driver = none: a single node, its own leader\n".into());
    }
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_owned();
    let mut out = format!(
        "fleet {} (etcd revision {}), asked node {} ({}, {}connected)\nleader: {}\n",
        text(&body["name"]),
        body["revision"]
            .as_i64()
            .map_or("-".into(), |r| r.to_string()),
        text(&body["node"]),
        text(&body["role"]),
        if body["connected"] == true {
            ""
        } else {
            "NOT "
        },
        text(&body["leader"]),
    );
    if let Some(error) = body["error"].as_str() {
        out.push_str(&format!("members: unknown ({error})\n"));
        return Ok(out);
    }
    out.push_str(&format!(
        "{:<20} {:<32} {:<8} {:>10} {:<8} {:<26} {}\n",
        "MEMBER", "ADDRESS", "VERSION", "SNAPSHOT", "LEADER", "STARTED", "ZONES (serial)"
    ));
    for m in body["members"].as_array().into_iter().flatten() {
        let leads = m["advertiseAddress"] == body["leader"];
        // Each member's zones as it serves them, or why it did not say.
        let zones = match (m["zones"].as_array(), m["error"].as_str()) {
            (_, Some(error)) => format!("unknown: {error}"),
            (Some(zones), None) if zones.is_empty() => "none".to_owned(),
            (Some(zones), None) => zones
                .iter()
                .map(|z| format!("{} {}", text(&z["zone"]), z["serial"].as_u64().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", "),
            (None, None) => "-".to_owned(),
        };
        out.push_str(&format!(
            "{:<20} {:<32} {:<8} {:>10} {:<8} {:<26} {}\n",
            text(&m["name"]),
            text(&m["advertiseAddress"]),
            text(&m["version"]),
            m["snapshotRevision"].as_i64().unwrap_or(0),
            if leads { "yes" } else { "" },
            text(&m["started"]),
            zones,
        ));
    }
    Ok(out)
}

/// `kudurru cache flush | dump | stats`: one API call, its answer as text lines (or its JSON).
fn cache(command: &CacheCommand) -> Result<String, Failure> {
    let (args, json, method, path) = match command {
        CacheCommand::Flush {
            name,
            subtree,
            json,
            client,
        } => {
            let query = match name {
                Some(name) => format!("?name={}&subtree={subtree}", percent_encode(name)),
                None => String::new(),
            };
            (client, *json, "DELETE", format!("/api/v1/cache{query}"))
        }
        CacheCommand::Dump {
            limit,
            json,
            client,
        } => (
            client,
            *json,
            "GET",
            format!("/api/v1/cache/dump?limit={limit}"),
        ),
        CacheCommand::Stats { json, client } => (client, *json, "GET", "/api/v1/cache".to_owned()),
    };
    let api = api_client(args)?;
    let answer = api.call(method, &path, None)?;
    if answer.status != 200 {
        let message = answer.body["message"].as_str().unwrap_or("");
        return Err(format!("{} answered {}: {message}", api.url(), answer.status).into());
    }
    if json {
        return Ok(format!("{:#}\n", answer.body));
    }
    let cores = answer.body["cores"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    let int = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    match command {
        CacheCommand::Flush { .. } => {
            for c in &cores {
                match c["error"].as_str() {
                    Some(e) => out.push_str(&format!("core {}: {e}\n", int(&c["core"]))),
                    None => out.push_str(&format!(
                        "core {}: removed {} ({} owned, {} L1 copies)\n",
                        int(&c["core"]),
                        int(&c["removed"]),
                        int(&c["shard"]),
                        int(&c["l1"])
                    )),
                }
            }
            out.push_str(&format!("removed {}\n", int(&answer.body["removed"])));
        }
        CacheCommand::Dump { .. } => {
            for c in &cores {
                if let Some(e) = c["error"].as_str() {
                    out.push_str(&format!("; core {}: {e}\n", int(&c["core"])));
                    continue;
                }
                for e in c["entries"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "{}\t{}\t{}\t{}\t{}\n",
                        e["name"].as_str().unwrap_or("?"),
                        int(&e["ttl"]),
                        e["class"].as_str().unwrap_or("?"),
                        e["type"].as_str().unwrap_or("?"),
                        e["rcode"].as_str().unwrap_or("?"),
                    ));
                }
                if c["truncated"] == true {
                    out.push_str(&format!(
                        "; core {}: {} answers, listing cut at --limit\n",
                        int(&c["core"]),
                        int(&c["total"])
                    ));
                }
            }
        }
        CacheCommand::Stats { .. } => {
            out.push_str(&format!(
                "{:<6} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}\n",
                "CORE", "ENTRIES", "CAPACITY", "L1", "L1 CAPACITY", "HITS", "MISSES"
            ));
            for c in &cores {
                out.push_str(&format!(
                    "{:<6} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}\n",
                    int(&c["core"]),
                    int(&c["entries"]),
                    int(&c["capacity"]),
                    int(&c["l1Entries"]),
                    int(&c["l1Capacity"]),
                    int(&c["hits"]),
                    int(&c["misses"])
                ));
            }
        }
    }
    Ok(out)
}

/// `kudurru blocklist refresh NAME`.
fn blocklist(command: &BlocklistCommand) -> Result<String, Failure> {
    let BlocklistCommand::Refresh { name, client } = command;
    let api = api_client(client)?;
    let path = format!("/api/v1/blocklists/{}/refresh", percent_encode(name));
    let answer = api.call("POST", &path, None)?;
    if answer.status != 202 {
        let message = answer.body["message"].as_str().unwrap_or("");
        return Err(format!("{} answered {}: {message}", api.url(), answer.status).into());
    }
    Ok(format!(
        "refresh of {name} started; `kudurru get blocklist {name}` shows its status\n"
    ))
}

/// `kudurru zone records NAME`: every page, as zone-file lines (or each page's JSON).
fn zone(command: &ZoneCommand) -> Result<String, Failure> {
    let ZoneCommand::Records { name, json, client } = command;
    let api = api_client(client)?;
    let mut out = String::new();
    let mut next: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/zones/{}/records?limit=10000", percent_encode(name));
        if let Some(token) = &next {
            path.push_str(&format!("&continue={}", percent_encode(token)));
        }
        let answer = api.call("GET", &path, None)?;
        if answer.status != 200 {
            let message = answer.body["message"].as_str().unwrap_or("");
            return Err(format!("{} answered {}: {message}", api.url(), answer.status).into());
        }
        let body = &answer.body;
        if *json {
            out.push_str(&format!("{body:#}\n"));
        } else {
            if next.is_none() {
                out.push_str(&format!(
                    "; {} serial {} ({} records)\n",
                    body["zone"].as_str().unwrap_or("?"),
                    body["serial"],
                    body["total"]
                ));
            }
            for record in body["records"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "{} {} IN {} {}\n",
                    record["name"].as_str().unwrap_or("?"),
                    record["ttl"],
                    record["type"].as_str().unwrap_or("?"),
                    record["rdata"].as_str().unwrap_or("")
                ));
            }
        }
        match body["continue"].as_str() {
            Some(token) => next = Some(token.to_owned()),
            None => return Ok(out),
        }
    }
}

/// `kudurru blocking check NAME`: the explanation as lines (or its JSON).
fn blocking(command: &BlockingCommand) -> Result<String, Failure> {
    let BlockingCommand::Check {
        name,
        client_address,
        client_id,
        at,
        json,
        client,
    } = command;
    let mut query = format!("name={}", percent_encode(name));
    for (key, value) in [
        ("client", client_address),
        ("clientId", client_id),
        ("at", at),
    ] {
        if let Some(value) = value {
            query.push_str(&format!("&{key}={}", percent_encode(value)));
        }
    }
    let api = api_client(client)?;
    let answer = api.call("GET", &format!("/api/v1/blocking/check?{query}"), None)?;
    if answer.status != 200 {
        let message = answer.body["message"].as_str().unwrap_or("");
        return Err(format!("{} answered {}: {message}", api.url(), answer.status).into());
    }
    if *json {
        return Ok(format!("{:#}\n", answer.body));
    }
    let body = &answer.body;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_owned();
    let names = |v: &serde_json::Value| {
        let names: Vec<&str> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str())
            .collect();
        if names.is_empty() {
            "-".to_owned()
        } else {
            names.join(", ")
        }
    };
    Ok(format!(
        "name:     {}\nclient:   {}\ngroups:   {}\npolicies: {}\nverdict:  {}\npolicy:   {}\nlist:     {}\nrule:     {}\n",
        text(&body["name"]),
        text(&body["client"]),
        names(&body["groups"]),
        names(&body["policies"]),
        text(&body["verdict"]),
        text(&body["policy"]),
        text(&body["list"]),
        text(&body["rule"]),
    ))
}

/// Writes a self-signed pair: the key with mode 0600, created fresh (never through a link).
fn write_certificate(
    cert: &std::path::Path,
    key: &std::path::Path,
    names: &[String],
) -> Result<(), certs::CertError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (cert_pem, key_pem) = certs::generate(names)?;
    let write_error = |path: &std::path::Path| {
        let path = path.to_owned();
        move |source| certs::CertError::Write { path, source }
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(key)
        .map_err(write_error(key))?;
    file.write_all(key_pem.as_bytes())
        .map_err(write_error(key))?;
    std::fs::write(cert, cert_pem).map_err(write_error(cert))
}
