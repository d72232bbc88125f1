//! The key table as Markdown: docs/configuration.md's reference section is this output, and a
//! test fails when the file drifts from it.

use super::{Config, Scope, keys};

/// Renders the key table as the Markdown of docs/configuration.md's reference section.
pub fn render_key_table() -> String {
    let defaults = Config::default();
    let mut out = String::from(
        "| key | type | default | scope | host only | applies | environment | description |\n|---|---|---|---|---|---|---|---|\n",
    );
    for k in keys() {
        let default = k.get(&defaults);
        let default = if default.is_empty() {
            "(empty)".to_owned()
        } else {
            format!("`{default}`")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | `{}` | {} |\n",
            k.key,
            k.kind,
            default,
            match k.scope {
                Scope::Node => "node",
                Scope::Cluster => "cluster",
            },
            if k.host_only { "yes" } else { "no" },
            if k.restart_required { "restart" } else { "hot" },
            k.env_var(),
            k.description,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_configuration_md_matches_the_key_table() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/configuration.md"
        ))
        .unwrap();
        assert!(
            doc.contains(&render_key_table()),
            "docs/configuration.md is stale: regenerate its table with `kudurru config keys`"
        );
    }
}
