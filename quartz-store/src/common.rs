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

/// Decodes rows one by one: a row that cannot be decoded (edited by hand,
/// or written by a newer build during a rolling upgrade, with a state this
/// build does not know) is set aside with a warning naming it, and the
/// others are served. Membership and recovery read rows this way: one bad
/// row must not stop every node from judging the others or taking over a
/// dead node's fires.
pub(crate) fn decode_each<R, T>(
    rows: &[R],
    what: &'static str,
    decode: impl Fn(&R) -> Result<T, quartz_core::store::StoreError>,
) -> Vec<T> {
    rows.iter()
        .filter_map(|row| match decode(row) {
            Ok(value) => Some(value),
            Err(e) => {
                tracing::warn!(what, error = %e, "a row that cannot be decoded is set aside; the others are served");
                None
            }
        })
        .collect()
}
