//! `kudurru get | apply | delete | enable | disable`: objects from the command line, through a
//! running server's API (so the server's validation, permissions and audit log apply).
//!
//! Files for `apply` are TOML (kudurru's configuration language) or JSON (the API's), chosen
//! by extension; a file holds one object or several (`[[object]]` tables in TOML, an array in
//! JSON). YAML is not read: it would add a parser for a third syntax of the same objects.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{RESOURCES, Resource};
use crate::cli::Output;
use crate::client::{Answer, ApiClient, ClientError};

/// Why an object command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectsCliError {
    /// The kind names no resource.
    #[error("unknown kind {0:?}: known kinds are {known}", known = known_kinds())]
    UnknownKind(String),
    /// The API could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The API refused.
    #[error("{what}: {status} {code}: {message}")]
    Refused {
        /// The object or request.
        what: String,
        /// HTTP status.
        status: u16,
        /// The error's code.
        code: String,
        /// The error's message, with the field when one is named.
        message: String,
    },
    /// A file could not be read or parsed.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong (with the line for TOML).
        message: String,
    },
}

fn known_kinds() -> String {
    RESOURCES
        .iter()
        .map(|r| r.kind)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The resource `name` means: a kind (`ClientGroup`, any case) or a plural (`clientgroups`).
pub fn resource_named(name: &str) -> Result<&'static Resource, ObjectsCliError> {
    RESOURCES
        .iter()
        .find(|r| r.kind.eq_ignore_ascii_case(name) || r.plural.eq_ignore_ascii_case(name))
        .ok_or_else(|| ObjectsCliError::UnknownKind(name.to_owned()))
}

fn refused(what: impl Into<String>, answer: &Answer) -> ObjectsCliError {
    let mut message = answer.body["message"].as_str().unwrap_or("").to_owned();
    if let Some(key) = answer.body["key"].as_str() {
        message = format!("{message} (field {key})");
    }
    ObjectsCliError::Refused {
        what: what.into(),
        status: answer.status,
        code: answer.body["code"].as_str().unwrap_or("").to_owned(),
        message,
    }
}

/// `kudurru get KIND [NAME]`.
pub fn get(
    api: &ApiClient,
    kind: &str,
    name: Option<&str>,
    output: Output,
) -> Result<String, ObjectsCliError> {
    let r = resource_named(kind)?;
    let path = match name {
        Some(name) => format!("/api/v1/{}/{name}", r.plural),
        None => format!("/api/v1/{}", r.plural),
    };
    let answer = api.call("GET", &path, None)?;
    if answer.status != 200 {
        return Err(refused(path, &answer));
    }
    let items: Vec<Value> = match name {
        Some(_) => vec![answer.body.clone()],
        None => answer.body["items"].as_array().cloned().unwrap_or_default(),
    };
    Ok(match output {
        Output::Json => format!("{:#}\n", answer.body),
        Output::Toml => items
            .iter()
            .map(|item| {
                let mut table = toml::Table::new();
                table.insert(
                    "object".into(),
                    toml::Value::Array(vec![to_toml(&editable(item))]),
                );
                toml::to_string(&table).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Output::Table => {
            let mut out = format!(
                "{:<32} {:>10} {:>8} {:<8} {}\n",
                "NAME", "GENERATION", "VERSION", "ENABLED", "LABELS"
            );
            for item in &items {
                let meta = &item["metadata"];
                let enabled = meta["annotations"][kudurru_storage::ENABLED_ANNOTATION]
                    .as_str()
                    .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
                let labels: Vec<String> = meta["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{:<32} {:>10} {:>8} {:<8} {}",
                    meta["name"].as_str().unwrap_or("?"),
                    meta["generation"].as_u64().unwrap_or(0),
                    meta["resourceVersion"].as_str().unwrap_or(""),
                    if enabled { "yes" } else { "no" },
                    labels.join(",")
                );
            }
            out
        }
    })
}

/// What a user edits of an object: kind, name, labels, annotations, spec.
fn editable(object: &Value) -> Value {
    let meta = &object["metadata"];
    let mut metadata = json!({ "name": meta["name"] });
    for field in ["labels", "annotations"] {
        if meta[field].is_object() {
            metadata[field] = meta[field].clone();
        }
    }
    json!({ "kind": object["kind"], "metadata": metadata, "spec": object["spec"] })
}

fn to_toml(value: &Value) -> toml::Value {
    toml::Value::try_from(value).unwrap_or(toml::Value::Table(toml::Table::new()))
}

/// The objects in `path`: a file, or every `.toml` and `.json` file of a directory (sorted).
pub fn read_objects(path: &Path) -> Result<Vec<(PathBuf, Value)>, ObjectsCliError> {
    let file_error = |path: &Path, message: String| ObjectsCliError::File {
        path: path.to_owned(),
        message,
    };
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| file_error(path, e.to_string()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("toml" | "json")
                )
            })
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_owned()]
    };
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| file_error(&file, e.to_string()))?;
        let values: Vec<Value> = match file.extension().and_then(|e| e.to_str()) {
            Some("json") => match serde_json::from_str::<Value>(&text) {
                Ok(Value::Array(items)) => items,
                Ok(item) => vec![item],
                Err(e) => return Err(file_error(&file, e.to_string())),
            },
            Some("toml") => {
                let table: toml::Table = text
                    .parse()
                    .map_err(|e: toml::de::Error| file_error(&file, e.to_string()))?;
                match table.get("object") {
                    Some(toml::Value::Array(items)) => items
                        .iter()
                        .map(|item| serde_json::to_value(item).unwrap_or(Value::Null))
                        .collect(),
                    _ => vec![serde_json::to_value(&table).unwrap_or(Value::Null)],
                }
            }
            _ => {
                return Err(file_error(&file, "expected a .toml or .json file".into()));
            }
        };
        for value in values {
            if !value.is_object() {
                return Err(file_error(&file, "an object must be a table".into()));
            }
            objects.push((file.clone(), value));
        }
    }
    Ok(objects)
}

