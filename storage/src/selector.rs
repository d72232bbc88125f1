//! Label selectors as Kubernetes writes them, equality and existence forms:
//! `tier=edge,site!=lab,managed,!legacy` (`==` is `=`). Set forms (`in`, `notin`) are refused
//! with an error, not misread.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{Result, StoreError};

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl LabelSelector {
    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses `text`; errors name the field `labelSelector`.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |message: String| StoreError::invalid("labelSelector", message);
        let mut requirements = Vec::new();
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        for part in text.split(',') {
            let part = part.trim();
            let requirement = if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) = part.split_once("==").or(part.split_once('=')) {
                Requirement::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_owned())
            } else {
                Requirement::Exists(part.to_owned())
            };
            let (key, value) = match &requirement {
                Requirement::Equals(key, value) | Requirement::NotEquals(key, value) => {
                    (key, Some(value))
                }
                Requirement::Exists(key) | Requirement::NotExists(key) => (key, None),
            };
            if key.is_empty() {
                return Err(invalid(format!("{part:?} has no label key")));
            }
            if key.contains(char::is_whitespace) || key.contains(['(', ')', '=', '!']) {
                return Err(invalid(format!(
                    "{part:?}: only key=value, key!=value, key and !key are supported"
                )));
            }
            if value.is_some_and(|value| value.contains(char::is_whitespace)) {
                return Err(invalid(format!("{part:?}: a value has no spaces")));
            }
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                Requirement::Equals(key, value) => labels.get(key) == Some(value),
                Requirement::NotEquals(key, value) => labels.get(key) != Some(value),
                Requirement::Exists(key) => labels.contains_key(key),
                Requirement::NotExists(key) => !labels.contains_key(key),
            })
    }

    /// Whether this is the selector that matches everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            match requirement {
                Requirement::Equals(key, value) => write!(f, "{key}={value}")?,
                Requirement::NotEquals(key, value) => write!(f, "{key}!={value}")?,
                Requirement::Exists(key) => f.write_str(key)?,
                Requirement::NotExists(key) => write!(f, "!{key}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn equality_and_existence_requirements_all_hold() {
        let selector = LabelSelector::parse("tier=edge, site!=lab,managed,!legacy").unwrap();
        assert!(selector.matches(&labels(&[("tier", "edge"), ("managed", "")])));
        assert!(!selector.matches(&labels(&[("tier", "edge")])));
        assert!(!selector.matches(&labels(&[
            ("tier", "edge"),
            ("managed", "y"),
            ("site", "lab")
        ])));
        assert!(!selector.matches(&labels(&[
            ("tier", "edge"),
            ("managed", "y"),
            ("legacy", "")
        ])));
        assert_eq!(selector.to_string(), "tier=edge,site!=lab,managed,!legacy");
        assert!(
            LabelSelector::parse("a==b")
                .unwrap()
                .matches(&labels(&[("a", "b")]))
        );
        assert!(LabelSelector::parse(" ").unwrap().is_everything());
    }

    #[test]
    fn set_based_forms_are_refused_not_misread() {
        for bad in ["tier in (a,b)", "=x", "a,,b", "!", "a=b c"] {
            let Err(StoreError::Invalid { field, .. }) = LabelSelector::parse(bad) else {
                panic!("{bad:?} accepted");
            };
            assert_eq!(field, "labelSelector");
        }
    }
}
