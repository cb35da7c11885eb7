//! What the stores of this crate share beyond the domain rules of
//! [`quartz_core::store::rules`] (re-exported here): the `LIKE` pattern of a
//! search.

pub(crate) use quartz_core::store::rules::*;

/// A case-insensitive `LIKE` pattern (with `ESCAPE '!'`) for text anywhere
/// in a column: `!` escapes the wildcards the same way on the three SQL
/// backends.
pub(crate) fn like_pattern(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len() + 2);
    escaped.push('%');
    for c in text.to_lowercase().chars() {
        if matches!(c, '!' | '%' | '_') {
            escaped.push('!');
        }
        escaped.push(c);
    }
    escaped.push('%');
    escaped
}