/// `kudurru apply -f PATH`: creates what does not exist, updates what differs, leaves the rest;
/// one line per object (`clientgroup/lab created`).
pub fn apply(api: &ApiClient, path: &Path) -> Result<String, ObjectsCliError> {
    let mut out = String::new();
    for (file, object) in read_objects(path)? {
        let kind = object["kind"].as_str().unwrap_or_default();
        let r = resource_named(kind).map_err(|_| ObjectsCliError::File {
            path: file.clone(),
            message: format!("kind {kind:?} is not one of {}", known_kinds()),
        })?;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let label = format!("{}/{name}", r.kind.to_ascii_lowercase());
        let wanted = editable(&object);
        let item = format!("/api/v1/{}/{name}", r.plural);
        let current = api.call("GET", &item, None)?;
        let verb = match current.status {
            404 => {
                let answer = api.call("POST", &format!("/api/v1/{}", r.plural), Some(&wanted))?;
                if answer.status != 201 {
                    return Err(refused(label, &answer));
                }
                "created"
            }
            200 if editable(&current.body) == wanted => "unchanged",
            200 => {
                let mut replacement = wanted.clone();
                replacement["metadata"]["resourceVersion"] =
                    current.body["metadata"]["resourceVersion"].clone();
                let answer = api.call("PUT", &item, Some(&replacement))?;
                if answer.status != 200 {
                    return Err(refused(label, &answer));
                }
                "configured"
            }
            _ => return Err(refused(label, &current)),
        };
        let _ = writeln!(out, "{label} {verb}");
    }
    Ok(out)
}

/// `kudurru delete KIND NAME`.
pub fn delete(api: &ApiClient, kind: &str, name: &str) -> Result<String, ObjectsCliError> {
    let r = resource_named(kind)?;
    let answer = api.call("DELETE", &format!("/api/v1/{}/{name}", r.plural), None)?;
    if answer.status != 200 {
        return Err(refused(
            format!("{}/{name}", r.kind.to_ascii_lowercase()),
            &answer,
        ));
    }
    Ok(format!("{}/{name} deleted\n", r.kind.to_ascii_lowercase()))
}

/// `kudurru enable|disable KIND NAME`: the `kudurru.io/enabled` annotation ("false" disables;
/// enabling removes it).
pub fn set_enabled(
    api: &ApiClient,
    kind: &str,
    name: &str,
    enabled: bool,
) -> Result<String, ObjectsCliError> {
    let r = resource_named(kind)?;
    let value = if enabled { Value::Null } else { "false".into() };
    let patch =
        json!({ "metadata": { "annotations": { kudurru_storage::ENABLED_ANNOTATION: value } } });
    let answer = api.call(
        "PATCH",
        &format!("/api/v1/{}/{name}", r.plural),
        Some(&patch),
    )?;
    let label = format!("{}/{name}", r.kind.to_ascii_lowercase());
    if answer.status != 200 {
        return Err(refused(label, &answer));
    }
    Ok(format!(
        "{label} {}\n",
        if enabled { "enabled" } else { "disabled" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_by_kind_or_plural_in_any_case() {
        assert_eq!(
            resource_named("ClientGroup").unwrap().plural,
            "clientgroups"
        );
        assert_eq!(resource_named("clientgroups").unwrap().kind, "ClientGroup");
        assert_eq!(resource_named("CLIENTGROUP").unwrap().kind, "ClientGroup");
        assert!(matches!(
            resource_named("pods"),
            Err(ObjectsCliError::UnknownKind(_))
        ));
    }

    #[test]
    fn toml_and_json_files_hold_one_object_or_several() {
        let dir = std::env::temp_dir().join(format!("kudurru-apply-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("a.toml"),
            "[[object]]\nkind = \"ClientGroup\"\nmetadata = { name = \"a\" }\nspec = { clients = [\"192.0.2.1\"] }\n\n[[object]]\nkind = \"ClientGroup\"\n[object.metadata]\nname = \"b\"\n[object.spec]\nclientIds = [\"b\"]\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("c.json"),
            r#"{"kind":"ClientGroup","metadata":{"name":"c"},"spec":{"clients":["::1"]}}"#,
        )
        .unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let names: Vec<String> = read_objects(&dir)
            .unwrap()
            .iter()
            .map(|(_, o)| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        std::fs::write(dir.join("bad.toml"), "[object\n").unwrap();
        let e = read_objects(&dir.join("bad.toml")).unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("line 1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
