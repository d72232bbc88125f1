//! The OpenAPI 3.0 document of the HTTP API, generated from the route table and the key table,
//! so it cannot drift from the code. `kudurru api openapi` prints it; docs/openapi.json is that
//! output (a test compares them) and the end-to-end suite runs schemathesis against it.

use serde_json::{Map, Value, json};

use crate::api::ROUTES;
use crate::config::{self, KeyInfo, Scope};
use crate::objects::RESOURCES;
use crate::tokens::Permission;

/// Documented ranges of keys whose validation is a plain range (the validator is the authority;
/// cross-key rules such as minTTL <= maxTTL cannot be written in a schema).
fn range(key: &str) -> Option<(u64, Option<u64>)> {
    Some(match key {
        "cache.maxEntries" | "tcp.maxConnectionsPerCore" | "tcp.maxPipelined" => (1, None),
        "cache.servfailTTL" => (1, Some(300)),
        "edns.udpPayload" => (512, Some(4096)),
        "ratelimit.qps" => (0, Some(1_000_000)),
        "ratelimit.burst" => (1, Some(1_000_000)),
        "ratelimit.ipv4Prefix" => (0, Some(32)),
        "ratelimit.ipv6Prefix" => (0, Some(128)),
        "ratelimit.tableSize" => (64, Some(1 << 24)),
        "blocking.maxListBytes" => (1 << 10, Some(1 << 30)),
        "blocking.maxListEntries" => (1, Some(50_000_000)),
        _ => return None,
    })
}

fn value_schema(key: &KeyInfo) -> Value {
    if let Some((min, max)) = range(key.key) {
        let mut schema = json!({ "type": "integer", "minimum": min });
        if let Some(max) = max {
            schema["maximum"] = max.into();
        }
        return schema;
    }
    match key.kind {
        "duration" if key.key == "shutdown.drainDelay" => {
            json!({ "type": "string", "pattern": "^[0-9]+(ms|s|m|h|d)$" })
        }
        "duration" => json!({ "type": "string", "pattern": "^[1-9][0-9]*(ms|s|m|h|d)$" }),
        "integer" | "seconds" => json!({ "type": "integer", "minimum": 0 }),
        "boolean" => json!({ "type": "boolean" }),
        "list of integers" => {
            json!({ "type": "array", "items": { "type": "integer", "minimum": 0 } })
        }
        kind if kind.starts_with("list of") => {
            json!({ "type": "array", "items": { "type": "string" } })
        }
        _ => json!({ "type": "string" }),
    }
}

/// Nested object schema of `keys` (sections become objects).
fn keys_schema<'k>(keys: impl Iterator<Item = &'k KeyInfo>) -> Value {
    let mut root = Map::new();
    for key in keys {
        let mut segments: Vec<&str> = key.key.split('.').collect();
        let last = segments.pop().unwrap_or(key.key);
        let mut current = &mut root;
        for segment in segments {
            let section = current.entry(segment).or_insert_with(
                || json!({ "type": "object", "additionalProperties": false, "properties": {} }),
            );
            current = section["properties"]
                .as_object_mut()
                .expect("sections have properties");
        }
        let mut schema = value_schema(key);
        schema["description"] = format!(
            "{}{}",
            key.description,
            if key.restart_required {
                " (restart)"
            } else {
                " (hot)"
            }
        )
        .into();
        current.insert(last.to_owned(), schema);
    }
    json!({ "type": "object", "additionalProperties": false, "properties": root })
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
    })
}

fn read_schema(with_file: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "required": ["values", "sources", "restartRequired"],
        "properties": {
            "values": { "type": "object" },
            "sources": {
                "type": "object",
                "additionalProperties": {
                    "type": "string",
                    "enum": ["default", "node-file", "settings-file", "api", "env", "flag"]
                }
            },
            "restartRequired": { "type": "array", "items": { "type": "string" } }
        }
    });
    if with_file {
        schema["properties"]["settingsFile"] = json!({ "type": "string", "nullable": true });
        schema["required"]
            .as_array_mut()
            .expect("array")
            .push("settingsFile".into());
    }
    schema
}

fn patch_result() -> Value {
    json!({
        "type": "object",
        "required": ["persisted", "changed", "restartRequired"],
        "properties": {
            "persisted": { "type": "boolean" },
            "changed": { "type": "array", "items": { "type": "string" } },
            "restartRequired": { "type": "array", "items": { "type": "string" } },
            "changes": changes_schema(),
            "version": { "type": "integer", "nullable": true, "description": "the settings version recorded (GET /api/v1/settings/history)" }
        }
    })
}

fn lookup_records() -> Value {
    json!({ "type": "array", "items": {
        "type": "object",
        "required": ["name", "type", "ttl", "data"],
        "properties": {
            "name": { "type": "string" },
            "type": { "type": "string" },
            "ttl": { "type": "integer" },
            "data": { "type": "string" }
        }
    } })
}

fn dry_run_result() -> Value {
    json!({
        "type": "object",
        "required": ["dryRun", "changes", "restartRequired"],
        "properties": {
            "dryRun": { "type": "boolean" },
            "changes": changes_schema(),
            "restartRequired": { "type": "boolean", "description": "whether a changed key needs a restart" }
        }
    })
}

fn session_schema() -> Value {
    json!({
        "type": "object",
        "required": ["role", "tokenId", "via"],
        "properties": {
            "role": { "type": "string", "enum": ["viewer", "operator", "admin"] },
            "tokenId": { "type": "string" },
            "expiresAt": { "type": "string", "format": "date-time" },
            "csrfToken": { "type": "string", "description": "send as X-CSRF-Token on every write made with the session cookie" },
            "via": { "type": "string", "enum": ["session", "bearer"] },
            "permissions": { "type": "array", "items": { "type": "string" }, "description": "what the role may do (settings.write, tokens.admin, ...)" }
        }
    })
}

fn changes_schema() -> Value {
    json!({ "type": "array", "items": {
        "type": "object",
        "required": ["key", "old", "new", "source", "restartRequired"],
        "properties": {
            "key": { "type": "string" },
            "old": {},
            "new": {},
            "source": { "type": "string", "description": "the layer the old value came from" },
            "restartRequired": { "type": "boolean" }
        }
    } })
}

