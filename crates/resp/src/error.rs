//! The front-end's two errors: what a store answers ([`StoreError`]) and what a client is
//! answered ([`ReplyError`], an error reply whose text starts with Redis's error class).

use std::fmt;

/// A store's failure, as a [`crate::Backend`] reports it: one line of text. The client sees
/// `-ERR <text>`, or the text as it is when it starts with `OOM ` (a store out of room answers
/// with Redis's own error class for a write past maxmemory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl StoreError {
    pub fn new(msg: impl Into<String>) -> StoreError {
        StoreError(msg.into())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

impl From<String> for StoreError {
    fn from(m: String) -> Self {
        StoreError(m)
    }
}

impl From<&str> for StoreError {
    fn from(m: &str) -> Self {
        StoreError(m.to_string())
    }
}

/// An error reply: its text begins with the error class (`ERR ...`, `WRONGTYPE ...`,
/// `OOM ...`), and goes to the client as `-<text>\r\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError(String);

impl ReplyError {
    /// The reply's text, class first.
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplyError {}

impl From<String> for ReplyError {
    fn from(text: String) -> Self {
        ReplyError(text)
    }
}

impl From<&str> for ReplyError {
    fn from(text: &str) -> Self {
        ReplyError(text.to_string())
    }
}

/// A store's failure as the client sees it.
impl From<StoreError> for ReplyError {
    fn from(e: StoreError) -> Self {
        if e.0.starts_with("OOM ") {
            ReplyError(e.0)
        } else {
            ReplyError(format!("ERR {}", e.0))
        }
    }
}
