//! TSIG keys (RFC 8945) from `zones.tsigKeyFile`, in the format BIND's `tsig-keygen` writes
//! and `nsupdate -k` reads: `key "name" { algorithm hmac-sha256; secret "base64"; };`.
//!
//! The grammar read is the subset of named.conf a key file uses: any number of `key` blocks,
//! each with exactly one `algorithm` and one `secret` statement, and comments in BIND's three
//! styles (`#`, `//`, `/* */`). Anything else is refused with the file and line. The parser
//! is kudurru's own: `domain` reads keys from no text format.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use domain::base::ToName;
use domain::tsig::{Algorithm, Key, KeyName};

/// The largest key file read: a key is under 200 bytes, so this holds thousands.
pub const MAX_KEY_FILE_BYTES: u64 = 1 << 20;

/// The keys by name.
#[derive(Debug, Clone, Default)]
pub struct TsigKeys {
    keys: Vec<Arc<Key>>,
}

/// Why a key file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file cannot be read.
    #[error("{file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_KEY_FILE_BYTES`].
    #[error("{file}: larger than {MAX_KEY_FILE_BYTES} bytes")]
    TooLarge {
        /// The file.
        file: String,
    },
    /// The text does not parse.
    #[error("{file}:{line}: {reason}")]
    Syntax {
        /// The file.
        file: String,
        /// The line (1-based) where the problem is.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

impl TsigKeys {
    /// No keys.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Reads and parses the key file at `path`.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let file = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|source| KeyFileError::Read {
            file: file.clone(),
            source,
        })?;
        if meta.len() > MAX_KEY_FILE_BYTES {
            return Err(KeyFileError::TooLarge { file });
        }
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
            file: file.clone(),
            source,
        })?;
        Self::parse(&text).map_err(|e| e.in_file(file))
    }

    /// Parses key-file text; errors name the line (and `-` as the file).
    pub fn parse(text: &str) -> Result<Self, KeyFileError> {
        let mut tokens = Tokens::new(text);
        let mut keys: Vec<Arc<Key>> = Vec::new();
        while let Some(token) = tokens.next()? {
            let line = token.line;
            if token.text != "key" {
                return Err(syntax(
                    line,
                    format!("expected `key`, found `{}`", token.text),
                ));
            }
            let key = parse_key(&mut tokens, line)?;
            if keys.iter().any(|k| k.name() == key.name()) {
                return Err(syntax(line, format!("key {} defined twice", key.name())));
            }
            keys.push(Arc::new(key));
        }
        Ok(Self { keys })
    }

    /// The key named `name` (case-insensitive, as a domain name; the trailing dot optional).
    pub fn get(&self, name: &str) -> Option<Arc<Key>> {
        let name = key_name(name)?;
        self.keys.iter().find(|k| k.name().name_eq(&name)).cloned()
    }

    /// The key a signed message names: `name` (wire form) with `algorithm`.
    pub fn find<N: ToName>(&self, name: &N, algorithm: Algorithm) -> Option<Arc<Key>> {
        self.keys
            .iter()
            .find(|k| k.name().name_eq(name) && k.algorithm() == algorithm)
            .cloned()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl KeyFileError {
    fn in_file(self, name: String) -> Self {
        match self {
            Self::Syntax { line, reason, .. } => Self::Syntax {
                file: name,
                line,
                reason,
            },
            other => other,
        }
    }
}

fn syntax(line: usize, reason: String) -> KeyFileError {
    KeyFileError::Syntax {
        file: "-".into(),
        line,
        reason,
    }
}

/// A key name as BIND writes it (`"xfr-key"`, `xfr-key.`), as a domain name.
fn key_name(name: &str) -> Option<KeyName> {
    if name.is_empty() || name.len() > 253 {
        return None;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    KeyName::from_str(&format!("{name}.")).ok()
}

/// `"name" { algorithm A; secret "S"; };` after `key`.
fn parse_key(tokens: &mut Tokens<'_>, line: usize) -> Result<Key, KeyFileError> {
    let name_token = tokens.expect(line, "a key name")?;
    let name = key_name(name_token.text).ok_or_else(|| {
        syntax(
            name_token.line,
            format!("bad key name `{}`", name_token.text),
        )
    })?;
    tokens.expect_symbol("{")?;
    let mut algorithm = None;
    let mut secret: Option<Vec<u8>> = None;
    loop {
        let token = tokens.expect(line, "`algorithm`, `secret` or `}`")?;
        match token.text {
            "}" => break,
            "algorithm" => {
                let value = tokens.expect(token.line, "an algorithm")?;
                let parsed = Algorithm::from_str(&value.text.to_ascii_lowercase())
                    .map_err(|_| {
                        syntax(
                            value.line,
                            format!(
                                "unsupported algorithm `{}` (hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512)",
                                value.text
                            ),
                        )
                    })?;
                if algorithm.replace(parsed).is_some() {
                    return Err(syntax(token.line, "algorithm given twice".into()));
                }
                tokens.expect_symbol(";")?;
            }
            "secret" => {
                let value = tokens.expect(token.line, "a base64 secret")?;
                let bits: Vec<u8> = domain::utils::base64::decode(value.text)
                    .map_err(|e| syntax(value.line, format!("secret is not base64: {e}")))?;
                if bits.is_empty() {
                    return Err(syntax(value.line, "empty secret".into()));
                }
                if secret.replace(bits).is_some() {
                    return Err(syntax(token.line, "secret given twice".into()));
                }
                tokens.expect_symbol(";")?;
            }
            other => {
                return Err(syntax(
                    token.line,
                    format!("unknown statement `{other}` in key {name}"),
                ));
            }
        }
    }
    tokens.expect_symbol(";")?;
    let algorithm =
        algorithm.ok_or_else(|| syntax(line, format!("key {name} has no algorithm")))?;
    let secret = secret.ok_or_else(|| syntax(line, format!("key {name} has no secret")))?;
    Key::new(algorithm, &secret, name.clone(), None, None)
        .map_err(|e| syntax(line, format!("key {name}: {e}")))
}

/// One token: a word, a quoted string's contents, or one of `{ } ;`.
#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    text: &'a str,
    line: usize,
}

/// A named.conf tokenizer: words, quoted strings (no escapes: key files have none), the three
/// symbols, and comments skipped.
struct Tokens<'a> {
    rest: &'a str,
    line: usize,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            rest: text,
            line: 1,
        }
    }

    fn advance(&mut self, n: usize) {
        self.line += self.rest[..n].matches('\n').count();
        self.rest = &self.rest[n..];
    }

    fn next(&mut self) -> Result<Option<Token<'a>>, KeyFileError> {
        loop {
            let trimmed = self.rest.trim_start();
            self.advance(self.rest.len() - trimmed.len());
            if self.rest.starts_with('#') || self.rest.starts_with("//") {
                let end = self.rest.find('\n').unwrap_or(self.rest.len());
                self.advance(end);
                continue;
            }
            if self.rest.starts_with("/*") {
                let start = self.line;
                let Some(end) = self.rest[2..].find("*/") else {
                    return Err(syntax(start, "unterminated /* comment".into()));
                };
                self.advance(end + 4);
                continue;
            }
            break;
        }
        let line = self.line;
        let Some(first) = self.rest.chars().next() else {
            return Ok(None);
        };
        if matches!(first, '{' | '}' | ';') {
            let text = &self.rest[..1];
            self.advance(1);
            return Ok(Some(Token { text, line }));
        }
        if first == '"' {
            let Some(end) = self.rest[1..].find(['"', '\n']) else {
                return Err(syntax(line, "unterminated string".into()));
            };
            if self.rest.as_bytes()[1 + end] != b'"' {
                return Err(syntax(line, "unterminated string".into()));
            }
            let text = &self.rest[1..1 + end];
            self.advance(end + 2);
            return Ok(Some(Token { text, line }));
        }
        let end = self
            .rest
            .find(|c: char| c.is_whitespace() || matches!(c, '{' | '}' | ';' | '"' | '#'))
            .unwrap_or(self.rest.len());
        let text = &self.rest[..end];
        self.advance(end);
        Ok(Some(Token { text, line }))
    }

    /// The next token, or an error saying `what` was expected (at `line` when the file ended).
    fn expect(&mut self, line: usize, what: &str) -> Result<Token<'a>, KeyFileError> {
        self.next()?.ok_or_else(|| {
            syntax(
                line.max(self.line),
                format!("file ends where {what} was expected"),
            )
        })
    }

    fn expect_symbol(&mut self, symbol: &str) -> Result<(), KeyFileError> {
        let line = self.line;
        let token = self.expect(line, &format!("`{symbol}`"))?;
        if token.text == symbol {
            Ok(())
        } else {
            Err(syntax(
                token.line,
                format!("expected `{symbol}`, found `{}`", token.text),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What `tsig-keygen -a hmac-sha256 xfr-key` writes (a fresh secret).
    const KEYGEN: &str = "key \"xfr-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"1pQMtVfe0lAF9ZO8mVQ8ubkr5QTnaThsSvRLLqAlnqg=\";\n};\n";

    #[test]
    fn reads_what_tsig_keygen_writes() {
        let keys = TsigKeys::parse(KEYGEN).unwrap();
        assert_eq!(keys.len(), 1);
        let key = keys.get("xfr-key").unwrap();
        assert_eq!(key.algorithm(), Algorithm::Sha256);
        assert_eq!(key.name().to_string(), "xfr-key");
        assert!(
            keys.get("XFR-Key.").is_some(),
            "names compare as domain names"
        );
        assert!(keys.get("other").is_none());
    }

    #[test]
    fn several_keys_and_every_comment_style() {
        let text = "# a comment\n// another\n/* a\n block */ key upd.example. {\n algorithm HMAC-SHA512; secret \"c2VjcmV0\"; };\n".to_owned() + KEYGEN;
        let keys = TsigKeys::parse(&text).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys.get("upd.example").unwrap().algorithm(),
            Algorithm::Sha512
        );
        assert!(keys.get("xfr-key").is_some());
    }

    fn error_line(text: &str) -> (usize, String) {
        match TsigKeys::parse(text).unwrap_err() {
            KeyFileError::Syntax { line, reason, .. } => (line, reason),
            other => panic!("not a syntax error: {other}"),
        }
    }

    #[test]
    fn errors_name_the_line() {
        let (line, reason) =
            error_line("\n\nkey \"k\" {\n algorithm hmac-md5;\n secret \"AA==\";\n};");
        assert_eq!(line, 4);
        assert!(reason.contains("hmac-md5"), "{reason}");
        let (line, reason) =
            error_line("key \"k\" {\n algorithm hmac-sha256;\n secret \"not base64!\";\n};");
        assert_eq!(line, 3);
        assert!(reason.contains("base64"), "{reason}");
        let (line, _) = error_line("key \"k\" {\n algorithm hmac-sha256;\n};");
        assert_eq!(line, 1, "a missing secret names the key's line");
        let (line, reason) = error_line("options { };");
        assert_eq!(line, 1);
        assert!(reason.contains("options"), "{reason}");
        let (_, reason) = error_line(&format!("{KEYGEN}{KEYGEN}"));
        assert!(reason.contains("twice"), "{reason}");
        let (line, reason) =
            error_line("key \"k\" {\n algorithm hmac-sha256;\n secret \"AA==\";\n}");
        assert_eq!(line, 4);
        assert!(reason.contains("ends"), "{reason}");
        let (line, _) = error_line("key \"k\" {\n secret \"AA==\n\";};");
        assert_eq!(line, 2, "an unterminated string");
        let (line, _) = error_line("key k { /* never closed\n");
        assert_eq!(line, 1);
    }

    #[test]
    fn load_names_the_file() {
        let dir = std::env::temp_dir().join(format!("kudurru-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keys.conf");
        std::fs::write(&path, "key \"k\" { algorithm nope; };").unwrap();
        let err = TsigKeys::load(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1:", path.display())), "{err}");
        std::fs::write(&path, KEYGEN).unwrap();
        assert_eq!(TsigKeys::load(&path).unwrap().len(), 1);
        let missing = TsigKeys::load(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("missing"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