fn token_schema(with_secret: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "required": ["id", "name", "role", "created", "expiresAt"],
        "properties": {
            "id": { "type": "string" },
            "name": { "type": "string" },
            "role": { "type": "string", "enum": ["viewer", "operator", "admin"] },
            "created": { "type": "string", "format": "date-time" },
            "expiresAt": { "type": "string", "format": "date-time" }
        }
    });
    if with_secret {
        schema["required"] = json!(["token", "id", "name", "role", "created", "expiresAt"]);
        schema["properties"]["token"] =
            json!({ "type": "string", "description": "kdr_<id>_<secret>: shown once" });
    }
    schema
}

fn upstreams_schema() -> Value {
    json!({
        "type": "object",
        "required": ["upstreams"],
        "properties": { "upstreams": { "type": "array", "items": {
            "type": "object",
            "required": ["upstream", "queries", "errors", "answered", "mismatchedReplies", "tcpRetries", "tcpConnections", "meanLatencyMs", "healthy"],
            "properties": {
                "upstream": { "type": "string" },
                "queries": { "type": "integer" },
                "errors": { "type": "integer" },
                "answered": { "type": "integer" },
                "mismatchedReplies": { "type": "integer" },
                "tcpRetries": { "type": "integer" },
                "tcpConnections": { "type": "integer" },
                "meanLatencyMs": { "type": "number" },
                "healthy": { "type": "boolean" }
            }
        } } }
    })
}

fn checks_schema() -> Value {
    json!({
        "type": "object",
        "required": ["checks", "counts"],
        "properties": {
            "checks": { "type": "array", "items": {
                "type": "object",
                "required": ["name", "status", "message"],
                "properties": {
                    "name": { "type": "string" },
                    "status": { "type": "string", "enum": ["ok", "warn", "fail"] },
                    "message": { "type": "string" }
                }
            } },
            "counts": {
                "type": "object",
                "required": ["ok", "warn", "fail"],
                "properties": {
                    "ok": { "type": "integer" }, "warn": { "type": "integer" }, "fail": { "type": "integer" }
                }
            }
        }
    })
}

fn messages_schema() -> Value {
    json!({
        "type": "object",
        "required": ["messages"],
        "properties": { "messages": { "type": "array", "items": {
            "type": "object",
            "required": ["severity", "code", "message"],
            "properties": {
                "severity": { "type": "string", "enum": ["info", "warning", "error"] },
                "code": { "type": "string" },
                "message": { "type": "string" }
            }
        } } }
    })
}

/// `{"cores": [...]}` with one object per core: `item`, or an `error` for a core that did not
/// answer in time.
fn per_core_schema(item: Value, extra: Option<(&str, Value)>) -> Value {
    let mut schema = json!({
        "type": "object",
        "required": ["cores"],
        "properties": { "cores": { "type": "array", "items": {
            "type": "object",
            "required": ["core"],
            "properties": item,
        } } }
    });
    if let Some((name, value)) = extra {
        schema["required"] = json!(["cores", name]);
        schema["properties"][name] = value;
    }
    schema["properties"]["cores"]["items"]["properties"]["core"] = json!({ "type": "integer" });
    schema["properties"]["cores"]["items"]["properties"]["error"] = json!({ "type": "string" });
    schema
}

fn cache_stats_schema() -> Value {
    let int = json!({ "type": "integer" });
    per_core_schema(
        json!({
            "entries": int, "capacity": int, "l1Entries": int, "l1Capacity": int,
            "hits": int, "misses": int,
        }),
        None,
    )
}

fn cache_flush_schema() -> Value {
    let int = json!({ "type": "integer" });
    per_core_schema(
        json!({ "removed": int, "shard": int, "l1": int }),
        Some(("removed", int.clone())),
    )
}

fn cache_dump_schema() -> Value {
    per_core_schema(
        json!({
            "total": { "type": "integer" },
            "truncated": { "type": "boolean" },
            "entries": { "type": "array", "items": {
                "type": "object",
                "required": ["name", "type", "class", "ttl", "rcode", "kind"],
                "properties": {
                    "name": { "type": "string" },
                    "type": { "type": "string" },
                    "class": { "type": "string" },
                    "ttl": { "type": "integer" },
                    "rcode": { "type": "string" },
                    "kind": { "type": "string", "enum": ["positive", "negative", "failure"] }
                }
            } }
        }),
        None,
    )
}

/// The query parameters of a fixed route: (name, schema, description).
fn parameters(method: &str, path: &str) -> Vec<(&'static str, Value, &'static str)> {
    match (method, path) {
        ("DELETE", "/api/v1/cache") => vec![
            (
                "name",
                json!({ "type": "string" }),
                "the name to flush (any case; no name flushes everything)",
            ),
            (
                "subtree",
                json!({ "type": "boolean" }),
                "also every name below it",
            ),
        ],
        ("GET", "/api/v1/blocking/check") => vec![
            (
                "name",
                json!({ "type": "string" }),
                "the query name (required; any case, IDNA allowed)",
            ),
            (
                "client",
                json!({ "type": "string" }),
                "the client's IPv4 or IPv6 address (default 0.0.0.0: a client no group holds by address)",
            ),
            (
                "clientId",
                json!({ "type": "string" }),
                "the client ID (DoH path segment or TLS SNI label)",
            ),
            (
                "at",
                json!({ "type": "string", "format": "date-time" }),
                "RFC 3339 instant to resolve schedules at (default: the live index)",
            ),
        ],
        ("GET", "/api/v1/cache/dump") => vec![(
            "limit",
            json!({ "type": "integer", "minimum": 1, "maximum": 100000 }),
            "most entries per core (default 1000)",
        )],
        ("GET", "/api/v1/zones/{name}/records") => vec![
            (
                "limit",
                json!({ "type": "integer", "minimum": 1, "maximum": 10000 }),
                "most records in this page (default 500)",
            ),
            (
                "continue",
                json!({ "type": "string" }),
                "the previous page's continue token",
            ),
        ],
        ("GET", "/api/v1/querylog") => {
            let mut all = querylog_filters();
            all.extend([
                (
                    "limit",
                    json!({ "type": "integer", "minimum": 1 }),
                    "most entries in this page: 1 to 1000, default 100 (an export has no cap and no default)",
                ),
                (
                    "cursor",
                    json!({ "type": "string", "pattern": "^[0-9a-f]{1,32}$" }),
                    "the previous page's `next`",
                ),
                (
                    "follow",
                    json!({ "type": "boolean" }),
                    "true: a live NDJSON stream of entries as they are logged (as /api/v1/querylog/tail; no limit or cursor)",
                ),
            ]);
            all
        }
        ("GET", "/api/v1/querylog/tail") => querylog_filters(),
        ("DELETE", "/api/v1/querylog") => vec![(
            "before",
            json!({ "type": "string" }),
            "required: delete entries logged before this RFC 3339 time or unix ns; 0 deletes all",
        )],
        ("GET", "/api/v1/stats") => vec![
            (
                "from",
                json!({ "type": "string" }),
                "RFC 3339 or unix ns (default: an hour before `to`)",
            ),
            (
                "to",
                json!({ "type": "string" }),
                "RFC 3339 or unix ns (default: now)",
            ),
            (
                "step",
                json!({ "type": "string", "pattern": "^[1-9][0-9]*(m|h|d)$" }),
                "bucket width in whole minutes (default 1m; at most 10000 buckets)",
            ),
            (
                "top",
                json!({ "type": "integer", "minimum": 0, "maximum": 1000 }),
                "length of each top list (default 10)",
            ),
        ],
        _ => Vec::new(),
    }
}

/// The filters of a query-log search, export or tail: each narrows.
fn querylog_filters() -> Vec<(&'static str, Value, &'static str)> {
    let string = json!({ "type": "string" });
    vec![
        ("from", string.clone(), "at or after: RFC 3339 or unix ns"),
        ("to", string.clone(), "before: RFC 3339 or unix ns"),
        (
            "client",
            string.clone(),
            "the client as logged (address, prefix or pseudonym, as privacy keeps it)",
        ),
        (
            "clientId",
            string.clone(),
            "the client ID (DoH path segment or TLS SNI label)",
        ),
        ("qname", string.clone(), "the query name exactly (any case)"),
        ("suffix", string.clone(), "the name or any name below it"),
        (
            "qtype",
            string.clone(),
            "record type: mnemonic (AAAA, TYPE65) or number",
        ),
        (
            "rcode",
            string.clone(),
            "response code: mnemonic (NXDOMAIN), number, or none (dropped)",
        ),
        (
            "blocked",
            json!({ "type": "boolean" }),
            "blocked or rewritten by a policy",
        ),
        ("policy", string.clone(), "the deciding policy"),
        ("group", string.clone(), "the client group"),
        (
            "transport",
            json!({ "type": "string", "enum": ["udp", "tcp", "dot", "doh", "doq", "doh3"] }),
            "how the query arrived",
        ),
        (
            "source",
            json!({ "type": "string", "enum": ["cache", "upstream", "stale", "local", "policy", "dropped"] }),
            "where the answer came from",
        ),
    ]
}

/// One query-log entry as search pages, exports and the tail show it.
fn querylog_entry_schema() -> Value {
    let string = json!({ "type": "string" });
    let nullable = json!({ "type": "string", "nullable": true });
    let flag = json!({ "type": "boolean" });
    json!({
        "type": "object",
        "required": ["time", "timeUnixNs", "client", "clientId", "group", "transport", "source", "qname", "qtype", "rcode", "flags", "answer", "upstream", "upstreamLatencyMs", "policy", "list", "rule", "ede"],
        "properties": {
            "cursor": { "type": "string", "description": "the entry's position (search and export, not the tail)" },
            "time": { "type": "string", "format": "date-time", "description": "RFC 3339, UTC, nanoseconds" },
            "timeUnixNs": { "type": "integer" },
            "client": nullable.clone(),
            "clientId": nullable.clone(),
            "group": string.clone(),
            "transport": { "type": "string", "enum": ["udp", "tcp", "dot", "doh", "doq", "doh3"] },
            "source": { "type": "string", "enum": ["cache", "upstream", "stale", "local", "policy", "dropped"] },
            "qname": string.clone(),
            "qtype": string.clone(),
            "rcode": { "type": "string", "nullable": true, "description": "null: nothing was sent (dropped)" },
            "flags": {
                "type": "object",
                "required": ["dnssecOk", "truncated", "recursionDesired", "blocked", "cloaked", "clipped"],
                "properties": {
                    "dnssecOk": flag.clone(), "truncated": flag.clone(),
                    "recursionDesired": flag.clone(), "blocked": flag.clone(),
                    "cloaked": flag.clone(), "clipped": flag.clone()
                }
            },
            "answer": string,
            "upstream": nullable.clone(),
            "upstreamLatencyMs": { "type": "number", "nullable": true },
            "policy": nullable.clone(),
            "list": nullable.clone(),
            "rule": nullable,
            "ede": { "type": "integer", "nullable": true }
        }
    })
}

fn querylog_stats_schema() -> Value {
    let count = json!({ "type": "integer" });
    let top = |key: &str| {
        json!({ "type": "array", "items": {
            "type": "object",
            "required": [key, "count"],
            "properties": { key: { "type": "string" }, "count": count.clone() }
        } })
    };
    json!({
        "type": "object",
        "required": ["from", "to", "stepSeconds", "totals", "series", "topNames", "topBlocked", "topClients"],
        "properties": {
            "from": { "type": "string", "format": "date-time" },
            "to": { "type": "string", "format": "date-time" },
            "stepSeconds": count.clone(),
            "totals": {
                "type": "object",
                "required": ["queries", "blocked", "cacheHits"],
                "properties": { "queries": count.clone(), "blocked": count.clone(), "cacheHits": count.clone() }
            },
            "series": { "type": "array", "items": {
                "type": "object",
                "required": ["start", "startUnixNs", "queries", "blocked", "cacheHits", "byRcode"],
                "properties": {
                    "start": { "type": "string", "format": "date-time" },
                    "startUnixNs": count.clone(),
                    "queries": count.clone(),
                    "blocked": count.clone(),
                    "cacheHits": count.clone(),
                    "byRcode": { "type": "object", "additionalProperties": count.clone(), "description": "by rcode mnemonic; none: dropped" }
                }
            } },
            "topNames": top("name"),
            "topBlocked": top("name"),
            "topClients": top("client")
        }
    })
}

fn operation(method: &str, path: &str, permission: &str) -> Value {
    let (summary, ok_schema, body) = match (method, path) {
        ("GET", "/api/v1/settings") => (
            "Effective cluster-scope settings with their sources",
            read_schema(true),
            None,
        ),
        ("PATCH", "/api/v1/settings") => (
            "Change cluster-scope settings: validated whole, persisted to the settings file, applied, recorded as a settings version; ?dryRun=true answers the changes only",
            json!({ "anyOf": [patch_result(), dry_run_result()] }),
            Some(keys_schema(
                config::keys().filter(|k| k.scope == Scope::Cluster && !k.host_only),
            )),
        ),
        ("GET", "/api/v1/node/config") => (
            "Effective node-scope configuration with sources",
            read_schema(false),
            None,
        ),
        ("PATCH", "/api/v1/node/config") => (
            "Change node-scope keys in memory (host-only keys refused)",
            patch_result(),
            Some(keys_schema(
                config::keys().filter(|k| k.scope == Scope::Node && !k.host_only),
            )),
        ),
        ("GET", "/api/v1/upstreams") => (
            "Counters, latency and health per upstream",
            upstreams_schema(),
            None,
        ),
        ("GET", "/api/v1/info/messages") => (
            "Diagnoses of the running configuration",
            messages_schema(),
            None,
        ),
        ("GET", "/api/v1/doctor") => ("Self-checks: each ok, warn or fail", checks_schema(), None),
        ("GET", "/api/v1/cluster") => (
            "The fleet as this node sees it (cluster.driver = etcd): its role, the leader's advertised address, the members with their snapshot revisions, etcd's revision; driver none: a single node",
            json!({
                "type": "object",
                "required": ["driver", "role", "connected"],
                "properties": {
                    "driver": { "type": "string", "enum": ["none", "etcd"] },
                    "name": { "type": "string" },
                    "node": { "type": "string" },
                    "advertiseAddress": { "type": "string" },
                    "role": { "type": "string", "enum": ["leader", "follower", "no_leader", "disconnected"] },
                    "leader": { "type": ["string", "null"] },
                    "connected": { "type": "boolean" },
                    "snapshotRevision": { "type": "integer" },
                    "revision": { "type": "integer" },
                    "error": { "type": "string" },
                    "members": {
                        "type": ["array", "null"],
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": { "type": "string" },
                                "advertiseAddress": { "type": "string" },
                                "version": { "type": "string" },
                                "started": { "type": "string" },
                                "snapshotRevision": { "type": "integer" },
                                "leader": { "type": "boolean" },
                                "zones": {
                                    "type": ["array", "null"],
                                    "items": {
                                        "type": "object",
                                        "required": ["zone", "serial"],
                                        "properties": {
                                            "zone": { "type": "string" },
                                            "serial": { "type": "integer" }
                                        }
                                    }
                                },
                                "error": { "type": "string" }
                            }
                        }
                    }
                }
            }),
            None,
        ),
        ("GET", "/internal/zones") => (
            "This node's snapshot revision and the zones it serves with their serials: what another member's GET /api/v1/cluster lists for this node (it asks with its caller's bearer token)",
            json!({
                "type": "object",
                "required": ["snapshotRevision", "zones"],
                "properties": {
                    "snapshotRevision": { "type": "integer" },
                    "zones": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["zone", "serial"],
                            "properties": {
                                "zone": { "type": "string" },
                                "name": { "type": "string" },
                                "type": { "type": "string" },
                                "serial": { "type": "integer" },
                                "records": { "type": "integer" },
                                "names": { "type": "integer" },
                                "expired": { "type": "boolean" }
                            }
                        }
                    }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/cache") => (
            "Cache sizes and counters per core (shard and L1)",
            cache_stats_schema(),
            None,
        ),
        ("DELETE", "/api/v1/cache") => (
            "Flush a name, a subtree or everything from every core's shard and L1",
            cache_flush_schema(),
            None,
        ),
        ("GET", "/api/v1/cache/dump") => (
            "The cached answers each core owns, bounded per core",
            cache_dump_schema(),
            None,
        ),
        ("POST", "/api/v1/blocklists/{name}/refresh") => (
            "Fetch a BlockList's url sources and read its files now, skipping the refresh interval and any failure cooldown (202: started; watch its status)",
            json!({
                "type": "object",
                "required": ["list", "refresh"],
                "properties": {
                    "list": { "type": "string" },
                    "refresh": { "type": "string", "enum": ["started"] }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/zones/{name}/records") => (
            "The records a primary or secondary Zone serves (by the Zone object's name), SOA first then in canonical order, paged",
            json!({
                "type": "object",
                "required": ["zone", "serial", "total", "records"],
                "properties": {
                    "zone": { "type": "string" },
                    "serial": { "type": "integer" },
                    "total": { "type": "integer" },
                    "records": { "type": "array", "items": {
                        "type": "object",
                        "required": ["name", "type", "ttl", "rdata"],
                        "properties": {
                            "name": { "type": "string" },
                            "type": { "type": "string" },
                            "ttl": { "type": "integer" },
                            "rdata": { "type": "string" }
                        }
                    } },
                    "continue": { "type": "string", "description": "present when more records follow" }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/blocking/check") => (
            "Which client groups, policies, list and rule decide a name for a client (schedules at `at`)",
            json!({
                "type": "object",
                "required": ["name", "client", "groups", "policies", "verdict"],
                "properties": {
                    "name": { "type": "string" },
                    "client": { "type": "string" },
                    "at": { "type": "string" },
                    "groups": { "type": "array", "items": { "type": "string" } },
                    "policies": { "type": "array", "items": { "type": "string" } },
                    "verdict": { "type": "string", "enum": ["blocked", "allowed", "rewritten", "none"] },
                    "policy": { "type": "string", "nullable": true },
                    "list": { "type": "string", "nullable": true },
                    "rule": { "type": "string", "nullable": true }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/querylog") => (
            "Logged queries matching the filters, newest first, a page at a time (cursor paging); with Accept: application/x-ndjson or text/csv, a streamed export of every match",
            json!({
                "type": "object",
                "required": ["entries", "next"],
                "properties": {
                    "entries": { "type": "array", "items": querylog_entry_schema() },
                    "next": { "type": "string", "nullable": true, "description": "the cursor of the next page; null on the last" }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/querylog/tail") => (
            "Entries as they are logged, filtered, as newline-delimited JSON until the client leaves or the server stops; a line {\"lost\": n} says n entries were dropped because the client fell behind",
            querylog_entry_schema(),
            None,
        ),
        ("DELETE", "/api/v1/querylog") => (
            "Delete logged queries older than `before` (0: all), in batches; rollups and dictionaries are kept. Each purge is an audit record (GET /api/v1/audit?kind=QueryLog); `audited` is false when it could not be written (the purge stands)",
            json!({
                "type": "object",
                "required": ["deleted", "audited"],
                "properties": {
                    "deleted": { "type": "integer" },
                    "audited": { "type": "boolean" }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/stats") => (
            "Query-log rollups: a time series (queries, blocked, cache hits, by rcode) and the top names, blocked names and clients over the range",
            querylog_stats_schema(),
            None,
        ),
        ("POST", "/api/v1/session") => (
            "Dashboard sign-in: exchange an API token for a session cookie (kudurru_session; HttpOnly, SameSite=Strict, Secure on HTTPS). No credentials needed; failed sign-ins are limited per address (429)",
            session_schema(),
            Some(json!({
                "type": "object",
                "required": ["token"],
                "properties": { "token": { "type": "string" } }
            })),
        ),
        ("GET", "/api/v1/session") => (
            "The caller's role: a session's (with its csrfToken) or a bearer token's (\"via\": \"bearer\")",
            session_schema(),
            None,
        ),
        ("DELETE", "/api/v1/session") => (
            "Sign out: ends the cookie's session (204) and clears the cookie; with a session cookie, needs X-CSRF-Token",
            json!({}),
            None,
        ),
        ("GET", "/api/v1/settings/history") => (
            "Settings versions, newest first: each applied settings change or rollback, who and when, and what it changed",
            json!({
                "type": "object",
                "required": ["versions"],
                "properties": { "versions": { "type": "array", "items": {
                    "type": "object",
                    "required": ["version", "time", "actor", "changes"],
                    "properties": {
                        "version": { "type": "integer" },
                        "time": { "type": "string", "format": "date-time" },
                        "actor": { "type": "string" },
                        "changes": changes_schema()
                    }
                } } }
            }),
            None,
        ),
        ("POST", "/api/v1/settings/rollback") => (
            "Make an earlier version's settings document the cluster settings again (validated, persisted and applied as a PATCH; itself a new version); ?dryRun=true answers the changes only",
            json!({ "anyOf": [patch_result(), dry_run_result()] }),
            Some(json!({
                "type": "object",
                "required": ["version"],
                "properties": { "version": { "type": "integer", "minimum": 1 } }
            })),
        ),
        ("GET", "/api/v1/tokens") => (
            "Every API token: id, name, role, created, expiry (never a secret or hash)",
            json!({
                "type": "object",
                "required": ["tokens"],
                "properties": { "tokens": { "type": "array", "items": token_schema(false) } }
            }),
            None,
        ),
        ("POST", "/api/v1/tokens") => (
            "Create a token (201): the token string is in the answer once, never again",
            token_schema(true),
            Some(json!({
                "type": "object",
                "required": ["name", "role"],
                "properties": {
                    "name": { "type": "string", "maxLength": 64 },
                    "role": { "type": "string", "enum": ["viewer", "operator", "admin"] },
                    "ttl": { "type": "string", "description": "a lifetime such as 30d; at most auth.tokens.maxLifetime (the default)" }
                }
            })),
        ),
        ("DELETE", "/api/v1/tokens/{id}") => (
            "Revoke a token (204); its dashboard sessions end at once",
            json!({}),
            None,
        ),
        ("GET", "/api/v1/lookup") => (
            "A DNS query through the node itself (its first plain-DNS UDP listener, from loopback: cache, blocking, zones and the query log see it as a client's): rcode, flags, answer and authority records in presentation format, the time taken",
            json!({
                "type": "object",
                "required": ["name", "type", "server", "transport", "rcode", "flags", "truncated", "answers", "authority", "timeMs"],
                "properties": {
                    "name": { "type": "string" },
                    "type": { "type": "string" },
                    "server": { "type": "string" },
                    "transport": { "type": "string", "enum": ["udp"] },
                    "rcode": { "type": "string" },
                    "flags": { "type": "array", "items": { "type": "string" } },
                    "truncated": { "type": "boolean" },
                    "answers": lookup_records(),
                    "authority": lookup_records(),
                    "timeMs": { "type": "number" }
                }
            }),
            None,
        ),
        // The dashboard's overview and tools (issue 39, round 2).
        ("GET", "/api/v1/stats/live") => (
            "The data-plane counters /metrics renders, summarised: totals and per core (queries by transport, responses by rcode, dropped, cache hits and hit rate, upstream queries, answers by source: cache, upstream, local, blocked, other), answer latency p50/p90/p99 overall, by transport and per core from the answer latency histogram, upstream latency p50/p90/p99 from the upstream latency histogram, a monotonic time in seconds to compute rates between two polls",
            json!({
                "type": "object",
                "required": ["time", "cores", "total", "perCore", "upstreamLatency", "answerLatency"],
                "properties": {
                    "time": { "type": "number" },
                    "cores": { "type": "integer" },
                    "total": { "$ref": "#/components/schemas/LiveCounters" },
                    "perCore": {
                        "type": "array",
                        "items": {
                            "allOf": [
                                { "$ref": "#/components/schemas/LiveCounters" },
                                {
                                    "type": "object",
                                    "properties": { "answerLatency": { "$ref": "#/components/schemas/AnswerLatency" } }
                                }
                            ]
                        }
                    },
                    "upstreamLatency": { "$ref": "#/components/schemas/LatencyPercentiles" },
                    "answerLatency": { "$ref": "#/components/schemas/AnswerLatency" },
                    "notes": { "type": "object", "additionalProperties": { "type": "string" } }
                }
            }),
            None,
        ),
        ("POST", "/api/v1/zones/{name}/import") => (
            "Replace a primary Zone's RecordSets with a zone file's RRsets (one RecordSet each; the zone's RecordSets not in the file deleted; the SOA skipped: the Zone gives it); ?dryRun=true lists the changes",
            json!({
                "type": "object",
                "required": ["zone", "dryRun", "create", "update", "delete", "unchanged", "skipped"],
                "properties": {
                    "zone": { "type": "string" },
                    "dryRun": { "type": "boolean" },
                    "create": { "type": "array", "items": { "type": "object" } },
                    "update": { "type": "array", "items": { "type": "object" } },
                    "delete": { "type": "array", "items": { "type": "object" } },
                    "unchanged": { "type": "integer" },
                    "skipped": { "type": "array", "items": { "type": "string" } }
                }
            }),
            None,
        ),
        ("GET", "/api/v1/lameduck") => (
            "Whether the node is in lameduck (draining), as the ops listener's GET /lameduck says; entering or leaving it stays on the ops listener, from loopback only",
            json!({
                "type": "object",
                "required": ["lameduck"],
                "properties": { "lameduck": { "type": "boolean" }, "change": { "type": "string" } }
            }),
            None,
        ),
        _ => ("", json!({}), None),
    };
    let mut responses = json!({
        "200": { "description": "OK", "content": { "application/json": { "schema": ok_schema } } },
        "401": error_response("Missing, unknown, revoked or expired token"),
        "403": error_response(&format!("The token's role lacks {permission}")),
    });
    let mut op = json!({
        "summary": summary,
        "description": format!("Needs permission `{permission}`."),
        "security": [{ "bearer": [] }],
    });
    let parameters = parameters(method, path);
    if !parameters.is_empty() {
        responses["400"] = error_response("A query parameter is invalid (it is named)");
        op["parameters"] = parameters
            .into_iter()
            .map(|(name, schema, description)| {
                // `before` is the one required query parameter: a purge names its bound.
                let required = method == "DELETE" && path == "/api/v1/querylog";
                json!({ "name": name, "in": "query", "required": required, "schema": schema, "description": description })
            })
            .collect();
    }
    if path.starts_with("/api/v1/cache") {
        responses["503"] = error_response("No data plane runs");
    }
    if path.contains("{name}") {
        let mut all = vec![
            json!({ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } }),
        ];
        if let Some(query) = op["parameters"].as_array() {
            all.extend(query.iter().cloned());
        }
        op["parameters"] = Value::Array(all);
    }
    if path == "/api/v1/zones/{name}/records" {
        responses["404"] = error_response("No Zone of that name serves data");
        responses["410"] = error_response("The zone changed since the continue token; list again");
        responses["503"] = error_response("No zone manager runs");
    }
    if path == "/api/v1/blocklists/{name}/refresh" {
        if let Some(ok) = responses.as_object_mut().and_then(|r| r.remove("200")) {
            responses["202"] = ok;
            responses["202"]["description"] = "Accepted: the refresh started".into();
        }
        responses["404"] = error_response("No BlockList of that name");
        responses["409"] =
            error_response("The BlockList is disabled (kudurru.io/enabled: \"false\")");
        responses["503"] = error_response("No list manager runs");
    }
    if path == "/api/v1/querylog" && method == "GET" {
        let entry = querylog_entry_schema();
        responses["200"]["content"]["application/x-ndjson"] = json!({ "schema": entry });
        responses["200"]["content"]["text/csv"] = json!({ "schema": { "type": "string" } });
        responses["200"]["description"] =
            "A page (JSON), or the export: one entry per line (NDJSON) or CSV with a header row (RFC 4180)".into();
    }
    if path == "/api/v1/querylog/tail" {
        let entry = responses["200"]["content"]["application/json"]["schema"].take();
        responses["200"]["content"] = json!({ "application/x-ndjson": { "schema": entry } });
    }
    if path.starts_with("/api/v1/querylog") || path == "/api/v1/stats" {
        responses["409"] = error_response(
            "not_searchable: the query log keeps no database here (querylog.sink is not redb, or the log is off); the message names the sink",
        );
        responses["500"] = error_response("The query-log database failed");
        responses["503"] = error_response("The request could not finish: the server is stopping");
    }
    if path == "/api/v1/tokens" && method == "POST" {
        responses["503"] = error_response(
            "not_audited: the token's audit record could not be written, so it was not created",
        );
    }
    if path == "/api/v1/blocking/check" {
        responses["503"] =
            error_response("No list manager runs, or the policy index is not built yet");
    }
    if let Some(schema) = body {
        for (status, why) in [
            (
                "400",
                "Invalid JSON, unknown key, wrong scope, host-only key or invalid value (the key is named)",
            ),
            (
                "409",
                "The key is held by the environment or a flag, or the settings file does not parse",
            ),
            (
                "408",
                "The body did not arrive within 10 s of the request head",
            ),
            ("413", "Body larger than 64 KiB"),
            ("415", "Content-Type is not application/json"),
        ] {
            responses[status] = error_response(why);
        }
        op["requestBody"] =
            json!({ "required": true, "content": { "application/json": { "schema": schema } } });
    }
    // The dashboard's routes: dry runs, created and empty answers, the unauthenticated
    // sign-in.
    if (method == "PATCH" && path == "/api/v1/settings") || path == "/api/v1/settings/rollback" {
        let dry = json!({ "name": "dryRun", "in": "query", "required": false, "schema": { "type": "boolean" }, "description": "true: answer {dryRun, changes, restartRequired (boolean)} and change nothing" });
        op["parameters"] = json!([dry]);
    }
    if path == "/api/v1/zones/{name}/import" {
        op["parameters"] = json!([
            { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } },
            { "name": "dryRun", "in": "query", "required": false, "schema": { "type": "boolean" }, "description": "true: answer the changes (dryRun true) and write nothing" }
        ]);
        op["requestBody"] = json!({ "required": true, "content": {
            "text/dns": { "schema": { "type": "string" } },
            "text/plain": { "schema": { "type": "string" } }
        } });
        responses["400"] = error_response(
            "invalid_zone_file (the line is named: import:N), $INCLUDE, or an invalid dryRun",
        );
        responses["404"] = error_response("No Zone of that name");
        responses["409"] = error_response("The Zone is not a primary zone");
        responses["413"] = error_response("Body larger than 64 KiB");
        responses["415"] = error_response("Content-Type is not text/dns or text/plain");
    }
    if path == "/api/v1/lookup" {
        op["parameters"] = json!([
            { "name": "name", "in": "query", "required": true, "schema": { "type": "string" }, "description": "the name to look up" },
            { "name": "type", "in": "query", "required": false, "schema": { "type": "string" }, "description": "a record type (A, AAAA, MX, TYPE65, ...); default A" }
        ]);
        responses["400"] = error_response("name or type is invalid (it is named)");
        responses["409"] =
            error_response("no_udp_listener: the node has no plain DNS UDP listener");
        responses["502"] = error_response("lookup_failed: the node's answer could not be read");
        responses["504"] = error_response("lookup_timeout: no answer within 5 s");
    }
    if path == "/api/v1/settings/history" {
        op["parameters"] = json!([{ "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": 10000 }, "description": "the newest N versions (default 100)" }]);
        responses["400"] = error_response("limit is out of range (it is named)");
    }
    if path == "/api/v1/settings/rollback" {
        responses["404"] = error_response("No settings version of that number");
        responses["410"] = error_response("The version's document was pruned from the audit log");
    }
    if method == "POST"
        && path == "/api/v1/tokens"
        && let Some(ok) = responses.as_object_mut().and_then(|r| r.remove("200"))
    {
        responses["201"] = ok;
        responses["201"]["description"] = "Created".into();
    }
    if method == "DELETE" && (path == "/api/v1/session" || path == "/api/v1/tokens/{id}") {
        if let Some(map) = responses.as_object_mut() {
            map.remove("200");
        }
        responses["204"] = json!({ "description": "Done" });
        if path == "/api/v1/session" {
            responses["400"] = error_response("no_session: the request came with a bearer token");
        }
        if path == "/api/v1/tokens/{id}" {
            responses["404"] = error_response("No token of that id");
            op["parameters"] = json!([{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }]);
        }
    }
    if path == "/api/v1/session" && method == "POST" {
        op["security"] = json!([]);
        op["description"] = "No credentials: the body carries the token.".into();
        responses["401"] = error_response("Unknown, revoked or expired token");
        responses["403"] =
            error_response("csrf: an Origin header that is not the API's own (login CSRF)");
        responses["429"] =
            error_response("Too many failed sign-ins from this address (Retry-After)");
    }
    if path != "/api/v1/session" || method != "POST" {
        responses["403"]["description"] = format!(
            "The token's role lacks {permission}; or, with a session cookie, a write without the session's X-CSRF-Token or from another Origin (code csrf)"
        )
        .into();
    }
    op["responses"] = responses;
    op
}

/// An object route's operation: summary, permission, parameters, body and responses.
fn object_operation(
    summary: String,
    permission: Permission,
    parameters: Value,
    body: Option<Value>,
    ok: (&str, Value),
) -> Value {
    let mut responses = json!({
        "400": error_response("Invalid input: the field is named in `key`"),
        "401": error_response("Missing, unknown, revoked or expired token"),
        "403": error_response(&format!("The token's role lacks {}", permission.name())),
        "404": error_response("No such object"),
    });
    responses[ok.0] =
        json!({ "description": "OK", "content": { "application/json": { "schema": ok.1 } } });
    let mut op = json!({
        "summary": summary,
        "description": format!("Needs permission `{}`.", permission.name()),
        "security": [{ "bearer": [] }],
        "parameters": parameters,
        "responses": responses,
    });
    if let Some(schema) = body {
        for (status, why) in [
            (
                "408",
                "The body did not arrive within 10 s of the request head",
            ),
            (
                "409",
                "Already exists, or resourceVersion conflict (the current one is in `currentResourceVersion`)",
            ),
            ("413", "Body larger than 1 MiB"),
            (
                "415",
                "Content-Type is not application/json (or application/merge-patch+json for PATCH)",
            ),
        ] {
            op["responses"][status] = error_response(why);
        }
        op["requestBody"] = json!({ "required": true, "content": {
            "application/json": { "schema": schema },
        } });
    }
    op
}

fn object_schema(kind: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "kind": { "type": "string", "enum": [kind] },
            "metadata": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" },
                    "uid": { "type": "string" },
                    "resourceVersion": { "type": "string" },
                    "generation": { "type": "integer" },
                    "creationTimestamp": { "type": "string" },
                    "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                    "annotations": { "type": "object", "additionalProperties": { "type": "string" } }
                }
            },
            "spec": { "type": "object" },
            "status": { "type": "object" }
        }
    })
}

/// The object routes of every resource, and the audit log.
fn object_paths(paths: &mut Map<String, Value>) {
    let name =
        json!({ "name": "name", "in": "path", "required": true, "schema": { "type": "string" } });
    let string = |name: &str, description: &str| json!({ "name": name, "in": "query", "required": false, "description": description, "schema": { "type": "string" } });
    for r in RESOURCES {
        let object = object_schema(r.kind);
        let list = json!({ "type": "object", "required": ["kind", "metadata", "items"], "properties": {
            "kind": { "type": "string" },
            "metadata": { "type": "object" },
            "items": { "type": "array", "items": object.clone() }
        } });
        let collection = format!("/api/v1/{}", r.plural);
        paths.insert(collection.clone(), json!({
            "get": object_operation(
                format!("List {}s ({}); with watch=true, a stream of newline-delimited JSON events", r.kind, r.summary),
                Permission::ObjectsRead,
                json!([
                    string("labelSelector", "a=b, a!=b, a, !a, comma-separated"),
                    string("limit", "page size"),
                    string("continue", "the previous page's metadata.continue"),
                    string("watch", "true: stream ADDED, MODIFIED, DELETED, BOOKMARK events"),
                    string("resourceVersion", "watch from this version"),
                    string("allowWatchBookmarks", "true: BOOKMARK events"),
                ]),
                None,
                ("200", list),
            ),
            "post": object_operation(
                format!("Create a {}", r.kind),
                r.write,
                json!([]),
                Some(object.clone()),
                ("201", object.clone()),
            ),
        }));
        let item = format!("{collection}/{{name}}");
        paths.insert(item.clone(), json!({
            "get": object_operation(format!("Read a {}", r.kind), Permission::ObjectsRead, json!([name]), None, ("200", object.clone())),
            "put": object_operation(format!("Replace a {} (metadata.resourceVersion required)", r.kind), r.write, json!([name]), Some(object.clone()), ("200", object.clone())),
            "patch": object_operation(format!("Merge-patch a {}'s labels, annotations and spec (RFC 7386)", r.kind), r.write, json!([name]), Some(object.clone()), ("200", object.clone())),
            "delete": object_operation(format!("Delete a {}", r.kind), r.write, json!([name, string("resourceVersion", "delete only at this version")]), None, ("200", object.clone())),
        }));
        paths.insert(format!("{item}/status"), json!({
            "get": object_operation(format!("Read a {} with its status", r.kind), Permission::ObjectsRead, json!([name]), None, ("200", object.clone())),
            "put": object_operation(format!("Replace a {}'s status (controllers)", r.kind), Permission::ObjectsAdmin, json!([name]), Some(object.clone()), ("200", object)),
        }));
    }
    let mut audit = object_operation(
        "Audit records of object changes, oldest first".into(),
        Permission::AuditRead,
        json!([
            string("since", "RFC 3339 time"),
            string("until", "RFC 3339 time"),
            string("actor", "token:<id> or system:<component>"),
            string("kind", "object kind"),
            string("name", "object name"),
            string("limit", "1 to 10000 (default 1000)"),
        ]),
        None,
        (
            "200",
            json!({ "type": "object", "required": ["records"], "properties": { "records": { "type": "array", "items": { "type": "object" } } } }),
        ),
    );
    if let Some(responses) = audit["responses"].as_object_mut() {
        responses.remove("404");
    }
    paths.insert("/api/v1/audit".into(), json!({ "get": audit }));
}

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for &(method, path, permission) in ROUTES {
        let entry = paths.entry(path).or_insert_with(|| json!({}));
        entry[method.to_ascii_lowercase()] = operation(method, path, permission.name());
    }
    object_paths(&mut paths);
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "kudurru API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "JSON API of a kudurru node. Bearer tokens from `kudurru token create`; roles viewer < operator < admin."
        },
        "paths": paths,
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": { "Error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": { "type": "string" },
                    "message": { "type": "string" },
                    "key": { "type": "string" },
                    "currentResourceVersion": { "type": "string" },
                    "leader": { "type": "string", "description": "not_leader: the leader's advertised address (send the request there)" }
                }
            },
            // GET /api/v1/stats/live (issue 39): one contiguous block.
            "LatencyPercentiles": {
                "type": "object",
                "description": "a latency histogram's count and percentiles in milliseconds (µs precision), interpolated inside its buckets; null while it is empty",
                "required": ["count", "p50Ms", "p90Ms", "p99Ms"],
                "properties": {
                    "count": { "type": "integer" },
                    "p50Ms": { "type": "number", "nullable": true },
                    "p90Ms": { "type": "number", "nullable": true },
                    "p99Ms": { "type": "number", "nullable": true }
                }
            },
            "AnswerLatency": {
                "description": "answer latency (receipt to hand-over to the send path; kudurru_answer_latency_seconds): all transports, and byTransport",
                "allOf": [
                    { "$ref": "#/components/schemas/LatencyPercentiles" },
                    {
                        "type": "object",
                        "required": ["byTransport"],
                        "properties": {
                            "byTransport": {
                                "type": "object",
                                "description": "keyed by transport: udp, tcp, dot, doh, doq, doh3",
                                "additionalProperties": { "$ref": "#/components/schemas/LatencyPercentiles" }
                            }
                        }
                    }
                ]
            },
            "LiveCounters": {
                "type": "object",
                "description": "counters since start, of the node (total) or one core (perCore)",
                "properties": {
                    "queries": { "type": "integer" },
                    "queriesByTransport": { "type": "object", "additionalProperties": { "type": "integer" } },
                    "responsesByRcode": { "type": "object", "additionalProperties": { "type": "integer" } },
                    "dropped": { "type": "integer" },
                    "cacheHits": { "type": "integer" },
                    "cacheMisses": { "type": "integer" },
                    "cacheHitRate": { "type": "number", "nullable": true },
                    "upstreamQueries": { "type": "integer" },
                    "staleAnswers": { "type": "integer" },
                    "rateLimited": { "type": "integer" },
                    "aclRefused": { "type": "integer" },
                    "answersBySource": {
                        "type": "object",
                        "description": "answers sent, by source (kudurru_answers_total)",
                        "required": ["cache", "upstream", "local", "blocked", "other"],
                        "properties": {
                            "cache": { "type": "integer", "description": "the cache, stale answers included" },
                            "upstream": { "type": "integer" },
                            "local": { "type": "integer", "description": "local zones, built-in names" },
                            "blocked": { "type": "integer", "description": "policy answers: block, rewrite, cloaking" },
                            "other": { "type": "integer", "description": "error answers: FORMERR, NOTIMP, REFUSED, SERVFAIL" }
                        }
                    }
                }
            } }
        }
    })
}

/// The document as docs/openapi.json holds it.
pub fn render() -> String {
    serde_json::to_string_pretty(&document()).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_openapi_json_matches_the_code() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
                .unwrap();
        assert_eq!(
            doc,
            render(),
            "docs/openapi.json is stale: regenerate with `kudurru api openapi > docs/openapi.json`"
        );
    }

    #[test]
    fn every_route_is_documented_with_its_errors() {
        let doc = document();
        for &(method, path, _) in ROUTES {
            let op = &doc["paths"][path][method.to_ascii_lowercase()];
            assert!(op.is_object(), "{method} {path}");
            let ok = if path.ends_with("/refresh") {
                "202"
            } else if method == "POST" && path == "/api/v1/tokens" {
                "201"
            } else if method == "DELETE"
                && (path == "/api/v1/session" || path.starts_with("/api/v1/tokens/"))
            {
                "204"
            } else {
                "200"
            };
            for status in [ok, "401", "403"] {
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path} {status}"
                );
            }
            if method == "PATCH" {
                for status in ["400", "408", "409", "413", "415"] {
                    assert!(
                        op["responses"][status].is_object(),
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
}
